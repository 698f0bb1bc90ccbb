"""SFT runs on a store: the worker's `sft` jobs, `python app.py sft` and a loop's SFT steps (`sft_first`,
`sft_each_round`) all run here.

A run (`trainers.policy.sft_config.SFTRun`, saved as the job's config so a resumed job repeats it) fine-tunes a policy
version of the store (default: the newest) on the current demonstrations (of one source when asked) that fit its
context (`trainers.jobs.sft_data`: the others kept, counted, never cut), then registers the new version, merged (a
plain folder, no adapter). With `as_root` (the default) the version is a new root: `root_policy` stops at it, so later
rounds' KL reference, DPO's reference and the SFT side of win-rate pairs are the SFT version, and the version it was
trained from stays on the leaderboard (`trained_from` keeps the link). Without it the version is the start's child.

A new root is checked before it anchors (`trainers.policy.fluency`: the start's samples on held-out prompts, their
NLL under the new version over under the start). One whose fluency collapsed is registered as the start's child, not
the root, with a job warning (`ROOT_CHECK_RULE`) saying why and how to make it the root anyway (`set-root vK`, or
the Train tab's **Make root**). Every registered version's weights are checked finite (`register_policy`).

    outcome = run_sft(store, SFTRun(source="writers", settings={"epochs": 2}), job_id=job.id)  # JobCancelled: stopped
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from labeling.versions.winrate import version_names
from storage import Store
from storage.generations import list_generations
from storage.job_warnings import record_warnings
from storage.metrics import log_metrics
from storage.policies import list_policies, set_trained_from
from storage.prompts import list_prompts
from storage.types import Job, JobWarning, Policy

from ..models.chat_format import PromptBudget, model_context
from ..models.loading import load_chat_format, load_policy, load_tokenizer
from ..policy.sft_config import (
    MAKE_SFT_POLICY,
    ROOT_CHECK_RULE,
    SFTConfig,
    SFTExample,
    SFTRun,
    check_root_demonstrations,
)
from ..reporting import Reporter
from .layer import job_reporter, register_policy, staging_path
from .policy_job import pinned_examples, start_policy
from .sft_data import DemonstrationUse, checked_use

SFT_FOLDER = "sft"  # resumable states: <data dir>/sft/job-<id>[-<name>]/checkpoint-<step>
DEMONSTRATIONS_FILE = "demonstrations.json"  # beside them: the demonstration ids the run trains on


@dataclass
class SFTOutcome:
    steps: int = field(metadata={"help": "Optimiser steps done in total."})
    policy_id: int = field(metadata={"help": "The registered policy version."})
    metrics: dict = field(metadata={"help": "The last logged metrics."})
    demonstrations: int = field(metadata={"help": "Demonstrations used (trained on or held out)."})
    use: str = field(metadata={"help": "The line saying which demonstrations were used and which left out."})
    warning: str | None = field(default=None, metadata={
        "help": "Why a version meant as a new root was not made the root, and how to make it so; None: no warning."})
    check: object = field(default=None, metadata={"help": "The new-root check (a FluencyCheck), when one ran."})


def state_dir(store: Store, job_id: int, name: str = "") -> Path:
    """Where a job's resumable SFT state lives (`name` tells apart several SFT steps of one job)."""
    return store.data_dir / SFT_FOLDER / f"job-{job_id}{'-' + name if name else ''}"


def plan_examples(store: Store, run: SFTRun) -> tuple[SFTConfig, Policy, list[SFTExample], DemonstrationUse]:
    """The settings, start policy and examples of `run` after every check that loads no model; writes nothing."""
    config = run.config
    config.check()
    start = start_policy(store, run.policy_id)
    use = checked_use(store, start, run.source, run.since)
    check_root_demonstrations(config, run.as_root, len(use.used))
    return config, start, [SFTExample(d.id, d.prompt_content, d.text) for d in use.used], use


def run_sft(store: Store, run: SFTRun, job_id: int | None = None, state_name: str = "", step_offset: int = 0,
            phase: str | None = "sft", listener: Reporter | None = None) -> SFTOutcome:
    """Run (or resume) `run` reporting to `job_id`, register the new policy version, and drop the resumable state.
    Raises JobCancelled (after saving a checkpoint) when the job's cancel flag is set."""
    from ..policy.sft import save_sft_policy, train_sft

    config, start, examples, use = plan_examples(store, run)
    folder = state_dir(store, job_id, state_name) if job_id is not None else None
    if folder is not None:
        examples = pinned_examples(examples, folder / DEMONSTRATIONS_FILE, lambda e: e.demonstration_id,
                                   "demonstration", "SFT")
    staged = staging_path(store)
    try:
        tokenizer = load_tokenizer(start.path)
        policy, chat = load_policy(start.path), load_chat_format(start.path, tokenizer)
        baseline = root_baseline(store, start, policy, tokenizer, chat, config.seed) if run.as_root else None
        result = train_sft(config, policy, tokenizer, chat, examples,
                           reporter=job_reporter(store, job_id, step_offset, phase, listener), state_dir=folder)
        trained = result.trainer.accelerator.unwrap_model(result.trainer.model)
        check = baseline.check(trained) if baseline is not None else None
        save_sft_policy(result, staged)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    made_root = run.as_root and not (check is not None and check.collapsed)
    start_name = version_names(list_policies(store))[start.id]
    kept = (" (the new SFT policy)" if made_root else " (not made the SFT policy: its fluency collapsed)" if run.as_root
            else "")
    policy_id = register_policy(store, staged, parent_id=None if made_root else start.id,
                                round=run.round if run.round is not None else start.round,
                                note=f"SFT of {start_name}, {result.steps} steps on {result.trained} demonstrations"
                                     f"{kept}", made_by="sft")
    set_trained_from(store, policy_id, start.id)
    warning = None
    if check is not None and job_id is not None:
        log_metrics(store, job_id, step_offset + result.steps,
                    {"sft/root_check_ratio": check.ratio, "sft/root_check_seconds": check.seconds})
    if run.as_root and not made_root:
        warning = not_made_root(store, job_id, policy_id, start_name, check, run.round or 0,
                                step_offset + result.steps)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return SFTOutcome(result.steps, policy_id, result.metrics, len(examples), use.line(), warning, check)


def root_baseline(store: Store, start: Policy, parent, tokenizer, chat, seed: int):
    """The new-root check's baseline (`trainers.policy.fluency`), measured on `parent` (the loaded `start`, before SFT
    trains it): `start`'s stored samples (held-out prompts first), or new ones for the store's held-out prompts (its
    training prompts when none is held out) that fit the context; None when there is nothing to check on."""
    from ..policy.fluency import CHECK_PROMPTS, CHECK_TOKENS, GENERATED_TOKENS, fluency_baseline, sampled_rows

    started = time.perf_counter()
    prompts = {p.id: p for p in list_prompts(store, excluded=False)}
    stored = sorted((g for g in list_generations(store, policy_id=start.id) if g.prompt_id in prompts and g.text),
                    key=lambda g: (not prompts[g.prompt_id].heldout, g.id))[:CHECK_PROMPTS]
    if stored:
        rows = [(prompt, response[:CHECK_TOKENS]) for prompt, response in  # the first CHECK_TOKENS of each
                zip(chat.prompts_ids([prompts[g.prompt_id].content for g in stored]),
                    chat.responses_ids([g.text for g in stored]), strict=True)]
    else:
        candidates = [p for p in prompts.values() if p.heldout] or list(prompts.values())
        context = model_context(start.path)
        if context is not None:
            candidates = PromptBudget(chat, context, GENERATED_TOKENS).fit(candidates).fitting
        if not candidates:
            return None
        rows, parent_nll = sampled_rows(parent, tokenizer, chat, [p.content for p in candidates], seed)
        return fluency_baseline(parent, tokenizer.pad_token_id, rows, started, parent_nll)
    return fluency_baseline(parent, tokenizer.pad_token_id, rows, started)


def not_made_root(store: Store, job_id: int | None, policy_id: int, start_name: str, check, round: int,
                  step: int) -> str:
    """The warning of a version meant as a new root that the check kept from anchoring, recorded on the job; returns
    it as one line."""
    version = version_names(list_policies(store))[policy_id]
    title = f"{version} was not made the SFT policy: its held-out fluency collapsed"
    detail = f"{check.line()}; it is registered as {start_name}'s child, and {start_name}'s SFT policy stays"
    advice = (f"write more demonstrations or lower the learning rate; to make it the SFT policy anyway, python app.py "
              f"set-root {version} --db {store.path}, or the Train tab's {MAKE_SFT_POLICY}")
    if job_id is not None:
        record_warnings(store, job_id, [JobWarning(job_id, ROOT_CHECK_RULE, round, step, title, detail, advice,
                                                   time.time())])
    return f"{title} ({detail}); {advice}"


def run_job(store: Store, job: Job) -> None:
    """The worker's runner for `sft` jobs."""
    run_sft(store, SFTRun.from_dict(job.config), job.id)


def outcome_line(job_id: int, outcome: SFTOutcome, version: str) -> str:
    """What the command prints when the job completes (`version`: the registered policy, as
    `labeling.versions.winrate.registered_version` names it), and the new-root warning when there is one."""
    line = f"sft job {job_id}: completed, {outcome.steps} steps; {outcome.use}; registered policy {version}"
    return line + (f"\nwarning: {outcome.warning}" if outcome.warning else "")

