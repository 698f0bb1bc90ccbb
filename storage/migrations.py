"""Append-only schema migrations, recorded in the store itself. Never edit an applied one; add a new one."""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

MIGRATION_SET = "rlhf_studio"
migrations = Migrations(MIGRATION_SET)


def _run(db: Database, script: str) -> None:
    """Run DDL statement by statement: `executescript` would commit the migration's transaction early."""
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


@migrations()
def m001_initial(db: Database) -> None:
    _run(db, 
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


@migrations()
def m002_rounds_and_job_logs(db: Database) -> None:
    _run(db, 
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


@migrations()
def m003_reservation_sides_and_label_margin(db: Database) -> None:
    """Reservations remember which generation is shown on the left and since when; imported labels keep a margin."""
    _run(db, 
        """
        ALTER TABLE reservations ADD COLUMN left_id INTEGER REFERENCES generations(id);
        ALTER TABLE reservations ADD COLUMN shown REAL;
        CREATE INDEX reservations_annotator ON reservations(annotator);
        ALTER TABLE labels ADD COLUMN margin REAL;
        """
    )


@migrations()
def m004_generation_scores(db: Database) -> None:
    """Scores of generations by name (`oracle`, `reward`), e.g. of each policy's held-out evaluation samples."""
    _run(db,
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


@migrations()
def m005_pair_vote_counts(db: Database) -> None:
    """`pairs.votes` = current non-skip labels, kept by triggers, so the queue skips filled pairs from an index."""
    db.execute("ALTER TABLE pairs ADD COLUMN votes INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE pairs SET votes = (SELECT count(*) FROM labels l WHERE l.pair_id = pairs.id"
               " AND l.undone IS NULL AND l.outcome != 'skip')")
    db.execute("CREATE INDEX pairs_queue_votes ON pairs(round DESC, score DESC, id, votes, selector)")
    for statement in (  # trigger bodies hold ';', so they cannot go through _run
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


@migrations()
def m006_metrics_series_index(db: Database) -> None:
    """A covering index for reading a job's metric series by name: the Curves tab reads them without table lookups."""
    db.execute("CREATE INDEX metrics_series ON metrics(job_id, name, step, value, created)")


@migrations()
def m007_preference_import_lookups(db: Database) -> None:
    """Indexes for the preference import's lookups, which scanned tables row by row: a pair by its two generations,
    and an imported response by prompt and text (imported responses only: policy samples' texts stay unindexed)."""
    _run(db,
        """
        CREATE INDEX pairs_generations ON pairs(first_id, second_id);
        CREATE INDEX generations_imported_text ON generations(prompt_id, text) WHERE source GLOB 'import:*';
        """
    )


@migrations()
def m008_prompt_messages(db: Database) -> None:
    """A prompt may be a conversation: its turns as JSON (`text` keeps its plain-text form, the dedupe key)."""
    db.execute("ALTER TABLE prompts ADD COLUMN messages TEXT")


@migrations()
def m009_audit_trail(db: Database) -> None:
    """The audit trail: who did what to the studio (start a job, change settings, import, export) and when."""
    _run(db,
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


@migrations()
def m010_job_warnings_and_audit_pairs(db: Database) -> None:
    """Failure warnings as a job fired them (once per rule and round), and the audit pairs of the label queue: pairs
    the reward model ranked confidently, with its probability that the first response is better."""
    _run(db,
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


@migrations()
def m011_job_launch(db: Database) -> None:
    """How a job's training phases run: its accelerate config's path and what it asks for (processes, machines,
    mixed precision, DeepSpeed stage), as JSON; NULL for a job that trains in its worker process."""
    db.execute("ALTER TABLE jobs ADD COLUMN launch TEXT")


@migrations()
def m012_prompt_exclusion(db: Database) -> None:
    """A prompt can be left out of sampling, training and evaluation (`python app.py prompts --exclude`) and still be
    kept and exported; prompts are listed and excluded by source."""
    _run(db,
        """
        ALTER TABLE prompts ADD COLUMN excluded INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX prompts_source ON prompts(source)
        """)


@migrations()
def m013_winrate_pairs(db: Database) -> None:
    """Win-rate pairs of the label queue: blind pairs on a held-out prompt of one policy version's evaluation sample
    against another version's (the SFT root's, or the previous version's), judged by people to say whether they prefer
    the newer version. Their labels never train or validate a reward model and never count against a loop's budget."""
    _run(db,
        """
        CREATE TABLE winrate_pairs (
            pair_id INTEGER PRIMARY KEY REFERENCES pairs(id),
            policy_id INTEGER NOT NULL REFERENCES policies(id),
            opponent_id INTEGER NOT NULL REFERENCES policies(id),
            CHECK (policy_id != opponent_id)
        );
        CREATE INDEX winrate_pairs_policy ON winrate_pairs(policy_id, opponent_id)
        """
    )


@migrations()
def m014_demonstrations(db: Database) -> None:
    """Demonstrations: a better answer to a prompt, written or edited in the Label tab (from a pair's response) or
    imported, which trains the policy by supervised fine-tuning. Undone ones are kept, flagged, as labels are. A policy
    version trained from another but registered as a root of its own (an SFT version that becomes the KL reference)
    keeps where it came from in `trained_from`."""
    _run(db,
        """
        CREATE TABLE demonstrations (
            id INTEGER PRIMARY KEY,
            prompt_id INTEGER NOT NULL REFERENCES prompts(id),
            text TEXT NOT NULL,
            author TEXT NOT NULL,
            source TEXT NOT NULL,
            pair_id INTEGER REFERENCES pairs(id),
            generation_id INTEGER REFERENCES generations(id),
            seconds REAL,
            created REAL NOT NULL,
            undone REAL
        );
        CREATE INDEX demonstrations_prompt ON demonstrations(prompt_id);
        CREATE INDEX demonstrations_author ON demonstrations(author, undone);
        ALTER TABLE policies ADD COLUMN trained_from INTEGER REFERENCES policies(id)
        """
    )


@migrations()
def m015_prompt_references(db: Database) -> None:
    """A prompt's reference: the fields a prompt file gave beside its text or turns (an `answer`, a `solution`), as a
    JSON object that reward functions read by name; NULL for a prompt without one."""
    db.execute("ALTER TABLE prompts ADD COLUMN reference TEXT")


@migrations()
def m016_judge_verdicts(db: Database) -> None:
    """A judge model's verdicts (RLAIF), kept apart from people's labels: one row per pair and judge, with the status
    of the attempt (a timeout, a refusal or an unparseable answer is kept and counted, never guessed), the outcome
    relative to the pair's (first, second), its confidence, and what each of the two orders answered. They never
    count toward a pair's overlap; only verdicts marked `trains` (the user chose the judge as annotator) train."""
    _run(db,
        """
        CREATE TABLE judge_verdicts (
            id INTEGER PRIMARY KEY,
            pair_id INTEGER NOT NULL REFERENCES pairs(id),
            judge TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('ok', 'timeout', 'refusal', 'unparseable', 'error')),
            outcome TEXT CHECK (outcome IN ('first', 'second', 'tie')),
            confidence REAL,
            orders TEXT NOT NULL DEFAULT '[]',
            trains INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL,
            UNIQUE (pair_id, judge),
            CHECK ((status = 'ok') = (outcome IS NOT NULL))
        );
        CREATE INDEX judge_verdicts_training ON judge_verdicts(pair_id) WHERE trains = 1
        """
    )


@migrations()
def m017_judgements(db: Database) -> None:
    """Richer judgements. Rankings of K answers to one prompt: the item (its answers in the stored order shown as A, B,
    C, ...), its reservations, and its verdicts (tiers of positions best first, or all bad, or a skip) with decision
    time, vote id and undo; `rankings.votes` = current non-skip verdicts, kept by triggers, as `pairs.votes`. Gold
    items: pairs with a known answer, served to every annotator to measure their accuracy, never trained on. Notes on a
    judgement: its rationale and 1-7 ratings of its answers ({generation id: rating})."""
    _run(db,
        """
        CREATE TABLE rankings (
            id INTEGER PRIMARY KEY,
            prompt_id INTEGER NOT NULL REFERENCES prompts(id),
            round INTEGER NOT NULL DEFAULT 0,
            policy_id INTEGER REFERENCES policies(id),
            selector TEXT NOT NULL,
            score REAL,
            votes INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL
        );
        CREATE INDEX rankings_queue ON rankings(round DESC, score DESC, id, votes, selector);
        CREATE TABLE ranking_members (
            ranking_id INTEGER NOT NULL REFERENCES rankings(id),
            position INTEGER NOT NULL,
            generation_id INTEGER NOT NULL REFERENCES generations(id),
            PRIMARY KEY (ranking_id, position),
            UNIQUE (ranking_id, generation_id)
        );
        CREATE TABLE ranking_reservations (
            ranking_id INTEGER NOT NULL REFERENCES rankings(id),
            annotator TEXT NOT NULL,
            expires REAL NOT NULL,
            shown REAL,
            PRIMARY KEY (ranking_id, annotator)
        );
        CREATE TABLE ranking_labels (
            id INTEGER PRIMARY KEY,
            ranking_id INTEGER NOT NULL REFERENCES rankings(id),
            annotator TEXT NOT NULL,
            outcome TEXT NOT NULL CHECK (outcome IN ('ranked', 'all_bad', 'skip')),
            tiers TEXT,
            decision_ms INTEGER,
            vote_id TEXT UNIQUE,
            created REAL NOT NULL,
            undone REAL
        );
        CREATE UNIQUE INDEX ranking_labels_current ON ranking_labels(ranking_id, annotator) WHERE undone IS NULL;
        CREATE INDEX ranking_labels_annotator ON ranking_labels(annotator, created);
        CREATE TABLE gold_items (
            id INTEGER PRIMARY KEY,
            pair_id INTEGER NOT NULL UNIQUE REFERENCES pairs(id),
            answer TEXT NOT NULL CHECK (answer IN ('first', 'second', 'tie')),
            origin_label_id INTEGER REFERENCES labels(id),
            source TEXT,
            created REAL NOT NULL
        );
        CREATE TABLE judgement_notes (
            id INTEGER PRIMARY KEY,
            label_id INTEGER UNIQUE REFERENCES labels(id),
            ranking_label_id INTEGER UNIQUE REFERENCES ranking_labels(id),
            rationale TEXT,
            ratings TEXT,
            CHECK ((label_id IS NULL) != (ranking_label_id IS NULL))
        )
        """
    )
    for statement in (  # trigger bodies hold ';', so they cannot go through _run
        """CREATE TRIGGER ranking_labels_votes_insert AFTER INSERT ON ranking_labels
           WHEN NEW.undone IS NULL AND NEW.outcome != 'skip'
           BEGIN UPDATE rankings SET votes = votes + 1 WHERE id = NEW.ranking_id; END""",
        """CREATE TRIGGER ranking_labels_votes_update AFTER UPDATE OF undone ON ranking_labels
           BEGIN
             UPDATE rankings SET votes = votes - 1 WHERE id = OLD.ranking_id AND OLD.undone IS NULL
               AND OLD.outcome != 'skip';
             UPDATE rankings SET votes = votes + 1 WHERE id = NEW.ranking_id AND NEW.undone IS NULL
               AND NEW.outcome != 'skip';
           END""",
    ):
        db.execute(statement)


@migrations()
def m018_gold_rankings(db: Database) -> None:
    """Gold rankings: ranking items with a known order (`tiers`, positions best tier first, as a verdict's), served to
    every annotator among their other rankings to measure their accuracy, never trained on; `origin_label_id` the
    verdict a marked one was made from."""
    _run(db,
        """
        CREATE TABLE gold_rankings (
            id INTEGER PRIMARY KEY,
            ranking_id INTEGER NOT NULL UNIQUE REFERENCES rankings(id),
            tiers TEXT NOT NULL,
            origin_label_id INTEGER REFERENCES ranking_labels(id),
            source TEXT,
            created REAL NOT NULL
        )
        """
    )


@migrations()
def m019_loop_owners(db: Database) -> None:
    """What each queued pair and ranking belongs to: `job_id` the loop job whose round queued it (NULL: the people's
    queue, imports and commands outside a loop), and each loop job's own store rounds `first_round`..`last_round`, so
    no two jobs share a round. Rows from before: a loop job's rounds as it numbered them (one past the newest version
    made before it); a queued item belongs to the newest loop job made before it whose rounds hold its round."""
    _run(db,
        """
        ALTER TABLE pairs ADD COLUMN job_id INTEGER REFERENCES jobs(id);
        ALTER TABLE rankings ADD COLUMN job_id INTEGER REFERENCES jobs(id);
        ALTER TABLE jobs ADD COLUMN first_round INTEGER;
        ALTER TABLE jobs ADD COLUMN last_round INTEGER;
        UPDATE jobs SET first_round = 1 + coalesce((SELECT max(p.round) FROM policies p
                                                    WHERE p.created < jobs.created), 0)
            WHERE kind = 'loop';
        UPDATE jobs SET last_round = first_round + max(1, coalesce(json_extract(config, '$.rounds'), 1)) - 1
            WHERE kind = 'loop';
        UPDATE pairs SET job_id = (SELECT j.id FROM jobs j WHERE j.kind = 'loop' AND j.created <= pairs.created
                                   AND pairs.round BETWEEN j.first_round AND j.last_round
                                   ORDER BY j.created DESC LIMIT 1)
            WHERE round > 0;
        UPDATE rankings SET job_id = (SELECT j.id FROM jobs j WHERE j.kind = 'loop' AND j.created <= rankings.created
                                      AND rankings.round BETWEEN j.first_round AND j.last_round
                                      ORDER BY j.created DESC LIMIT 1)
            WHERE round > 0;
        CREATE INDEX pairs_owner ON pairs(job_id, round);
        CREATE INDEX rankings_owner ON rankings(job_id, round)
        """
    )


@migrations()
def m021_policy_job_kind(db: Database) -> None:
    """A PPO or GRPO job's kind is `policy` (it was `ppo`, from before GRPO); `storage.jobs` still reads an old row's
    `ppo` as `policy`."""
    _run(db, "UPDATE jobs SET kind = 'policy' WHERE kind = 'ppo'")
