"""Append-only schema migrations, recorded in the store itself. Never edit an applied one; add a new one at the end
of this file (each `@migrations()` appends to the list, in file order). The first twelve live in
`storage.migrations_first` and are registered first."""

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from .migrations_first import FIRST_MIGRATIONS, run_script

MIGRATION_SET = "rlhf_studio"
migrations = Migrations(MIGRATION_SET)
for first in FIRST_MIGRATIONS:
    migrations()(first)


@migrations()
def m013_winrate_pairs(db: Database) -> None:
    """Win-rate pairs of the label queue: blind pairs on a held-out prompt of one policy version's evaluation sample
    against another version's (the SFT root's, or the previous version's), judged by people to say whether they prefer
    the newer version. Their labels never train or validate a reward model and never count against a loop's budget."""
    run_script(db,
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
    run_script(db,
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
    run_script(db,
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
    run_script(db,
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
    for statement in (  # trigger bodies hold ';', so they cannot go through run_script
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
    run_script(db,
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
    run_script(db,
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
def m020_check_pairs(db: Database) -> None:
    """The pairs that check the reward model are "check pairs" (they were "audit pairs", a word the admin trail keeps):
    their table, their selector value, the round summary's and metric's agreement, the warning rule, and the loop
    settings stored with jobs and rounds take the new names."""
    run_script(db,
        """
        ALTER TABLE audit_pairs RENAME TO check_pairs;
        UPDATE pairs SET selector = 'check' WHERE selector = 'audit';
        UPDATE metrics SET name = 'round/check_agreement' WHERE name = 'round/audit_agreement';
        UPDATE job_warnings SET rule = 'check_agreement_low' WHERE rule = 'audit_agreement_low'
        """)
    for table, column, old, new in (("rounds", "summary", "audit_agreement", "check_agreement"),
                                    ("rounds", "config", "audit_share", "check_share"),
                                    ("rounds", "config", "audit_min_agreement", "check_min_agreement"),
                                    ("jobs", "config", "audit_share", "check_share"),
                                    ("jobs", "config", "audit_min_agreement", "check_min_agreement")):
        db.execute(f"UPDATE {table} SET {column} = json_set(json_remove({column}, '$.{old}'), '$.{new}',"
                   f" json_extract({column}, '$.{old}')) WHERE json_valid({column})"
                   f" AND json_type({column}, '$.{old}') IS NOT NULL AND json_type({column}, '$.{new}') IS NULL")
