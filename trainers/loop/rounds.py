"""The human-preference loop (Christiano et al. 2017), round after round, resumable at every step.

One round g: (1) sample K responses per prompt from the newest policy; (2) queue pairs (by the selector:
`trainers.loop.selecting`), plus a reserve so annotators never run dry while the round trains;
(3) collect N labels (the oracle annotator labels them, or the loop waits for people in the UI); (4) train the
reward model on all labels so far; (5) PPO (or GRPO, `algorithm`) for M iterations against it; (6) register policy
g and the round's summary. Every step checks the store first, so a stopped or killed loop continues where it was.

    python app.py loop --db studio.db --rounds 3 --labels-per-round 100 --annotator oracle
"""

from __future__ import annotations

import random
import time

import numpy as np
import torch

from labeling.audit_pairs import agreement
from storage import Store
from storage import jobs as job_rows
from storage.audit_pairs import audit_votes
from storage.generations import (
    EVAL_SOURCE,
    SAMPLE_SOURCE,
    NewGeneration,
    add_generations,
    eval_samples,
    list_generations,
)
from storage.metrics import log_metrics, read_metrics
from storage.policies import latest_policy
from storage.prompts import list_prompts
from storage.reward_models import list_reward_models
from storage.rounds import add_round, list_rounds, max_policy_round_before, round_label_count, round_pair_count
from storage.types import Generation, Job, Policy

from ..policy.config import PolicyRun, RewardSource
from ..reporting import JobCancelled, JobPaused, Reporter
from .audit_pairs import queue_round_pairs
from .config import (
    Annotator,
    LoopConfig,
    OnWarning,
    check_against_store,
    labels_in_round,
    policy_settings,
    reward_settings,
    round_seed,
)
from .failure_warnings import VAL_PAIRS_METRIC, pause_reason, policy_phase_warnings, reward_phase_warnings, warning_line
from .sampling import SamplingConfig, sample_policy
from .selecting import choose_pairs

HUMAN_POLL_S = 2.0
EVAL_SEED = 12345


class Loop:
    """The rounds of one loop job. `log` receives progress lines; `progress(fraction, phase)` drives a bar."""

    def __init__(self, store: Store, job: Job, log=print, progress=None):
        self.store, self.job, self.log, self.progress = store, job, log, progress
        self.config = LoopConfig.from_dict(job.config)
        policy = latest_policy(store)
        check_against_store(self.config, list_prompts(store), policy.path if policy else None)
        self.first_round = max_policy_round_before(store, job.created) + 1

    def report(self, round_index: int, phase: str, fraction_of_round: float) -> bool:
        """Record where the loop is (job phase and progress, a log line, the bar); True when a stop was requested."""
        progress = (round_index + fraction_of_round) / self.config.rounds
        where = f"round {round_index + 1}/{self.config.rounds}: {phase}"
        stop = job_rows.heartbeat(self.store, self.job.id, phase=where, progress=progress)
        job_rows.add_log(self.store, self.job.id, f"round {round_index + 1}: {phase}")
        if self.progress:
            self.progress(progress, phase)
        return stop

    def step(self, round_index: int, phase: str, fraction_of_round: float) -> None:
        """Report where the loop is; stop here when a cancel was requested."""
        if self.report(round_index, phase, fraction_of_round):
            raise JobCancelled("the loop was stopped; resume to continue from this step")

    def run(self) -> None:
        start = latest_policy(self.store)
        logged = read_metrics(self.store, self.job.id, names=["round/oracle_score"])
        if not any(row["step"] == self.first_round - 1 for row in logged):  # the baseline, once per job
            self.step(0, "evaluating the starting policy", 0.0)
            baseline = evaluate_policy(self.store, start, self.config, self.config.annotator == Annotator.ORACLE)
            if baseline is not None:
                log_metrics(self.store, self.job.id, self.first_round - 1, {"round/oracle_score": baseline})
        done = {r["round"] for r in list_rounds(self.store, self.job.id)}
        for index in range(self.config.rounds):
            if self.first_round + index not in done:
                self.run_round(index)

    def labels_wanted(self, index: int) -> int:
        """The labels round `index` of this job collects (the schedule: N, then N x decay each round)."""
        return labels_in_round(self.config.labels_per_round, self.config.label_decay, index)

    def run_round(self, index: int) -> None:
        config, g = self.config, self.first_round + index
        seed = round_seed(config.seed, g)
        policy = latest_policy(self.store)
        if round_pair_count(self.store, g) == 0:
            self.step(index, "sampling responses", 0.0)
            self.queue_pairs(policy, g, seed, self.labels_wanted(index))
        if round_label_count(self.store, g) < self.labels_wanted(index):
            self.step(index, "collecting labels", 0.1)
            self.collect_labels(index, g, seed)
        members = [m for m in list_reward_models(self.store) if m.round == g and m.job_id == self.job.id]
        if not members:
            self.step(index, "training the reward model", 0.3)
            self.train_reward(g)
        self.warn(reward_phase_warnings(self.store, self.job.id, config, g))
        new_policy = latest_policy(self.store)
        if new_policy.round != g or new_policy.created < self.job.created:
            self.pause_if_warned()
            self.step(index, self.optimiser, 0.5)
            self.run_policy(index, g)
            new_policy = latest_policy(self.store)
        self.step(index, "summarising", 0.95)
        self.summarise(index, g, new_policy)
        self.warn(policy_phase_warnings(self.store, self.job.id, config, g, self.first_round))

    def warn(self, warnings) -> None:
        """Print and log each new warning (`warning: <rule>: <title> ...`)."""
        for warning in warnings:
            self.log(warning_line(warning))
            job_rows.add_log(self.store, self.job.id, warning_line(warning))

    def pause_if_warned(self) -> None:
        """With `on_warning: pause`, stop before a PPO/GRPO phase while a warning is not acknowledged by a resume."""
        reason = pause_reason(self.store, self.job.id) if self.config.on_warning == OnWarning.PAUSE else None
        if reason:
            raise JobPaused(reason)

    def queue_pairs(self, policy: Policy, g: int, seed: int, labels: int) -> None:
        config = self.config
        prompts = list_prompts(self.store, heldout=False)
        chosen = random.Random(seed).sample(prompts, config.prompts_per_round)
        sampling = SamplingConfig(config.samples_per_prompt, config.response_length, config.temperature, config.top_p,
                                  top_k=config.top_k, bf16=config.bf16)

        def round_samples() -> list[Generation]:
            return [gen for gen in list_generations(self.store, policy_id=policy.id, source=SAMPLE_SOURCE)
                    if gen.seed == seed]

        samples = round_samples()  # a resumed round reuses what it drew before a kill
        if not samples:
            sample_policy(self.store, policy, chosen, sampling, seed)
            samples = round_samples()
        prompts_by_id = {p.id: p.content for p in chosen}
        regular = choose_pairs(self.store, config, samples, prompts_by_id, labels + config.queue_reserve, seed, g)
        queue_round_pairs(self.store, regular, samples, prompts_by_id, config.audit_share, labels, g)

    def collect_labels(self, index: int, g: int, seed: int) -> None:
        config, wanted = self.config, self.labels_wanted(index)
        if config.annotator == Annotator.ORACLE:
            from labeling.synthetic import OracleAnnotator

            oracle = OracleAnnotator.from_spec(config.oracle, noise=config.oracle_noise, seed=seed)
            oracle.label(self.store, wanted - round_label_count(self.store, g))
            return
        while (have := round_label_count(self.store, g)) < wanted:
            self.step(index, f"waiting for labels ({have}/{wanted})", 0.1 + 0.2 * have / wanted)
            time.sleep(HUMAN_POLL_S)

    def train_reward(self, g: int) -> None:
        from ..jobs.reward_job import train_reward_model
        from ..reward.config import RewardConfig
        from .annotator_agreement import record_annotator_agreement

        result = train_reward_model(self.store, RewardConfig(**reward_settings(self.config, g)), job_id=self.job.id)
        log_metrics(self.store, self.job.id, g, {VAL_PAIRS_METRIC: result.val_pairs})
        record_annotator_agreement(self.store, self.job.id)
        self.log(f"reward model: validation accuracy {result.metrics[0].get('val_accuracy')}")

    @property
    def optimiser(self) -> str:
        """The policy optimiser's name as phases show it: PPO or GRPO."""
        return self.config.algorithm.upper()

    def run_policy(self, index: int, g: int) -> None:
        """The round's policy optimisation (PPO or GRPO) against the round's reward model."""
        from ..jobs.policy_job import train_policy

        m, offset = self.config.policy_iterations, (g - self.first_round) * self.config.policy_iterations
        settings = policy_settings(self.config, g)
        beta = self.carried_kl_coef(offset)
        run = PolicyRun(iterations=m, reward=RewardSource.RM.value, round=g,
                        settings=settings if beta is None else {**settings, "init_kl_coef": beta})
        train_policy(self.store, run, job_id=self.job.id, state_name=f"round-{g}", step_offset=offset,
                     phase=None, listener=PhaseReport(self, index, f"{self.optimiser} iteration", 0.5, 0.95))

    def carried_kl_coef(self, before_step: int) -> float | None:
        """The adaptive β of this job's last policy-optimisation iteration up to `before_step` (the previous round's;
        None: fixed β, or a first round), so the controller goes on where that round left it."""
        if self.config.target_kl is None:
            return None
        rows = read_metrics(self.store, self.job.id, names=[f"{self.config.algorithm}/kl_coef"])
        rows = [row for row in rows if row["step"] <= before_step]
        return max(rows, key=lambda row: row["step"])["value"] if rows else None

    def summarise(self, index: int, g: int, new_policy: Policy) -> None:
        members = [m for m in list_reward_models(self.store) if m.round == g and m.job_id == self.job.id]
        prefix = f"{self.config.algorithm}/"
        trained = {r["name"]: r["value"] for r in read_metrics(self.store, self.job.id, prefix=prefix)}
        summary = {
            "labels": round_label_count(self.store, g),
            "reward_val_accuracy": members[0].metrics.get("val_accuracy") if members else None,
            "score": trained.get(f"{prefix}score"),
            "kl": trained.get(f"{prefix}kl"),
        }
        oracle_score = evaluate_policy(self.store, new_policy, self.config, self.config.annotator == Annotator.ORACLE)
        if oracle_score is not None:
            summary["oracle_score"] = oracle_score
        audit = agreement(audit_votes(self.store, round=g))
        if audit.value is not None:
            summary["audit_agreement"] = audit.value
        add_round(self.store, self.job.id, g, self.config.to_dict(), summary, new_policy.id,
                  members[0].id if members else None)
        log_metrics(self.store, self.job.id, g, {f"round/{k}": v for k, v in summary.items() if v is not None})
        self.log(f"round {index + 1} done: {summary}")


def evaluate_policy(store: Store, policy: Policy, config: LoopConfig, with_oracle: bool,
                    samples: int = 2) -> float | None:
    """The mean oracle score of `policy` on the held-out prompts (None without an oracle). The samples are drawn
    once per policy and stored (source `eval`) with their reward-model and oracle scores for the samples view;
    a later call (a resumed loop, another job) reuses them."""
    stored = eval_samples(store, policy.id) or draw_eval_samples(store, policy, config, with_oracle, samples)
    values = [sample["oracle"] for sample in stored if "oracle" in sample]
    return float(np.mean(values)) if with_oracle and values else None


def draw_eval_samples(store: Store, policy: Policy, config: LoopConfig, with_oracle: bool, samples: int) -> list[dict]:
    """Sample the held-out prompts with `policy`; store the samples and their scores in one transaction."""
    from labeling.synthetic import load_scorer

    from ..models.generation import HFGenerator
    from ..models.loading import default_device, load_sampler_policy, load_tokenizer
    from ..reward.scorer import RewardScorer

    prompts = list_prompts(store, heldout=True)
    if not prompts:
        return []
    generator = HFGenerator(load_sampler_policy(policy.path, config.bf16), load_tokenizer(policy.path))
    groups = generator.generate([p.content for p in prompts], samples, config.response_length, config.temperature,
                                config.top_p, seed=EVAL_SEED, top_k=config.top_k)
    rows = [NewGeneration(prompt.id, s.text, policy_id=policy.id, token_count=s.num_tokens, seed=EVAL_SEED,
                          ended_with_eos=s.ended_with_eos, source=EVAL_SOURCE)
            for prompt, group in zip(prompts, groups, strict=True) for s in group]
    texts = [(prompt.content, s.text) for prompt, group in zip(prompts, groups, strict=True) for s in group]
    scores: list[dict[str, float]] = [{} for _ in rows]
    if list_reward_models(store):
        scorer = RewardScorer.from_store(store, device=default_device())
        rewards = scorer.score([p for p, _ in texts], [t for _, t in texts])
        for named, reward in zip(scores, rewards.tolist(), strict=True):
            named["reward"] = reward
    if with_oracle:
        oracle = load_scorer(config.oracle)
        for named, (_, text) in zip(scores, texts, strict=True):
            named["oracle"] = oracle(text)
    add_generations(store, rows, scores=scores)
    return eval_samples(store, policy.id)


class PhaseReport(Reporter):
    """Shows a trainer's progress as the loop's phase `"{name} i/N"`, between fractions `start` and `end` of the
    round (the trainer's own reporter checks for a stop)."""

    def __init__(self, loop: Loop, round_index: int, name: str, start: float, end: float):
        self.loop, self.round_index, self.name, self.start, self.end = loop, round_index, name, start, end

    def progress(self, done: int, total: int) -> None:
        if done:
            fraction = self.start + (self.end - self.start) * done / total
            self.loop.report(self.round_index, f"{self.name} {done}/{total}", fraction)


def run_job(store: Store, job: Job) -> None:
    """The worker's runner for `loop` jobs."""
    torch.set_num_threads(min(torch.get_num_threads(), 4))
    Loop(store, job).run()
