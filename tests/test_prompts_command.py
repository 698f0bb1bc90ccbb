"""Imported data that does not fit the model: prompts and labelled pairs longer than the policy's (or the reward
base's) budget are kept, counted and named, and left out of sampling, training and evaluation, never a refusal of the
loop; `python app.py prompts` lists prompts by source with token counts and excludes or includes ids or sources."""

import json

import pytest

from app.commands.cli import main
from storage import Store
from storage.audit import list_actions
from storage.generations import list_generations
from storage.labels import count_labels
from storage.policies import latest_policy
from storage.prompts import PromptSelection, add_prompts, list_prompts, set_excluded
from storage.rounds import list_rounds
from trainers.models.chat_format import ChatFormat

LONG = "the movie was long and slow and " * 12  # ~80 demo tokens: over the demo's budget of 40
TINY_LOOP = {"prompts_per_round": 8, "samples_per_prompt": 2, "queue_reserve": 0, "reward_epochs": 1,
             "policy_iterations": 1, "policy_batch_size": 8, "policy_mini_batches": 1, "policy_epochs": 1,
             "check_share": 0.0}


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_long_imported_dialogue_does_not_block_the_loop_which_runs_on_the_rest_and_says_so(capsys, tmp_path,
                                                                                            demo_store):
    db = str(demo_store.path)
    dialogue = f"\n\nHuman: {LONG}\n\nAssistant:"
    rows = tmp_path / "hh.jsonl"
    rows.write_text(json.dumps({"chosen": dialogue + " it was great .", "rejected": dialogue + " it was bad ."}) + "\n")
    code, out, _ = cli(capsys, "import-preferences", "--db", db, str(rows), "--source", "hh")
    [long] = [p for p in list_prompts(demo_store) if p.source == "hh"]
    assert code == 0 and f"1 of the 1 new prompts are longer than the policy reads (40 tokens: its context of 64 " \
                         f"less 24 response tokens): prompts {long.id}. They are kept" in out
    assert "labels by hh: 0 of 1 train the reward model; 1 too long for its context of 64 (labels 1)" in out
    [heldout] = list_prompts(demo_store, heldout=True)[:1]
    assert cli(capsys, "prompts", "--db", db, "--exclude", str(heldout.id))[0] == 0

    code, out, err = cli(capsys, "loop", "--db", db, "--rounds", "1", "--labels-per-round", "8",
                         "--config", json.dumps(TINY_LOOP))
    assert code == 0, err[-2000:]
    assert f"training prompts: 100 of 101 used; 1 too long for 40 tokens (prompts {long.id})" in out
    assert "held-out prompts: 19 of 20 used; 1 excluded" in out
    assert "1 label left out: 1 too long for the reward model's context of 64 (labels 1)" in out
    assert [r["round"] for r in list_rounds(demo_store)] == [1]
    used = {g.prompt_id for g in list_generations(demo_store) if g.source in ("sample", "eval") and g.policy_id}
    assert long.id not in used and heldout.id not in used  # never sampled, never evaluated
    assert count_labels(demo_store, evaluation=False) == 1 + 8  # the long label is kept (for export) beside the round's
    out_file = tmp_path / "labels.jsonl"
    assert cli(capsys, "export", "--db", db, "--out", str(out_file))[0] == 0
    assert LONG.strip() in out_file.read_text()


def test_the_prompts_command_lists_prompts_by_source_with_token_counts(capsys, demo_store):
    add_prompts(demo_store, ["a short one", LONG], source="mine.txt")
    code, out, _ = cli(capsys, "prompts", "--db", str(demo_store.path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("policy context 64 tokens: responses up to 24, prompts up to 40")
    assert lines[1].split() == ["source", "split", "prompts", "fit", "too", "long", "excluded", "used"]
    assert lines[2].split() == ["demo", "training", "100", "100", "0", "0", "100"]
    assert lines[3].split() == ["demo", "held", "out", "20", "20", "0", "0", "20"]
    assert lines[4].split() == ["mine.txt", "training", "2", "1", "1", "0", "1"]
    code, out, _ = cli(capsys, "prompts", "--db", str(demo_store.path), "--list", "--source", "mine.txt",
                       "--response-length", "30")
    listed = out.splitlines()[-2:]
    chat = ChatFormat.from_dir(latest_policy(demo_store).path)
    assert out.splitlines()[0].startswith("policy context 64 tokens: responses up to 30, prompts up to 34")
    assert listed[0].split()[:6] == ["121", "mine.txt", "training", str(chat.count("a short one")), "tokens", "used"]
    assert listed[1].split()[:5] == ["122", "mine.txt", "training", str(chat.count(LONG)), "tokens"]
    assert "too long" in listed[1]
    assert listed[1].endswith("…")
    assert list_actions(Store(demo_store.path)) == []  # listing changes nothing: no admin action recorded


def test_the_prompts_command_excludes_and_includes_ids_and_sources_recorded_in_the_audit_trail(capsys, demo_store):
    db = str(demo_store.path)
    add_prompts(demo_store, ["one", "two"], source="mine.txt")
    code, out, _ = cli(capsys, "prompts", "--db", db, "--exclude", "3", "4", "--exclude-source", "mine.txt")
    assert code == 0 and out.startswith("excluded 4 prompts, included 0 again")
    assert [p.id for p in list_prompts(demo_store, excluded=True)] == [3, 4, 121, 122]
    assert "demo      training       100       100         0         2        98" in out
    code, out, _ = cli(capsys, "prompts", "--db", db, "--include", "4", "--include-source", "mine.txt")
    assert code == 0 and out.startswith("excluded 0 prompts, included 3 again")
    assert [p.id for p in list_prompts(demo_store, excluded=True)] == [3]
    actions = list_actions(demo_store)
    assert [a.action.value for a in actions] == ["prompt_exclusions_changed"] * 2
    assert actions[-1].detail["args"]["exclude"] == [3, 4] and actions[-1].actor.startswith("cli:")


@pytest.mark.parametrize("args, message", [
    (["--exclude", "3", "99999"], "no prompt has id 99999; python app.py prompts --list shows the ids"),
    (["--include", "99998", "99999"], "no prompt has id 99998 (nor 1 more of those given)"),
    (["--exclude-source", "hh"], "no prompt comes from the source 'hh'; the sources are 'demo'"),
    (["--exclude", "3", "--include", "3"], "prompt 3 is both in --exclude and in --include"),
    (["--exclude-source", "demo", "--include-source", "demo"], "the source 'demo' is both in --exclude-source and"),
    (["--list", "--source", "hh"], "no prompt comes from the source 'hh'"),
    (["--source", "demo"], "--source chooses what --list shows; add --list"),
    (["--response-length", "0"], "--response-length must be at least 1"),
])
def test_bad_ids_and_sources_are_refused_in_one_line_and_change_nothing(capsys, demo_store, args, message):
    before = [(p.id, p.excluded) for p in list_prompts(demo_store)]
    code, out, err = cli(capsys, "prompts", "--db", str(demo_store.path), *args)
    assert (code, out) == (2, "") and err.count("\n") == 1 and message in err
    assert [(p.id, p.excluded) for p in list_prompts(demo_store)] == before and list_actions(demo_store) == []


def test_a_missing_store_is_refused_and_not_created(capsys, tmp_path):
    code, _, err = cli(capsys, "prompts", "--db", str(tmp_path / "none.db"))
    assert code == 2 and "does not exist" in err and not (tmp_path / "none.db").exists()


def test_excluded_prompts_are_never_sampled_nor_trained_on_by_the_policy_phase(demo_store):
    from trainers.jobs.policy_job import plan_policy
    from trainers.policy.config import PolicyRun

    set_excluded(demo_store, PromptSelection(ids=tuple(range(1, 11))))
    [long_id] = add_prompts(demo_store, [LONG]).ids
    plan, _ = plan_policy(demo_store, PolicyRun(iterations=1, reward="oracle", settings={"batch_size": 8}))
    texts = {p.text for p in list_prompts(demo_store)[10:100]}
    assert len(plan.prompts) == 90 and set(plan.prompts) == texts and plan.left_out == [long_id]


def test_many_ids_are_excluded_and_included_in_one_transaction(store):
    ids = add_prompts(store, [f"prompt {i}" for i in range(1200)]).ids
    assert set_excluded(store, PromptSelection(ids=ids)) == (1200, 0)
    assert set_excluded(store, PromptSelection(ids=ids[:10]), PromptSelection(ids=ids[10:])) == (0, 1190)
    assert [p.id for p in list_prompts(store, excluded=True)] == list(ids[:10])
