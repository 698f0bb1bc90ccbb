"""Pair selection, the label queue, agreement statistics, synthetic annotators, import/export. No SQL, no UI."""
