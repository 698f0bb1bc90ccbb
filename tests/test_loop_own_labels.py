"""A loop trains only on its own labels: its round's reward model and DPO read people's labels (on any item) and the
oracle's or a judge's only on the pairs and rankings that loop queued, never another loop's (issue 52, item 1;
`storage.types.LoopLabels`). Two loops on one demo store, in-process at tiny settings: loop A's oracle labels (and a
judge verdict on A's pair) stay out of loop B's reward phase and DPO, a person's labels go in; `train-reward` and
`dpo` outside a loop still read every label."""

import json

import trainers.jobs.dpo_job as dpo_job
import trainers.jobs.reward_job as reward_job
from app.commands.cli import main
from labeling.queue.synthetic import ORACLE_NAME, OracleAnnotator
from storage import jobs as job_rows
from storage.judge_verdicts import NewVerdict, add_verdicts
from storage.labels import list_labels
from storage.pairs import get_pair, list_pairs
from storage.rankings import ranking_verdicts
from storage.types import Outcome
from trainers.policy.dpo_config import DPOConfig

TINY = {"samples_per_prompt": 3, "prompts_per_round": 8, "queue_reserve": 4, "reward_epochs": 1,
        "policy_iterations": 1, "policy_batch_size": 8, "policy_epochs": 1, "response_length": 8, "eval_prompts": 2,
        "eval_samples": 1, "winrate_pairs": 0, "audit_share": 0.0}
RANKINGS_OF_4 = {**TINY, "rank_k": 4, "samples_per_prompt": 4, "prompts_per_round": 12}
DPO = {**TINY, "algorithm": "dpo", "dpo_batch_size": 4}


def loop(store, config: dict) -> int:
    return main(["loop", "--db", str(store.path), "--rounds", "1", "--labels-per-round", "8", "--annotator", "oracle",
                 "--config", json.dumps(config)])


def spy(monkeypatch, module, name: str) -> list:
    """Record what `module.name` returns each time it is called (the loop's round reads its labels there)."""
    seen, real = [], getattr(module, name)

    def recorded(*args, **kwargs):
        seen.append(result := real(*args, **kwargs))
        return result

    monkeypatch.setattr(module, name, recorded)
    return seen


def alice_labels(store, count: int = 6) -> set[int]:
    """A person labels `count` pairs in the Label tab's order (the first loop's left-over pairs, then the demo's)."""
    return set(OracleAnnotator.from_spec(name="alice").label(store, count))


def test_a_loops_reward_phase_never_trains_on_another_loops_oracle_or_judge_labels(demo_store, monkeypatch, capsys):
    assert loop(demo_store, TINY) == 0, capsys.readouterr().err
    first = job_rows.list_jobs(demo_store)[0]
    theirs = {label.id for label in list_labels(demo_store, annotator=ORACLE_NAME)}
    assert len(theirs) == 8
    labelled = {label.pair_id for label in list_labels(demo_store)}
    open_pair = next(p for p in list_pairs(demo_store) if p.job_id == first.id and p.id not in labelled)
    add_verdicts(demo_store, [NewVerdict(open_pair.id, "fake-judge", "ok", Outcome.FIRST, 0.9, trains=True)])
    people = alice_labels(demo_store)

    examples = spy(monkeypatch, reward_job, "load_examples")
    assert loop(demo_store, TINY) == 0, capsys.readouterr().err
    second = job_rows.list_jobs(demo_store)[0]
    [(trained, _)] = examples
    ids = {e.label_id for e in trained}
    ours = {label.id for label in list_labels(demo_store, annotator=ORACLE_NAME)} - theirs
    assert len(ours) == 8 and {get_pair(demo_store, e.pair_id).job_id for e in trained if e.label_id in ours} == {
        second.id}
    assert not ids & theirs and all(i > 0 for i in ids)  # neither the first loop's oracle nor the judge on its pair
    assert ids == ours | people  # the person's labels, on the first loop's pairs and the people's queue, train

    everything = {e.label_id for e in reward_job.load_examples(demo_store)[0]}  # train-reward: every label
    assert theirs | ours | people <= everything and any(i < 0 for i in everything)  # and the judge's verdict


def test_a_dpo_loop_never_trains_on_another_loops_oracle_rankings(demo_store, monkeypatch, capsys):
    assert loop(demo_store, RANKINGS_OF_4) == 0, capsys.readouterr().err
    theirs = ranking_verdicts(demo_store)
    assert len(theirs) == 8 and {v.annotator for v in theirs} == {ORACLE_NAME}
    people = alice_labels(demo_store)

    examples = spy(monkeypatch, dpo_job, "dpo_examples")
    assert loop(demo_store, DPO) == 0, capsys.readouterr().err
    [(trained, _)] = examples
    assert [e for e in trained if e.pair_id is None] == []  # not one comparison of the first loop's rankings
    ours = {label.id for label in list_labels(demo_store, annotator=ORACLE_NAME)}
    decided = {label.id for label in list_labels(demo_store) if label.outcome in (Outcome.FIRST, Outcome.SECOND)}
    assert people & decided and {e.label_id for e in trained} == (ours | people) & decided  # ties left out

    standalone, _ = dpo_job.dpo_examples(demo_store, DPOConfig(train_ties=True))  # python app.py dpo: every label
    assert len([e for e in standalone if e.pair_id is None]) >= len(theirs)
