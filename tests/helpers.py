"""Helpers shared by tests: waiting, a fake clock, labeling given pairs the way the Label tab does, a studio whose
Train tab starts no worker, and a finished loop's traces written into a store (`fill_synthetic_run`, for the Curves
and Samples tabs). Serving a studio in this process, auth files and annotators under load are bench/studio_driver.py's
(the benches measure the same things at scale)."""

from __future__ import annotations

import math
import os
import random
import time
import uuid
from pathlib import Path
from typing import Mapping

from app.context import Studio
from labeling.queue.annotation import Choice, next_pair, submit_label, update_queue_settings
from storage import JobStatus, Outcome, Store
from storage import jobs as job_rows
from storage.generations import EVAL_SOURCE, NewGeneration, add_generations, get_generations
from storage.metrics import log_metrics
from storage.pairs import NewPair, add_pairs, get_pair
from storage.policies import add_policy
from storage.prompts import add_prompts, list_prompts
from storage.reward_models import add_reward_model
from storage.rounds import add_round


def wait_for(condition, timeout: float = 120, every: float = 0.1):
    """Poll `condition()` until it returns something truthy (returned), or fail after `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out waiting")


class FakeTime:
    """Stands in for the `time` module of app.door.sessions (monkeypatch it): a monotonic clock moved by hand."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# ---- labeling given pairs ------------------------------------------------------------------------------------------

class _FixedCoin(random.Random):
    """`next_pair`'s left/right coin, fixed: a new reservation shows the first generation left, or always right."""

    def __init__(self, first_on_left: bool):
        super().__init__(0)
        self.value = 0.0 if first_on_left else 0.75

    def random(self) -> float:
        return self.value


def label_pairs(store: Store, annotator: str, outcomes: Mapping[int, Outcome], first_on_left: bool = True,
                decision_ms: int | None = None) -> dict[int, int]:
    """Label pairs as `annotator` through the Label tab's path (`next_pair`, then `submit_label`); returns
    {pair id: label id}.

    `outcomes` maps pair id -> outcome (relative to the pair's first/second); each pair is shown with its first
    generation on the left (`first_on_left`) or on the right, and the on-screen choice meaning that outcome is sent.
    The queue hands pairs in its own order (newest round, highest score, lowest id): a pair it hands that is not in
    `outcomes`, or an empty queue, fails the test. Two annotators on one pair need overlap 2
    (`update_queue_settings`), as in the product.
    """
    coin = _FixedCoin(first_on_left)
    label_ids: dict[int, int] = {}
    while len(label_ids) < len(outcomes):
        wanted = sorted(set(outcomes) - set(label_ids))
        shown = next_pair(store, annotator, rng=coin)
        assert shown is not None, f"the queue has nothing for {annotator}; pairs {wanted} stay unlabeled"
        assert shown.pair_id in wanted, (f"the queue handed {annotator} pair {shown.pair_id}, not one of {wanted}: "
                                         "label pairs in the queue's order")
        pair = get_pair(store, shown.pair_id)
        left_id = pair.first_id if first_on_left else pair.second_id
        assert shown.left == get_generations(store, [left_id])[left_id].text, (
            f"{annotator} held pair {shown.pair_id} with the other side on the left")
        choice = next(c for c in Choice if c.outcome(pair.first_id, left_id) is Outcome(outcomes[shown.pair_id]))
        label_ids[shown.pair_id] = submit_label(store, annotator, shown.pair_id, choice.value, str(uuid.uuid4()),
                                                decision_ms)
    return label_ids


def workerless_studio(store: Store, monkeypatch, users) -> Studio:
    """A studio on `store`, with 16 training prompts and the demo policy, whose Train tab writes job rows (start,
    resume) but starts no worker."""
    from app.train import train_tab
    from storage.policies import add_policy
    from storage.prompts import add_prompts

    add_prompts(store, [f"Review {i}: the film" for i in range(16)])
    add_policy(store, str(Path(__file__).resolve().parent.parent / "assets" / "demo_policy"), round=0, note="SFT")
    monkeypatch.setattr(train_tab, "start_job",
                        lambda store, kind, config, accelerate_config: job_rows.create_job(store, kind, config))
    monkeypatch.setattr(train_tab, "resume_job", lambda store, job_id: job_rows.requeue_job(store, job_id))
    return Studio(store, users)


# ---- a finished loop's traces in a store ----------------------------------------------------------------------------

SYNTHETIC_HELDOUT = ["Describe the sea.", "Name a fruit.", "Say something <b>kind</b> & true."]


def fill_synthetic_run(store, rounds=3, reward_steps=12, policy_iterations=20, in_progress=False,
                       algorithm="ppo") -> dict:
    """A loop job's traces: per round, reward metrics (steps continue), a reward model, PPO metrics (iterations
    continue; GRPO's with `algorithm="grpo"`), a new policy with held-out samples (reward and oracle scores) and a
    round row with its summary. `in_progress` adds a running round's first reward steps and leaves the job running."""
    job_id = job_rows.create_job(store, "loop", {"rounds": rounds, "algorithm": algorithm})
    job_rows.claim_job(store, job_id, os.getpid())
    add_prompts(store, ["Tell a story.", "Write a poem."])
    add_prompts(store, SYNTHETIC_HELDOUT, heldout=True)
    heldout = list_prompts(store, heldout=True)
    policies = [add_policy(store, "/synthetic/sft", round=0, note="SFT policy")]
    add_eval_samples(store, policies[0], heldout, 0)
    reward_step = ppo_step = 0
    for g in range(1, rounds + 1):
        _add_synthetic_labels(store, policies[-1], g)
        for i in range(1, reward_steps + 1):
            reward_step += 1
            values = {"reward/loss": 0.7 * math.exp(-i / 6), "reward/accuracy": 0.5 + 0.4 * i / reward_steps}
            if i % 4 == 0:
                values.update({"reward/val_loss": 0.7 - 0.02 * i, "reward/val_accuracy": 0.55 + 0.05 * g + 0.01 * i})
            log_metrics(store, job_id, reward_step, values)
        rm = add_reward_model(store, f"/synthetic/rm-{g}", labels_used=50 * g, metrics={"val_accuracy": 0.7},
                              norm_mean=0.0, norm_std=1.0, policy_id=policies[-1], round=g, job_id=job_id)
        for i in range(policy_iterations):
            ppo_step += 1
            t = ppo_step / (rounds * policy_iterations)
            own = ({"policy_loss": -0.01, "value_loss": 0.3 * (1 - t), "explained_variance": t} if algorithm == "ppo"
                   else {"loss": -0.01, "kl_token": 0.01 * t, "zero_variance_groups": 0.25})
            log_metrics(store, job_id, ppo_step, {f"{algorithm}/{name}": value for name, value in {
                "score": 0.2 + t + 0.05 * math.sin(i), "kl": 0.3 * t, "kl_coef": 0.05, "entropy": 2.0 - 0.4 * t,
                "clipfrac": 0.1, "approx_kl": 0.01, "response_length": 20 + 5 * t, "eos_rate": 0.8 + 0.1 * t,
                "episodes_per_s": 30.0, **own}.items()})
        policies.append(add_policy(store, f"/synthetic/policy-{g}", parent_id=policies[-1], round=g))
        add_eval_samples(store, policies[-1], heldout, g)
        summary = {"labels": 50 * g, "reward_val_accuracy": 0.6 + 0.05 * g, "score": 0.3 * g, "kl": 0.1 * g,
                   "oracle_score": 0.4 + 0.1 * g, "check_agreement": 0.95 - 0.05 * g}
        add_round(store, job_id, g, {}, summary, policies[-1], rm)
        log_metrics(store, job_id, g, {f"round/{k}": v for k, v in summary.items()})
        log_metrics(store, job_id, g, {"annotator/alice/rm_agreement": 0.75,
                                       "annotator/bob/rm_agreement": 0.5 + 0.1 * g})
    if in_progress:
        for i in range(1, 5):
            log_metrics(store, job_id, reward_step + i, {"reward/loss": 0.6, "reward/accuracy": 0.5})
    else:
        job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    return {"job_id": job_id, "policy_ids": policies, "reward_steps": reward_steps,
            "policy_iterations": policy_iterations}


def _add_synthetic_labels(store, policy_id, g) -> None:
    """Four pairs of the policy's samples labeled by alice and bob, who disagree on the last one."""
    prompt = list_prompts(store, heldout=False)[0]
    texts = [f"round {g} sample {k}" for k in range(8)]
    ids = add_generations(store, [NewGeneration(prompt.id, t, policy_id=policy_id, source="policy") for t in texts])
    pairs = add_pairs(store, [NewPair(prompt.id, ids[k], ids[k + 4], "random", round=g) for k in range(4)])
    update_queue_settings(store, overlap=2)
    for k, pair in enumerate(pairs):
        label_pairs(store, "alice", {pair: Outcome.FIRST}, first_on_left=True, decision_ms=2000)
        label_pairs(store, "bob", {pair: Outcome.SECOND if k == 3 else Outcome.FIRST}, first_on_left=False,
                    decision_ms=4000)


def add_eval_samples(store, policy_id, prompts, g) -> None:
    """Two held-out samples of each prompt by the policy of round `g`, with oracle (and, after round 0, reward)
    scores."""
    texts = [(p, f"{p.text} answer {k} of version {g} <i>as written</i>") for p in prompts for k in range(2)]
    scores = {"oracle": 0.4 + 0.1 * g} if g == 0 else {"oracle": 0.4 + 0.1 * g, "reward": 0.2 * g}
    add_generations(store, [NewGeneration(p.id, text, policy_id=policy_id, source=EVAL_SOURCE) for p, text in texts],
                    scores=[scores] * len(texts))
