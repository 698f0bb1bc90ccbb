"""Every storage function against a real store file."""

import threading

import pytest

from labeling.queue.annotation import submit_label, undo_label, update_queue_settings
from storage import (
    Conflict,
    InvalidInput,
    JobStatus,
    NotFound,
    Outcome,
    Store,
    generations,
    jobs,
    labels,
    metrics,
    pairs,
    policies,
    prompts,
    reward_models,
    settings,
)
from storage.generations import NewGeneration
from storage.pairs import NewPair
from tests.helpers import label_pairs


def seed_pair(store):
    prompts.add_prompts(store, ["the movie was"])
    policy = policies.add_policy(store, "/models/sft")
    g1, g2 = generations.add_generations(store, [
        NewGeneration(1, " great .", policy_id=policy, token_count=2, params={"temperature": 1.0}, seed=3,
                      ended_with_eos=True),
        NewGeneration(1, " awful .", policy_id=policy, token_count=2, ended_with_eos=False),
    ])
    [pair] = pairs.add_pairs(store, [NewPair(1, g1, g2, selector="random", score=0.5, policy_id=policy)])
    return policy, g1, g2, pair


def test_prompts_dedupe_and_filter(store):
    assert prompts.add_prompts(store, ["a", "b", "a"]) == prompts.PromptImport(2, 1, ids=(1, 2))
    assert prompts.add_prompts(store, ["b", "c"], heldout=True) == prompts.PromptImport(1, 1, ids=(3,))
    assert [p.text for p in prompts.list_prompts(store, heldout=False)] == ["a", "b"]
    assert [p.text for p in prompts.list_prompts(store, heldout=True)] == ["c"]
    assert prompts.count_prompts(store) == 3
    assert prompts.get_prompt(store, 1).text == "a"
    assert prompts.get_prompt(store, 99) is None


def test_policies(store):
    assert policies.latest_policy(store) is None
    first = policies.add_policy(store, "/a")
    second = policies.add_policy(store, "/b", parent_id=first, round=1, note="ppo")
    assert policies.latest_policy(store).id == second
    assert policies.get_policy(store, second).parent_id == first
    assert [p.path for p in policies.list_policies(store)] == ["/a", "/b"]
    with pytest.raises(NotFound):
        policies.get_policy(store, 42)


def test_generations_round_trip(store):
    policy, g1, g2, _ = seed_pair(store)
    got = generations.get_generations(store, [g1, g2])
    assert got[g1].params == {"temperature": 1.0} and got[g1].seed == 3 and got[g1].ended_with_eos is True
    assert got[g2].ended_with_eos is False
    assert [g.id for g in generations.list_generations(store, policy_id=policy)] == [g1, g2]
    assert generations.get_generations(store, []) == {}


def test_pairs(store):
    _, g1, g2, pair = seed_pair(store)
    assert pairs.get_pair(store, pair).first_id == g1
    assert pairs.count_pairs(store) == 1
    assert pairs.list_pairs(store, round=0)[0].selector == "random"
    with pytest.raises(InvalidInput):
        pairs.add_pairs(store, [NewPair(1, g1, g1, selector="random")])
    with pytest.raises(NotFound):
        pairs.get_pair(store, 7)
    assert pairs.count_pairs(store) == 1


def test_labels_vote_ids_and_replacement(store):
    _, g1, g2, pair = seed_pair(store)
    update_queue_settings(store, overlap=2)
    first = label_pairs(store, "ann", {pair: Outcome.FIRST}, first_on_left=False, decision_ms=900)[pair]
    [label] = labels.list_labels(store)
    assert (label.id, label.left_id, label.decision_ms) == (first, g2, 900)
    assert submit_label(store, "ann", pair, "left", label.vote_id) == first  # replay stores nothing
    assert [lab.outcome for lab in labels.list_labels(store)] == [Outcome.FIRST]
    undo_label(store, "ann")  # ann changes her mind: undo, then label again
    label_pairs(store, "ann", {pair: Outcome.TIE}, first_on_left=False)
    assert [lab.outcome for lab in labels.list_labels(store)] == [Outcome.TIE]
    assert len(labels.list_labels(store, include_undone=True)) == 2
    label_pairs(store, "bob", {pair: Outcome.SKIP})
    assert labels.count_labels(store) == 2 and labels.count_labels(store, include_skips=False) == 1
    [example] = labels.training_labels(store)
    assert (example.prompt, example.first, example.second, example.outcome) == (
        "the movie was", " great .", " awful .", Outcome.TIE)
    assert [lp.outcome for lp in labels.training_labels(store, include_skips=True)] == [Outcome.TIE, Outcome.SKIP]


def test_outcome_targets():
    assert [o.target() for o in Outcome] == [1.0, 0.0, 0.5, 0.5, None]
    assert Outcome.BOTH_BAD.target(both_bad_as_tie=False) is None


def test_reward_models_latest_ensemble(store):
    job = jobs.create_job(store, "reward", {})
    for i in range(3):
        reward_models.add_reward_model(store, f"/rm/{i}", 10, {"val_accuracy": 0.9}, 0.1, 2.0, ensemble_index=i,
                                       ensemble_size=3, job_id=job)
    latest = reward_models.latest_reward_models(store)
    assert [m.ensemble_index for m in latest] == [0, 1, 2]
    assert latest[0].metrics == {"val_accuracy": 0.9} and latest[0].norm_std == 2.0
    assert len(reward_models.list_reward_models(store)) == 3


def test_job_lifecycle(store):
    job_id = jobs.create_job(store, "ppo", {"iterations": 3})
    with pytest.raises(Conflict, match="still running"):
        jobs.create_job(store, "ppo", {})
    job = jobs.claim_job(store, job_id, pid=1234)
    assert job.status is JobStatus.RUNNING and job.pid == 1234 and job.config == {"iterations": 3}
    assert jobs.heartbeat(store, job_id, phase="ppo", progress=0.5) is False
    jobs.request_cancel(store, job_id)
    assert jobs.cancel_requested(store, job_id) and jobs.heartbeat(store, job_id) is True
    jobs.add_log(store, job_id, "line 1")
    jobs.add_log(store, job_id, "line 2")
    assert jobs.tail_logs(store, job_id, n=1) == ["line 2"]
    jobs.finish_job(store, job_id, JobStatus.CANCELLED)
    assert jobs.get_job(store, job_id).status is JobStatus.CANCELLED
    resumed = jobs.requeue_job(store, job_id)
    assert resumed.status is JobStatus.QUEUED and not resumed.cancel_requested
    jobs.claim_job(store, job_id, pid=99)
    jobs.mark_interrupted(store, [job_id])
    assert jobs.get_job(store, job_id).status is JobStatus.INTERRUPTED
    assert [j.id for j in jobs.list_jobs(store)] == [job_id]
    with pytest.raises(NotFound):
        jobs.get_job(store, 999)


def test_cancelling_a_queued_job_ends_it(store):
    job_id = jobs.create_job(store, "loop", {})
    assert jobs.request_cancel(store, job_id).status is JobStatus.CANCELLED
    with pytest.raises(Conflict):
        jobs.claim_job(store, job_id, pid=1)


def test_metrics_upsert_and_filters(store):
    job = jobs.create_job(store, "ppo", {})
    metrics.log_metrics(store, job, 0, {"ppo/kl": 0.1, "ppo/score": 1.0})
    metrics.log_metrics(store, job, 0, {"ppo/kl": 0.2, "ppo/nan": float("nan")})  # rewrite, never a duplicate
    metrics.log_metrics(store, job, 1, {"reward/loss": 0.7})
    expected = [{"job_id": job, "step": 0, "name": "ppo/kl", "value": 0.2}]
    assert metrics.read_metrics(store, job, names=["ppo/kl"]) == expected
    assert {r["name"] for r in metrics.read_metrics(store, prefix="ppo/")} == {"ppo/kl", "ppo/score"}
    assert metrics.last_step(store, job) == 1 and metrics.last_step(store, job, "ppo/") == 0


def test_settings_defaults_and_overrides(store):
    assert settings.get_setting(store, "overlap") == 1
    settings.set_setting(store, "overlap", 2)
    settings.set_setting(store, "overlap", 3)
    assert settings.get_setting(store, "overlap") == 3
    assert settings.get_setting(store, "unknown") is None


def test_connections_are_per_thread(store):
    prompts.add_prompts(store, ["x"])
    seen = []

    def worker(i):
        prompts.add_prompts(store, [f"t{i}"])
        seen.append(store.db())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert prompts.count_prompts(store) == 9
    assert len({id(db) for db in seen}) == 8 and all(db is not store.db() for db in seen)


def test_eval_samples_with_scores(store):
    policy, g1, g2, _ = seed_pair(store)
    other = policies.add_policy(store, "/p2", round=1)
    generations.add_generations(store, [NewGeneration(1, " fine .", policy_id=policy, source=generations.EVAL_SOURCE),
                                        NewGeneration(1, " good .", policy_id=other, source=generations.EVAL_SOURCE)],
                                scores=[{"oracle": 1.0, "reward": 0.25}, {}])
    fine = {"policy_id": policy, "round": 0, "prompt": "the movie was", "text": " fine .", "oracle": 1.0,
            "reward": 0.25}
    good = {"policy_id": other, "round": 1, "prompt": "the movie was", "text": " good ."}
    assert generations.eval_samples(store) == [fine, good]
    assert generations.eval_samples(store, policy_id=other) == [good]
    with pytest.raises(ValueError):  # one score set per generation, or none at all is written
        generations.add_generations(store, [NewGeneration(1, " x", policy_id=policy)], scores=[])
    assert len(generations.list_generations(store)) == 4


def test_rounds(store):
    from storage import rounds

    policy, g1, g2, pair = seed_pair(store)
    label_pairs(store, "ann", {pair: Outcome.FIRST})
    assert rounds.round_label_count(store, 0) == 1 and rounds.round_pair_count(store, 0) == 1
    assert rounds.round_pair_count(store, 1) == 0
    rounds.add_round(store, None, 1, {"k": 4}, {"labels": 1}, policy, None)
    listed = [(r["round"], r["config"], r["summary"]) for r in rounds.list_rounds(store)]
    assert listed == [(1, {"k": 4}, {"labels": 1})]
    assert rounds.max_policy_round_before(store, created=0) == 0
    policies.add_policy(store, "/p2", round=2)
    assert rounds.max_policy_round_before(store, created=1e12) == 2


def test_a_store_opened_by_a_relative_path_knows_its_absolute_place(tmp_path, monkeypatch):
    """Checkpoints registered under the data folder must stay loadable from a worker in another working folder."""
    monkeypatch.chdir(tmp_path)
    store = Store("studio.db")
    assert store.path == tmp_path / "studio.db" and store.data_dir == tmp_path / "studio-data"
    store.close()


def test_root_policy_walks_the_lineage_to_the_sft_policy(store):
    sft = policies.add_policy(store, "/sft")
    one = policies.add_policy(store, "/p1", parent_id=sft, round=1)
    two = policies.get_policy(store, policies.add_policy(store, "/p2", parent_id=one, round=2))
    assert policies.root_policy(store, two).id == sft
    assert policies.root_policy(store, policies.get_policy(store, sft)).id == sft
