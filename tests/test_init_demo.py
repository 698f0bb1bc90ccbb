"""The demo without the browser: `init --demo` seeds a new store exactly as the first `serve` does, refuses a store
that is not empty, and the commands that need a policy or prompts name it when a store has neither."""

import json
import re
import sqlite3

import pytest

from app.commands.cli import main
from storage import Store
from storage.prompts import add_prompts

SEEDED = {  # what the seed writes, without ids' timestamps
    "prompts": "SELECT text, source, heldout, messages FROM prompts ORDER BY id",
    "policies": "SELECT path, parent_id, round, note FROM policies ORDER BY id",
    "generations": "SELECT prompt_id, policy_id, text, token_count, params, seed, ended_with_eos, source "
                   "FROM generations ORDER BY id",
    "pairs": "SELECT prompt_id, first_id, second_id, round, policy_id, selector FROM pairs ORDER BY id",
}


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def rows(path) -> dict:
    with sqlite3.connect(path) as db:
        return {table: db.execute(sql).fetchall() for table, sql in SEEDED.items()}


def test_init_demo_seeds_the_demo_as_the_first_serve_does(capfd, tmp_path, demo_template):
    db = tmp_path / "demo.db"
    code, out, err = cli(capfd, "init", "--demo", "--db", str(db))  # capfd: the seeding child's lines too
    assert code == 0
    assert out == (f"demo project started in {db}: 120 prompts and the demo policy as v0, pairs queued; label them "
                   f"with python app.py serve --db {db}, or run python app.py loop --db {db}\n")
    lines = [line for line in err.splitlines() if line.startswith(("seeding the demo", "demo "))]
    assert lines[:-1] == [  # what it is doing, from the first second
        f"seeding the demo into {db} (once, for a new store; usually under a minute): loading torch and the demo "
        "policy …",
        "seeding the demo: 100 training and 20 held-out prompts, the demo SFT policy as v0",
        "seeding the demo: sampling 400 responses (100 prompts x 4) from the demo policy …",
        "seeding the demo: queueing 200 random pairs of them for labeling",
        "demo ready: 200 pairs queued for labeling"]
    assert re.fullmatch(r"demo seeded in \d+ s", lines[-1])
    seeded = rows(db)
    assert seeded == rows(demo_template) and len(seeded["pairs"]) == 200  # the first serve's seed, row for row
    [action] = Store(db).db().execute("SELECT action, detail FROM audit").fetchall()
    assert action[0] == "project_started" and json.loads(action[1])["args"]["demo"] is True


def test_init_demo_refuses_a_store_that_is_not_empty_and_leaves_it_unchanged(capsys, tmp_path):
    store = Store(tmp_path / "mine.db")
    add_prompts(store, ["my own prompt"])
    before = list(store.db().conn.iterdump())
    code, out, err = cli(capsys, "init", "--demo", "--db", str(store.path))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"the store {store.path} already holds a policy or prompts; init --demo seeds a new store" in err
    assert list(Store(store.path).db().conn.iterdump()) == before


@pytest.mark.parametrize("extra", [["--prompts", "p.jsonl"], ["--allow-pickle"], ["--guidelines", "g.md"]])
def test_init_demo_refuses_a_projects_options_and_leaves_no_store(capsys, tmp_path, extra):
    code, out, err = cli(capsys, "init", "--demo", "--db", str(tmp_path / "d.db"), *extra)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"--demo seeds the demo's own model and prompts, so {extra[0]} does not apply" in err
    assert not (tmp_path / "d.db").exists()


def test_init_needs_a_policy_or_the_demo(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["init", "--db", str(tmp_path / "d.db")])
    assert exit_.value.code == 2 and "one of the arguments --model --demo is required" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["loop"], ["ppo", "--iterations", "1"], ["train-reward"]])
def test_commands_on_an_empty_store_name_init_demo_and_init_policy(capsys, tmp_path, command):
    db = tmp_path / "new.db"
    code, out, err = cli(capsys, *command, "--db", str(db))
    assert code == 2 and err.count("\n") == 1, err
    assert f"seed the demo with python app.py init --demo --db {db}, or start a project on your own model with " \
           f"python app.py init --model MODEL --prompts FILE --db {db}" in err
    store = Store(db)
    assert store.db().execute("SELECT count(*) FROM prompts").fetchone()[0] == 0
    assert store.db().execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
