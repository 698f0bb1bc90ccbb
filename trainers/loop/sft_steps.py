"""SFT inside a loop (`trainers.jobs.sft_job` on the loop's job):

- `sft_first`: before the first round, once per job, the policy is fine-tuned on every current demonstration and the
  version registered as a new root, so the rounds start from it and it is their KL reference, DPO's reference and the
  SFT side of win-rate pairs (the base stays on the leaderboard). Its held-out oracle score is logged as
  `round/sft_oracle_score` beside the base's `round/oracle_score`.
- `sft_each_round` (off by default): before each round's policy phase, the newest policy is fine-tuned on the
  demonstrations stored since the job's previous SFT step (skipped when there are none); the version is the newest's
  child, so the root stays the reference.

Each step records the version it registered (`round/sft_policy` at the round's step; the first at the step before
the first round) and where its `sft/` steps start, so a stopped or killed loop resumes the step or skips it when done.
"""

from __future__ import annotations

from labeling.versions.winrate import registered_version
from storage import Store
from storage.demonstrations import count_demonstrations
from storage.errors import InvalidInput
from storage.metrics import last_step, log_metrics, read_metrics
from storage.policies import get_policy, list_policies

from ..policy.sft_config import MIN_ROOT_DEMONSTRATIONS, SFTConfig, SFTRun
from ..reporting import Reporter
from .config import LoopConfig, round_seed

SFT_POLICY = "round/sft_policy"  # the version a loop's SFT step registered
SFT_STEP_OFFSET = "round/sft_step_offset"  # where that step's sft/ metrics start
SFT_ORACLE = "round/sft_oracle_score"  # sft_first's version, on the held-out prompts


def sft_settings(config: LoopConfig, round: int) -> dict:
    """The `SFTConfig` fields a loop config sets: epochs, the learning rate (`sft_lr`; else `policy_lr` with LoRA,
    SFTConfig's for a full fine-tune), LoRA, precision and the round's seed."""
    rate = config.sft.learning_rate
    if rate is None:
        rate = config.policy.learning_rate if config.lora else SFTConfig.learning_rate
    return {"epochs": float(config.sft.epochs), "learning_rate": rate, "lora": config.lora, "bf16": config.bf16,
            "seed": round_seed(config.seed, round)}


def recorded(store: Store, job_id: int, name: str, step: int) -> float | None:
    """The value a job logged under `name` at `step`, or None."""
    return next((row["value"] for row in read_metrics(store, job_id, names=[name]) if row["step"] == step), None)


class _Progress(Reporter):
    """An SFT step's progress as the loop's phase `SFT step i/N` in round `index`."""

    def __init__(self, loop, index: int, fraction: float):
        self.loop, self.index, self.fraction = loop, index, fraction

    def progress(self, done: int, total: int) -> None:
        if done:
            self.loop.report(self.index, f"SFT step {done}/{total}", self.fraction)


def _run_step(loop, index: int, step: int, run: SFTRun, name: str) -> int:
    """Run (or resume) one SFT step of the loop's job, its metrics numbered on from the job's earlier SFT steps;
    record and return the version it registered."""
    from ..jobs.sft_job import run_sft

    store, job_id = loop.store, loop.job.id
    offset = recorded(store, job_id, SFT_STEP_OFFSET, step)
    if offset is None:
        offset = last_step(store, job_id, "sft/") or 0
        log_metrics(store, job_id, step, {SFT_STEP_OFFSET: offset})
    outcome = run_sft(store, run, job_id=job_id, state_name=name, step_offset=int(offset), phase=None,
                      listener=_Progress(loop, index, 0.5 if name != "first" else 0.0))
    log_metrics(store, job_id, step, {SFT_POLICY: outcome.policy_id})
    version = registered_version(list_policies(store), outcome.policy_id)
    loop.log(f"SFT: {outcome.steps} steps; {outcome.use}; policy {version}")
    if outcome.warning:  # a new root whose fluency collapsed: the start's child, the root unchanged
        loop.log(f"warning: {outcome.warning}")
    return outcome.policy_id


def run_sft_first(loop) -> None:
    """`sft_first`: fine-tune the starting policy on the demonstrations as a new root, once per job, and score it on
    the held-out prompts."""
    from .evaluation import evaluate_policy

    step = loop.first_round - 1
    if not loop.config.sft.first or recorded(loop.store, loop.job.id, SFT_POLICY, step) is not None:
        return
    loop.step(0, "SFT on the demonstrations", 0.0)
    run = SFTRun(as_root=True, settings=sft_settings(loop.config, step), policy_id=loop.current_policy().id)
    policy = get_policy(loop.store, _run_step(loop, 0, step, run, "first"))
    loop.step(0, f"evaluating {loop.version(policy)}", 0.0)
    score = evaluate_policy(loop.store, policy, loop.config, loop.with_oracle)
    if score is not None:
        log_metrics(loop.store, loop.job.id, step, {SFT_ORACLE: score})


def run_sft_step(loop, index: int, g: int) -> None:
    """`sft_each_round`: before round `g`'s policy phase, fine-tune the newest policy on the demonstrations stored
    since the job's previous SFT step (or its start), as the newest's child; skipped when there are none."""
    if not loop.config.sft.each_round or recorded(loop.store, loop.job.id, SFT_POLICY, g) is not None:
        return
    earlier = [row for row in read_metrics(loop.store, loop.job.id, names=[SFT_POLICY]) if row["step"] < g]
    since = get_policy(loop.store, int(max(earlier, key=lambda r: r["step"])["value"])).created if earlier else \
        loop.job.created
    run = SFTRun(as_root=False, since=since, settings=sft_settings(loop.config, g), policy_id=loop.current_policy().id)
    try:
        from ..jobs.sft_job import plan_examples

        plan_examples(loop.store, run)
    except InvalidInput as exc:
        loop.log(f"round {index + 1}: no SFT step ({exc})")
        return
    loop.step(index, "SFT on the round's demonstrations", 0.5)
    _run_step(loop, index, g, run, f"round-{g}")


def sft_offer(config: LoopConfig, store: Store) -> str | None:
    """The line a loop start shows when SFT should come first: the newest policy is the project's starting model (no
    run trained it) and a base model (no chat template), the store holds demonstrations (for a full fine-tune, as
    many as a new root needs), and `sft_first` is off; None otherwise."""
    from storage.policies import latest_policy, trained_from

    from ..models.chat_format import ChatFormat

    policy = latest_policy(store)
    demonstrations = count_demonstrations(store)
    if config.sft.first or policy is None or not demonstrations or trained_from(store, policy.id) is not None:
        return None
    if not config.lora and demonstrations < MIN_ROOT_DEMONSTRATIONS:  # too few for a full fine-tune as a root
        return None
    if ChatFormat.from_dir(policy.path).chat_template is not None:
        return None
    return (f"note: the policy has no chat template (a base model) and the store holds {demonstrations} "
            "demonstrations: sft_first (--sft-first) fine-tunes it on them before the first round, as the "
            "pipeline's first stage")
