"""The store's first twelve schema migrations (m001-m012), as plain functions: `storage.migrations` registers them,
in `FIRST_MIGRATIONS` order, before the newer ones. Applied migrations are never edited."""

from sqlite_utils import Database


def run_script(db: Database, script: str) -> None:
    """Run DDL statement by statement: `executescript` would commit the migration's transaction early."""
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def m001_initial(db: Database) -> None:
    run_script(db,
        """
        CREATE TABLE prompts (
            id INTEGER PRIMARY KEY,
            text TEXT NOT NULL UNIQUE,
            source TEXT,
            heldout INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL
        );
        CREATE TABLE policies (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            parent_id INTEGER REFERENCES policies(id),
            round INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL,
            note TEXT
        );
        CREATE TABLE generations (
            id INTEGER PRIMARY KEY,
            prompt_id INTEGER NOT NULL REFERENCES prompts(id),
            policy_id INTEGER REFERENCES policies(id),
            text TEXT NOT NULL,
            token_count INTEGER,
            params TEXT NOT NULL DEFAULT '{}',
            seed INTEGER,
            ended_with_eos INTEGER,
            source TEXT,
            created REAL NOT NULL
        );
        CREATE INDEX generations_prompt ON generations(prompt_id);
        CREATE INDEX generations_policy ON generations(policy_id);
        CREATE TABLE pairs (
            id INTEGER PRIMARY KEY,
            prompt_id INTEGER NOT NULL REFERENCES prompts(id),
            first_id INTEGER NOT NULL REFERENCES generations(id),
            second_id INTEGER NOT NULL REFERENCES generations(id),
            round INTEGER NOT NULL DEFAULT 0,
            policy_id INTEGER REFERENCES policies(id),
            selector TEXT NOT NULL,
            score REAL,
            created REAL NOT NULL,
            CHECK (first_id != second_id)
        );
        CREATE INDEX pairs_queue_order ON pairs(round DESC, score DESC, id);
        CREATE TABLE reservations (
            pair_id INTEGER NOT NULL REFERENCES pairs(id),
            annotator TEXT NOT NULL,
            expires REAL NOT NULL,
            PRIMARY KEY (pair_id, annotator)
        );
        CREATE TABLE labels (
            id INTEGER PRIMARY KEY,
            pair_id INTEGER NOT NULL REFERENCES pairs(id),
            annotator TEXT NOT NULL,
            outcome TEXT NOT NULL CHECK (outcome IN ('first', 'second', 'tie', 'both_bad', 'skip')),
            left_id INTEGER REFERENCES generations(id),
            decision_ms INTEGER,
            vote_id TEXT UNIQUE,
            created REAL NOT NULL,
            undone REAL
        );
        CREATE UNIQUE INDEX labels_current ON labels(pair_id, annotator) WHERE undone IS NULL;
        CREATE INDEX labels_annotator ON labels(annotator, created);
        CREATE TABLE reward_models (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL,
            policy_id INTEGER REFERENCES policies(id),
            round INTEGER NOT NULL DEFAULT 0,
            labels_used INTEGER NOT NULL,
            metrics TEXT NOT NULL DEFAULT '{}',
            norm_mean REAL NOT NULL DEFAULT 0,
            norm_std REAL NOT NULL DEFAULT 1,
            ensemble_index INTEGER NOT NULL DEFAULT 0,
            ensemble_size INTEGER NOT NULL DEFAULT 1,
            job_id INTEGER REFERENCES jobs(id),
            created REAL NOT NULL
        );
        CREATE TABLE jobs (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            config TEXT NOT NULL DEFAULT '{}',
            status TEXT NOT NULL,
            pid INTEGER,
            heartbeat REAL,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            phase TEXT,
            progress REAL,
            created REAL NOT NULL,
            started REAL,
            finished REAL
        );
        CREATE TABLE metrics (
            job_id INTEGER NOT NULL REFERENCES jobs(id),
            step INTEGER NOT NULL,
            name TEXT NOT NULL,
            value REAL NOT NULL,
            created REAL NOT NULL,
            PRIMARY KEY (job_id, name, step)
        );
        CREATE TABLE settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """
    )


def m002_rounds_and_job_logs(db: Database) -> None:
    run_script(db,
        """
        CREATE TABLE rounds (
            id INTEGER PRIMARY KEY,
            job_id INTEGER REFERENCES jobs(id),
            round INTEGER NOT NULL,
            config TEXT NOT NULL DEFAULT '{}',
            summary TEXT NOT NULL DEFAULT '{}',
            policy_id INTEGER REFERENCES policies(id),
            reward_model_id INTEGER REFERENCES reward_models(id),
            created REAL NOT NULL
        );
        CREATE TABLE job_logs (
            id INTEGER PRIMARY KEY,
            job_id INTEGER NOT NULL REFERENCES jobs(id),
            created REAL NOT NULL,
            line TEXT NOT NULL
        );
        CREATE INDEX job_logs_job ON job_logs(job_id, id);
        """
    )


def m003_reservation_sides_and_label_margin(db: Database) -> None:
    """Reservations remember which generation is shown on the left and since when; imported labels keep a margin."""
    run_script(db,
        """
        ALTER TABLE reservations ADD COLUMN left_id INTEGER REFERENCES generations(id);
        ALTER TABLE reservations ADD COLUMN shown REAL;
        CREATE INDEX reservations_annotator ON reservations(annotator);
        ALTER TABLE labels ADD COLUMN margin REAL;
        """
    )


def m004_generation_scores(db: Database) -> None:
    """Scores of generations by name (`oracle`, `reward`), e.g. of each policy's held-out evaluation samples."""
    run_script(db,
        """
        CREATE TABLE generation_scores (
            generation_id INTEGER NOT NULL REFERENCES generations(id),
            name TEXT NOT NULL,
            value REAL NOT NULL,
            PRIMARY KEY (generation_id, name)
        );
        CREATE INDEX generations_source ON generations(source, policy_id);
        """
    )


def m005_pair_vote_counts(db: Database) -> None:
    """`pairs.votes` = current non-skip labels, kept by triggers, so the queue skips filled pairs from an index."""
    db.execute("ALTER TABLE pairs ADD COLUMN votes INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE pairs SET votes = (SELECT count(*) FROM labels l WHERE l.pair_id = pairs.id"
               " AND l.undone IS NULL AND l.outcome != 'skip')")
    db.execute("CREATE INDEX pairs_queue_votes ON pairs(round DESC, score DESC, id, votes, selector)")
    for statement in (  # trigger bodies hold ';', so they cannot go through run_script
        """CREATE TRIGGER labels_votes_insert AFTER INSERT ON labels
           WHEN NEW.undone IS NULL AND NEW.outcome != 'skip'
           BEGIN UPDATE pairs SET votes = votes + 1 WHERE id = NEW.pair_id; END""",
        """CREATE TRIGGER labels_votes_delete AFTER DELETE ON labels
           WHEN OLD.undone IS NULL AND OLD.outcome != 'skip'
           BEGIN UPDATE pairs SET votes = votes - 1 WHERE id = OLD.pair_id; END""",
        """CREATE TRIGGER labels_votes_update AFTER UPDATE OF undone, outcome, pair_id ON labels
           BEGIN
             UPDATE pairs SET votes = votes - 1 WHERE id = OLD.pair_id AND OLD.undone IS NULL AND OLD.outcome != 'skip';
             UPDATE pairs SET votes = votes + 1 WHERE id = NEW.pair_id AND NEW.undone IS NULL AND NEW.outcome != 'skip';
           END""",
    ):
        db.execute(statement)


def m006_metrics_series_index(db: Database) -> None:
    """A covering index for reading a job's metric series by name: the Curves tab reads them without table lookups."""
    db.execute("CREATE INDEX metrics_series ON metrics(job_id, name, step, value, created)")


def m007_preference_import_lookups(db: Database) -> None:
    """Indexes for the preference import's lookups, which scanned tables row by row: a pair by its two generations,
    and an imported response by prompt and text (imported responses only: policy samples' texts stay unindexed)."""
    run_script(db,
        """
        CREATE INDEX pairs_generations ON pairs(first_id, second_id);
        CREATE INDEX generations_imported_text ON generations(prompt_id, text) WHERE source GLOB 'import:*';
        """
    )


def m008_prompt_messages(db: Database) -> None:
    """A prompt may be a conversation: its turns as JSON (`text` keeps its plain-text form, the dedupe key)."""
    db.execute("ALTER TABLE prompts ADD COLUMN messages TEXT")


def m009_audit_trail(db: Database) -> None:
    """The audit trail: who did what to the studio (start a job, change settings, import, export) and when."""
    run_script(db,
        """
        CREATE TABLE audit (
            id INTEGER PRIMARY KEY,
            at REAL NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX audit_at ON audit(at)
        """
    )


def m010_job_warnings_and_audit_pairs(db: Database) -> None:
    """Failure warnings as a job fired them (once per rule and round), and the audit pairs of the label queue: pairs
    the reward model ranked confidently, with its probability that the first response is better."""
    run_script(db,
        """
        CREATE TABLE job_warnings (
            id INTEGER PRIMARY KEY,
            job_id INTEGER NOT NULL REFERENCES jobs(id),
            rule TEXT NOT NULL,
            round INTEGER NOT NULL DEFAULT 0,
            step INTEGER,
            title TEXT NOT NULL,
            detail TEXT NOT NULL,
            advice TEXT NOT NULL,
            created REAL NOT NULL,
            acknowledged REAL,
            UNIQUE (job_id, rule, round)
        );
        CREATE TABLE audit_pairs (
            pair_id INTEGER PRIMARY KEY REFERENCES pairs(id),
            reward_model_id INTEGER REFERENCES reward_models(id),
            prob_first REAL NOT NULL
        )
        """
    )


def m011_job_launch(db: Database) -> None:
    """How a job's training phases run: its accelerate config's path and what it asks for (processes, machines,
    mixed precision, DeepSpeed stage), as JSON; NULL for a job that trains in its worker process."""
    db.execute("ALTER TABLE jobs ADD COLUMN launch TEXT")


def m012_prompt_exclusion(db: Database) -> None:
    """A prompt can be left out of sampling, training and evaluation (`python app.py prompts --exclude`) and still be
    kept and exported; prompts are listed and excluded by source."""
    run_script(db,
        """
        ALTER TABLE prompts ADD COLUMN excluded INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX prompts_source ON prompts(source)
        """)


FIRST_MIGRATIONS = (
    m001_initial,
    m002_rounds_and_job_logs,
    m003_reservation_sides_and_label_margin,
    m004_generation_scores,
    m005_pair_vote_counts,
    m006_metrics_series_index,
    m007_preference_import_lookups,
    m008_prompt_messages,
    m009_audit_trail,
    m010_job_warnings_and_audit_pairs,
    m011_job_launch,
    m012_prompt_exclusion,
)
