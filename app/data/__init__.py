"""The Data tab: the project, imports, gold, notes, judges, references and the audit trail."""
