"""The schema: created fresh, upgraded from older schemas with data kept, foreign and newer files refused untouched."""

import sqlite3

import pytest
from sqlite_utils import Database

from storage import NotAStudioStore, Store, StoreFromNewerVersion, StoreUnavailable, preferences
from storage.check_pairs import check_pair_ids, check_votes
from storage.job_warnings import list_warnings
from storage.jobs import get_job
from storage.metrics import read_metrics
from storage.migrations import MIGRATION_SET, migrations
from storage.pairs import list_pairs
from storage.preferences import Preference, PreferenceImport, import_preferences
from storage.prompts import add_prompts, list_prompts
from storage.rounds import list_rounds
from storage.types import Outcome, Selector

NEW_INDEXES = {"pairs_generations", "generations_imported_text"}  # m007
TABLES = {"prompts", "policies", "generations", "pairs", "reservations", "labels", "reward_models", "jobs", "metrics",
          "settings", "rounds", "job_logs", "audit"}


def test_fresh_store_has_every_table_and_pragmas(tmp_path):
    store = Store(tmp_path / "s.db")
    db = store.db()
    assert store.created
    assert TABLES <= set(db.table_names())
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] == store.busy_timeout_ms
    applied = [m.name for m in migrations.applied(db)]
    assert applied == [m.name for m in migrations._migrations]


def test_reopening_does_not_reapply(tmp_path):
    Store(tmp_path / "s.db")
    again = Store(tmp_path / "s.db")
    assert not again.created
    rows = again.db().execute("SELECT count(*) FROM _sqlite_migrations").fetchone()[0]
    assert rows == len(migrations._migrations)


def test_upgrade_from_first_schema_keeps_data(tmp_path):
    path = tmp_path / "old.db"
    old = Database(path)
    migrations.apply(old, stop_before="m002_rounds_and_job_logs")
    old.execute("INSERT INTO prompts (text, source, heldout, created) VALUES ('kept', 'old', 0, 1.0)")
    old.conn.commit()
    assert "rounds" not in old.table_names()
    old.conn.close()

    store = Store(path)
    assert {"rounds", "job_logs"} <= set(store.db().table_names())
    assert [p.text for p in list_prompts(store)] == ["kept"]


def indexes(store):
    return {name for (name,) in store.db().execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


def test_import_lookup_indexes_are_added_to_a_store_with_data(tmp_path):
    """m007: the preference import's lookups get indexes on a store that already holds imported labels."""
    path = tmp_path / "old.db"
    migrations.apply(Database(path), stop_before="m007_preference_import_lookups")
    old = Store(path, migrate=False)
    rows = [Preference("Review it.", " Great film.", " Dull film.", 2.0),
            Preference("Review it.", " Fine.", " Dull film.")]
    assert import_preferences(old, rows, "hh", 0.0) == PreferenceImport(2, 0, prompt_ids=(1,))
    before = list(old.db().query("SELECT * FROM labels ORDER BY id"))  # the raw rows: readers need today's schema
    assert not NEW_INDEXES & indexes(old)
    old.close()

    store = Store(path)
    db = store.db()
    assert NEW_INDEXES <= indexes(store)
    assert list(db.query("SELECT * FROM labels ORDER BY id")) == before
    assert import_preferences(store, rows, "hh", 1.0) == PreferenceImport(0, 2)  # found again: nothing is added
    assert import_preferences(store, [Preference("Review it.", " Great film.", " Fine.")], "hh", 1.0).added == 1
    assert db.execute("SELECT count(*) FROM generations").fetchone()[0] == 3  # its stored responses are reused
    plans = [db.execute(f"EXPLAIN QUERY PLAN {query}", args).fetchall()[0][3]
             for query, args in ((preferences._FIND_PAIR, [1, 2, Selector.IMPORTED]),
                                 (preferences._FIND_GENERATION, [1, " Fine.", "import:hh"]))]
    assert "USING INDEX pairs_generations" in plans[0] and "USING INDEX generations_imported_text" in plans[1]


def test_foreign_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(NotAStudioStore, match="not an RLHF Studio store"):
        Store(path)
    assert path.read_bytes() == before


def test_non_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("just some notes\n")
    with pytest.raises(NotAStudioStore, match="not a SQLite file"):
        Store(path)
    assert path.read_text() == "just some notes\n"


def test_store_from_newer_version_is_refused(tmp_path):
    path = tmp_path / "new.db"
    Store(path).close()
    db = Database(path)
    db["_sqlite_migrations"].insert({"migration_set": MIGRATION_SET, "name": "m999_future", "applied_at": "x"})
    db.conn.close()
    with pytest.raises(StoreFromNewerVersion, match="newer RLHF Studio"):
        Store(path)


def test_unwritable_or_missing_folder(tmp_path):
    with pytest.raises(StoreUnavailable, match="does not exist"):
        Store(tmp_path / "missing" / "s.db")
    with pytest.raises(StoreUnavailable, match="is a folder"):
        Store(tmp_path)


def test_failed_write_transaction_rolls_back(store):
    with pytest.raises(RuntimeError):
        with store.write() as db:
            db.execute("INSERT INTO prompts (text, created) VALUES ('half', 1.0)")
            raise RuntimeError("boom")
    assert list_prompts(store) == []
    add_prompts(store, ["after"])
    assert [p.text for p in list_prompts(store)] == ["after"]


def test_an_old_stores_audit_pairs_become_check_pairs(tmp_path):
    """m020: the pairs that check the reward model, once `audit` pairs, keep their rows, labels and prediction under
    the new names; so do the round's agreement, its metric, the warning rule and the loop settings stored before."""
    path = tmp_path / "old.db"
    old = Database(path)
    migrations.apply(old, stop_before="m020_check_pairs")
    for sql in ("INSERT INTO prompts (id, text, created) VALUES (1, 'p', 0)",
                "INSERT INTO generations (id, prompt_id, text, created) VALUES (1, 1, 'a', 0), (2, 1, 'b', 0)",
                "INSERT INTO jobs (id, kind, config, status, created) VALUES"
                " (1, 'loop', '{\"rounds\": 2, \"audit_share\": 0.2, \"audit_min_agreement\": 0.7}', 'paused', 0)",
                "INSERT INTO pairs (id, prompt_id, first_id, second_id, round, selector, score, created, job_id)"
                " VALUES (1, 1, 1, 2, 1, 'audit', 0.5, 0, 1), (2, 1, 2, 1, 1, 'random', 0.4, 0, 1)",
                "INSERT INTO audit_pairs (pair_id, prob_first) VALUES (1, 0.9)",
                "INSERT INTO labels (pair_id, annotator, outcome, vote_id, created)"
                " VALUES (1, 'ann', 'second', 'v', 0)",
                "INSERT INTO rounds (job_id, round, config, summary, created) VALUES"
                " (1, 1, '{\"audit_share\": 0.2}', '{\"labels\": 8, \"audit_agreement\": 0.25}', 0)",
                "INSERT INTO metrics (job_id, step, name, value, created)"
                " VALUES (1, 1, 'round/audit_agreement', 0.25, 0)",
                "INSERT INTO job_warnings (job_id, rule, round, title, detail, advice, created)"
                " VALUES (1, 'audit_agreement_low', 1, 't', 'd', 'a', 0)"):
        old.execute(sql)
    old.conn.commit()
    old.conn.close()

    store = Store(path)
    db = store.db()
    assert [m.name for m in migrations.applied(db)][-1] == "m020_check_pairs"
    assert "audit_pairs" not in db.table_names()
    assert [p.selector for p in list_pairs(store)] == [Selector.CHECK, Selector.RANDOM]
    assert check_pair_ids(store) == [1]
    [vote] = check_votes(store)
    assert (vote.pair_id, vote.annotator, vote.outcome, vote.prob_first) == (1, "ann", Outcome.SECOND, 0.9)
    [row] = list_rounds(store)
    assert row["summary"] == {"labels": 8, "check_agreement": 0.25} and row["config"] == {"check_share": 0.2}
    assert [m["name"] for m in read_metrics(store, 1)] == ["round/check_agreement"]
    assert [w.rule for w in list_warnings(store, 1)] == ["check_agreement_low"]
    assert get_job(store, 1).config == {"rounds": 2, "check_share": 0.2, "check_min_agreement": 0.7}
