"""The human-preference loop (Christiano et al. 2017), round after round, resumable at every step.

One round g: (1) sample K responses per prompt from the newest policy; (2) queue pairs (by the selector:
`trainers.loop.selecting`), plus a reserve so annotators never run dry while the round trains;
(3) collect N labels (the oracle annotator labels them, or the loop waits for people in the UI); (4) train the
reward model on all labels so far; (5) PPO (or GRPO, `algorithm`) for M iterations against it; (6) register policy
g, evaluate it on the held-out prompts (`trainers.loop.evaluation`) and store the round's summary. Each version's blind
win-rate pairs against the SFT policy (`trainers.loop.winrate_pairs`) are queued among the next round's first pairs,
the final version's when the loop ends (the oracle annotator judges them before the job completes). With
`algorithm: dpo` (iterative DPO), step (5) trains the newest policy with DPO on all labels so far against the SFT
policy, and step (4) runs only when the disagreement selector or the check pairs need a reward model. Every step
checks the store first, so a stopped or killed loop continues where it was.

A loop job owns its store rounds (claimed when it first runs, never another job's) and the items it queues in them:
it counts the labels on its own items (its oracle or judge labels nothing else; people may label anything), and a
stopped job's unlabelled items stay in the people's queue until it is resumed.

    python app.py loop --db studio.db --rounds 3 --labels-per-round 100 --annotator oracle
"""

from __future__ import annotations

import random
import time

import torch

from labeling.queue.check_pairs import agreement
from labeling.queue.synthetic import ORACLE_NAME
from labeling.versions.winrate import version_names, winrate_report
from storage import Store
from storage import jobs as job_rows
from storage.check_pairs import check_votes
from storage.errors import InvalidInput
from storage.generations import SAMPLE_SOURCE, list_generations
from storage.metrics import last_step, log_metrics, read_metrics
from storage.policies import list_policies
from storage.prompts import excluded_prompt_ids
from storage.reward_models import list_reward_models
from storage.rounds import add_round, claim_rounds, list_rounds
from storage.types import Generation, Job, LoopLabels, Policy
from storage.winrate import winrate_judgements

from ..policy.config import Algorithm, PolicyRun
from ..policy.dpo_config import DPORun
from ..reporting import JobCancelled, JobPaused, Reporter
from .check_pairs import queue_round_pairs
from .config import (
    Annotator,
    LoopConfig,
    OnWarning,
    collects_labels,
    dpo_settings,
    needs_reward_model,
    policy_settings,
    reward_settings,
    round_seed,
)
from .evaluation import evaluate_policy
from .failure_warnings import (
    DPO_STEP_OFFSET,
    VAL_PAIRS_METRIC,
    pause_reason,
    policy_phase_warnings,
    reward_phase_warnings,
    warning_line,
    winrate_warnings,
)
from .function_evaluation import log_function_scores
from .job_summary import who_judged
from .judging import collect_judge_labels, round_labels
from .label_schedule import labels_in_round
from .pass_rates import PassRate, function_labels, pass_rates
from .prompt_use import check_against_store, samples_too_long_line
from .pulse import Pulse
from .ranking_round import queue_round_rankings, round_judgements, round_queued
from .round_lines import round_line
from .sampling import SamplingConfig, sample_policy
from .selecting import choose_pairs
from .sft_steps import SFT_POLICY, run_sft_first, run_sft_step
from .start_version import start_policy
from .time_left import POLICY_START
from .waiting import waiting_phase
from .winrate_pairs import judge_open_pairs, pending, queue_version_pairs

HUMAN_POLL_S = 2.0
PHASE_REPORTS = 20  # a trainer's progress shown (phase, log line) at most this often a phase: every 5%


class Loop:
    """The rounds of one loop job. `log` receives progress lines; `progress(fraction, phase)` drives a bar."""

    def __init__(self, store: Store, job: Job, log=print, progress=None):
        self.store, self.job, self.log, self.progress = store, job, log, progress
        self.config = LoopConfig.from_dict(job.config)
        self.prompts = check_against_store(self.config, store)  # which prompts fit: decided now, for every round
        for line in self.prompts.lines():
            self.log(line)
            job_rows.add_log(store, job.id, line)
        self.first_round = claim_rounds(store, job.id, self.config.rounds)  # the job's own store rounds, kept
        self.start = start_policy(store, self.config, before=job.created)  # `start_version`, else the newest then
        self.pulse = Pulse(self.beat)  # repeats a phase that runs long (`run`), so none is silent for long

    def report(self, round_index: int, phase: str, fraction_of_round: float) -> bool:
        """Record where the loop is (job phase and progress, a log line, the bar); True when a stop was requested."""
        progress = (round_index + fraction_of_round) / self.config.rounds
        where = f"round {round_index + 1}/{self.config.rounds}: {phase}"
        with self.pulse.lock:
            self.pulse.moved(where, progress)
            stop = self.beat(where, progress)
        job_rows.add_log(self.store, self.job.id, f"round {round_index + 1}: {phase}")
        return stop

    def beat(self, where: str, progress: float) -> bool:
        """Say where the loop is, in the job's row and on the bar (no log line); True when a stop was requested."""
        stop = job_rows.heartbeat(self.store, self.job.id, phase=where, progress=progress)
        if self.progress:
            self.progress(progress, where.split(": ", 1)[1])
        return stop

    def step(self, round_index: int, phase: str, fraction_of_round: float) -> None:
        """Report where the loop is; stop here when a cancel was requested."""
        if self.report(round_index, phase, fraction_of_round):
            raise JobCancelled("the loop was stopped; resume to continue from this step")

    @property
    def with_oracle(self) -> bool:  # a loop on the reward functions alone labels nothing: no oracle to score with
        return self.config.annotator == Annotator.ORACLE and collects_labels(self.config)

    def version(self, policy: Policy) -> str:
        """The policy version's name as phases show it: `policy v3`."""
        return f"policy {version_names(list_policies(self.store))[policy.id]}"

    def current_policy(self) -> Policy:
        """The version the loop trains next: the newest one this job registered (in its own rounds, or by its SFT
        steps), else the version it starts from; never a version another job made meanwhile."""
        sft = {int(row["value"]) for row in read_metrics(self.store, self.job.id, names=[SFT_POLICY])}
        last = self.first_round + self.config.rounds - 1
        own = [p for p in list_policies(self.store) if p.created >= self.job.created and (
            p.id in sft or self.first_round <= p.round <= last)]
        return own[-1] if own else self.start

    def round_policy(self, g: int) -> Policy | None:
        """The version this job's round `g` registered, or None before it did."""
        return next((p for p in reversed(list_policies(self.store))
                     if p.round == g and p.created >= self.job.created), None)

    def run(self) -> None:
        with self.pulse:
            self.run_rounds()

    def run_rounds(self) -> None:
        start = self.current_policy()
        logged = read_metrics(self.store, self.job.id, names=["round/oracle_score"])
        if not any(row["step"] == self.first_round - 1 for row in logged):  # the baseline, once per job
            self.step(0, f"evaluating {self.version(start)}", 0.0)
            baseline = evaluate_policy(self.store, start, self.config, self.with_oracle,
                                       self.sample_report(0, start, 0.0, 0.0).progress)
            if baseline is not None:
                log_metrics(self.store, self.job.id, self.first_round - 1, {"round/oracle_score": baseline})
            log_function_scores(self.store, self.job.id, self.first_round - 1, start, self.config)
        run_sft_first(self)
        done = {r["round"] for r in list_rounds(self.store, self.job.id)}
        for index in range(self.config.rounds):
            if self.first_round + index not in done:
                self.run_round(index)
        self.judge_final_version()

    def queue_winrate_pairs(self, index: int, policy: Policy, within: int, fraction: float) -> None:
        """Queue `policy`'s win-rate pairs (once per version) through the queue's first `within` open places."""
        if pending(self.store, policy, self.config):
            self.step(index, f"queueing win-rate pairs of {self.version(policy)}", fraction)
            queue_version_pairs(self.store, policy, self.config, within, self.with_oracle, self.config.seed,
                                self.job.id)

    def judge_final_version(self) -> None:
        """The newest version's win-rate pairs, queued through the places left in the queue; the oracle judges them
        before the job completes (people judge them after it, and the figures follow their labels)."""
        if not collects_labels(self.config):
            return
        index, newest = self.config.rounds - 1, self.current_policy()
        self.queue_winrate_pairs(index, newest, self.labels_wanted(index), 0.99)
        if self.with_oracle:
            self.step(index, f"judging {self.version(newest)} against the SFT policy", 0.99)
            judge_open_pairs(self.store, self.config, round_seed(self.config.seed, self.first_round + index),
                             self.job.id)
        self.warn(winrate_warnings(self.store, self.job.id, self.config, self.first_round))

    def labels_wanted(self, index: int) -> int:
        """The labels round `index` of this job collects (the schedule: N, then N x decay each round)."""
        return labels_in_round(self.config.labels_per_round, self.config.label_decay, index)

    def run_round(self, index: int) -> None:
        config, g = self.config, self.first_round + index
        seed = round_seed(config.seed, g)
        policy = self.current_policy()
        labels = collects_labels(config)  # a reward of the functions alone needs no pairs, labels or reward model
        if labels and not round_queued(self.store, g, self.job.id):
            self.step(index, "sampling responses", 0.0)
            self.queue_pairs(policy, g, seed, self.labels_wanted(index))
        if labels:
            self.queue_winrate_pairs(index, policy, self.labels_wanted(index), 0.1)
        if labels and round_labels(self.store, config, g, self.job.id) < self.labels_wanted(index):
            self.step(index, "collecting labels", 0.1)
            self.collect_labels(index, g, seed)
        members = [m for m in list_reward_models(self.store) if m.round == g and m.job_id == self.job.id]
        if not members and needs_reward_model(config):
            self.step(index, "training the reward model", 0.3)
            self.train_reward(g)
        self.warn(reward_phase_warnings(self.store, self.job.id, config, g, self.first_round))
        new_policy = self.round_policy(g)
        if new_policy is None:
            run_sft_step(self, index, g)
            self.pause_if_warned()
            self.step(index, self.optimiser, POLICY_START)
            self.run_policy(index, g)
            new_policy = self.round_policy(g)
        self.step(index, f"evaluating {self.version(new_policy)}", 0.95)
        oracle_score = evaluate_policy(self.store, new_policy, self.config, self.with_oracle,
                                       self.sample_report(index, new_policy, 0.95, 0.99).progress)
        log_function_scores(self.store, self.job.id, g, new_policy, self.config)
        self.step(index, "summarising", 0.99)
        self.summarise(index, g, new_policy, oracle_score)
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
        excluded = set(excluded_prompt_ids(self.store))  # excluded since the loop started: not sampled either
        prompts = [prompt for prompt in self.prompts.training.used if prompt.id not in excluded]
        if not prompts:
            raise InvalidInput("every training prompt this loop could use is now excluded; include some again "
                               "(python app.py prompts) and resume")
        chosen = random.Random(seed).sample(prompts, min(config.prompts_per_round, len(prompts)))
        contents = {prompt.id: prompt.content for prompt in self.prompts.training.used}
        sampling = SamplingConfig(config.samples_per_prompt, config.response_length, config.temperature, config.top_p,
                                  top_k=config.top_k, bf16=config.bf16)

        def round_samples() -> list[Generation]:
            return [gen for gen in list_generations(self.store, policy_id=policy.id, source=SAMPLE_SOURCE)
                    if gen.seed == seed]

        samples = round_samples()  # a resumed round reuses what it drew before a kill
        if not samples:
            sample_policy(self.store, policy, chosen, sampling, seed)
            samples = round_samples()
        if line := samples_too_long_line(self.store, samples, contents):
            self.log(line)
            job_rows.add_log(self.store, self.job.id, line)
        if config.rank_k > 2:  # rankings instead of pairs (no check pairs)
            queue_round_rankings(self.store, config, samples, contents, labels + config.queue_reserve, seed, g,
                                 self.job.id)
            return
        older = self.previous_samples(policy, samples) if config.pair_with_previous else []
        regular = choose_pairs(self.store, config, samples, contents, labels + config.queue_reserve, seed, g, older)
        queue_round_pairs(self.store, regular, samples, contents, config.check_share, labels, g, self.job.id)

    def previous_samples(self, policy: Policy, samples: list[Generation]) -> list[Generation]:
        """The samples `policy`'s parent version drew (in earlier rounds, or the demo's seed) of the prompts of
        `samples`; none for a policy without a parent (the SFT policy)."""
        if policy.parent_id is None:
            return []
        prompt_ids = {sample.prompt_id for sample in samples}
        return [gen for gen in list_generations(self.store, policy_id=policy.parent_id, source=SAMPLE_SOURCE)
                if gen.prompt_id in prompt_ids]

    def collect_labels(self, index: int, g: int, seed: int) -> None:
        config, wanted, job = self.config, self.labels_wanted(index), self.job.id
        if config.annotator == Annotator.JUDGE:  # a judge model, and people (or the oracle) where it is unsure
            return collect_judge_labels(self, index, g, seed)
        if config.annotator == Annotator.ORACLE:  # win-rate pairs among the round's count for nothing: label on
            from labeling.queue.synthetic import OracleAnnotator

            oracle = OracleAnnotator.from_spec(config.oracle, noise=config.oracle_noise, seed=seed)
            while (missing := wanted - round_judgements(self.store, g, job)) > 0 and (
                    oracle.rank(self.store, missing, job) or oracle.label(self.store, missing, job_id=job)):
                pass
            return
        while (have := round_judgements(self.store, g, job)) < wanted:
            self.step(index, waiting_phase(have, wanted, "rankings" if config.rank_k > 2 else "labels"),
                      0.1 + 0.2 * have / wanted)
            time.sleep(HUMAN_POLL_S)

    def train_reward(self, g: int) -> None:
        from ..jobs.reward_job import train_reward_model
        from ..reward.config import RewardConfig
        from .annotator_agreement import record_annotator_agreement

        config = RewardConfig(**reward_settings(self.config, g), policy_id=self.current_policy().id)
        listener = PhaseReport(self, g - self.first_round, "reward model step", 0.3, POLICY_START,
                               self.config.reward_model.epochs, self.config.reward_model.ensemble)
        result = train_reward_model(self.store, config, job_id=self.job.id, listener=listener, loop=self.own_labels)
        log_metrics(self.store, self.job.id, g, {VAL_PAIRS_METRIC: result.val_pairs})
        record_annotator_agreement(self.store, self.job.id)
        left_out = f"; {result.left_out.line()}" if result.left_out.line() else ""
        replayed = f" ({result.replayed} replayed)" if result.replayed else ""
        accuracy = result.metrics[0].get("val_accuracy")
        shown = f"{accuracy:.0%}" if accuracy is not None else "not measured (no validation pairs)"
        self.log(f"reward model on {result.labels_used} labels{replayed}: validation accuracy {shown}{left_out}")

    @property
    def optimiser(self) -> str:
        """The policy optimiser's name as phases show it: PPO or GRPO."""
        return self.config.algorithm.upper()

    def run_policy(self, index: int, g: int) -> None:
        """The round's policy optimisation (PPO or GRPO) against the round's reward model, or DPO on the labels."""
        if self.config.algorithm == Algorithm.DPO:
            return self.run_dpo(index, g)
        from ..jobs.policy_job import train_policy

        m, offset = self.config.policy.iterations, (g - self.first_round) * self.config.policy.iterations
        settings = policy_settings(self.config, g)
        beta = self.carried_kl_coef(offset)
        run = PolicyRun(iterations=m, reward=self.config.reward, round=g, reward_functions=self.config.reward_functions,
                        rm_weight=self.config.rm_weight, policy_id=self.current_policy().id,
                        settings=settings if beta is None else {**settings, "init_kl_coef": beta})
        train_policy(self.store, run, job_id=self.job.id, state_name=f"round-{g}", step_offset=offset,
                     phase=None, listener=PhaseReport(self, index, f"{self.optimiser} iteration", POLICY_START, 0.95))

    @property
    def own_labels(self) -> LoopLabels:
        """The labels this loop's reward model and DPO train on: people's, and the oracle's or a judge's only on
        this job's own pairs and rankings (never another loop's)."""
        return LoopLabels(self.job.id, (ORACLE_NAME,))

    def run_dpo(self, index: int, g: int) -> None:
        """The round's DPO on the loop's labels so far (`own_labels`), from the newest policy against the SFT policy;
        its steps are numbered on from the job's earlier DPO steps (where they start is stored, so a resumed round
        keeps them)."""
        from ..jobs.dpo_job import run_dpo

        starts = read_metrics(self.store, self.job.id, names=[DPO_STEP_OFFSET])
        offset = next((int(r["value"]) for r in starts if r["step"] == g), None)
        if offset is None:
            offset = last_step(self.store, self.job.id, "dpo/") or 0
            log_metrics(self.store, self.job.id, g, {DPO_STEP_OFFSET: offset})
        run = DPORun(round=g, settings=dpo_settings(self.config, g), policy_id=self.current_policy().id)
        run_dpo(self.store, run, job_id=self.job.id, loop=self.own_labels,
                state_name=f"round-{g}", step_offset=offset, phase=None,
                listener=PhaseReport(self, index, "DPO step", POLICY_START, 0.95, self.config.policy.epochs))

    def carried_kl_coef(self, before_step: int) -> float | None:
        """The adaptive β of this job's last policy-optimisation iteration up to `before_step` (the previous round's;
        None: fixed β, or a first round), so the controller goes on where that round left it."""
        if self.config.policy.target_kl is None:
            return None
        rows = read_metrics(self.store, self.job.id, names=[f"{self.config.algorithm}/kl_coef"])
        rows = [row for row in rows if row["step"] <= before_step]
        return max(rows, key=lambda row: row["step"])["value"] if rows else None

    def summarise(self, index: int, g: int, new_policy: Policy, oracle_score: float | None) -> None:
        members = [m for m in list_reward_models(self.store) if m.round == g and m.job_id == self.job.id]
        prefix = f"{self.config.algorithm}/"
        trained = {r["name"]: r["value"] for r in read_metrics(self.store, self.job.id, prefix=prefix)}
        summary = {
            "labels": round_labels(self.store, self.config, g, self.job.id),
            "reward_val_accuracy": members[0].metrics.get("val_accuracy") if members else None,
            "score": trained.get(f"{prefix}score"),
            "kl": trained.get(f"{prefix}kl"),
        }
        if oracle_score is not None:
            summary["oracle_score"] = oracle_score
        check = agreement(check_votes(self.store, round=g))
        if check.value is not None:
            summary["check_agreement"] = check.value
        add_round(self.store, self.job.id, g, self.config.to_dict(), summary, new_policy.id,
                  members[0].id if members else None)
        before = [r["value"] for r in read_metrics(self.store, self.job.id, names=["round/oracle_score"])
                  if r["step"] == g - 1]
        log_metrics(self.store, self.job.id, g, {f"round/{k}": v for k, v in summary.items() if v is not None})
        version = version_names(list_policies(self.store))[new_policy.id]
        judged = [v for v in winrate_report(self.store, rounds=0).versions if v.judgements]  # the newest: last
        judges = [j.annotator for j in winrate_judgements(self.store) if judged and j.policy_id == judged[-1].policy_id]
        line = round_line(index + 1, self.config.rounds, version, summary, before[0] if before else None,
                          judged[-1] if judged else None, who_judged(judges) if judges else None,
                          self.config.reward, self.pass_rate_changes(new_policy))
        self.log(line)
        job_rows.add_log(self.store, self.job.id, line)

    def sample_report(self, index: int, policy: Policy, start: float, end: float) -> PhaseReport:
        """The progress of drawing `policy`'s evaluation samples: `evaluating policy v3: sample 64/192`."""
        return PhaseReport(self, index, f"evaluating {self.version(policy)}: sample", start, end)

    def pass_rate_changes(self, policy: Policy) -> list[tuple[PassRate | None, PassRate]]:
        """Each reward function's held-out pass rate on the version `policy` was trained from, and on `policy`."""
        labels = function_labels(self.config.to_dict())
        before = pass_rates(self.store, policy.parent_id, labels) if policy.parent_id is not None else {}
        return [(before.get(label), after) for label, after in pass_rates(self.store, policy.id, labels).items()]


class PhaseReport(Reporter):
    """Shows a trainer's progress as the loop's phase `"{name} i/N"`, between fractions `start` and `end` of the
    round, at most `PHASE_REPORTS` times a phase (the trainer's own reporter checks for a stop at every step)."""

    def __init__(self, loop: Loop, round_index: int, name: str, start: float, end: float, epochs: int = 0,
                 members: int = 1):
        self.loop, self.round_index, self.name, self.start, self.end = loop, round_index, name, start, end
        self.epochs, self.members = epochs, members  # with epochs: where the steps are, as `epoch_position` says

    def progress(self, done: int, total: int) -> None:
        if total and (done == total or done * PHASE_REPORTS // total != (done - 1) * PHASE_REPORTS // total):
            fraction = self.start + (self.end - self.start) * done / total
            where = f" ({epoch_position(done, total, self.epochs, self.members)})" if self.epochs and done else ""
            self.loop.report(self.round_index, f"{self.name} {done}/{total}{where}", fraction)


def epoch_position(done: int, total: int, epochs: int, members: int = 1) -> str:
    """Step `done` of `total` as the epoch it falls in (`epoch 2/3`), and the ensemble member when several train one
    after the other, each `epochs` epochs over its data (`member 2/3, epoch 1/2`)."""
    per_member = total / members
    member = min(members, int((done - 1) // per_member) + 1)
    within = done - (member - 1) * per_member
    epoch = min(epochs, int((within - 1) * epochs // per_member) + 1)
    return (f"member {member}/{members}, " if members > 1 else "") + f"epoch {epoch}/{epochs}"


def run_job(store: Store, job: Job) -> None:
    """The worker's runner for `loop` jobs."""
    torch.set_num_threads(min(torch.get_num_threads(), 4))
    Loop(store, job).run()
