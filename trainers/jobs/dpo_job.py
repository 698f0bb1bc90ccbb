"""DPO runs on a store: the worker's `dpo` jobs, `python app.py dpo` and the loop's DPO phase all run here.

A run (`trainers.policy.dpo_config.DPORun`, saved as the job's config so a resumed job repeats it) trains a policy
version of the store (default: the newest) on the labels that train, read as reward training reads them
(`storage.labels.training_labels`: current labels, no skips, none on a win-rate pair, then every ranking verdict's
comparisons as pairs, whose label ids are the verdict's negated so none equals a pair label's; with `source`, only that
annotator's or imported data set's), against the SFT root (the lineage's root) as reference, then registers the new
version with the start policy as parent. Ties and "both bad" are left out and counted, unless `train_ties` trains them
at p = 0.5, and so are the labels of excluded prompts and those too long for the policy (nothing is cut). This is the
job layer: it reads the store, builds the trainer's reporter and registers what the trainer saved.

Models, as for PPO: in full fine-tuning the reference is the root (a frozen copy when the start is the root). With LoRA
the reference is the base with adapters disabled: a start policy saved by an earlier LoRA run carries its adapter in
`adapter/`, which training continues on its base (the root); otherwise fresh adapters go on the start policy.

    outcome = run_dpo(store, DPORun(source="hh-rlhf", settings={"epochs": 2}), job_id=job.id)  # JobCancelled: stopped
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labeling.queue.ranking import ranking_comparison_pairs
from labeling.queue.synthetic import load_scorer
from labeling.stats.overlap import training_view
from storage import Store
from storage.errors import InvalidInput
from storage.labels import count_labels, training_labels
from storage.types import Job, LoopLabels, Outcome, Policy

from ..models.chat_format import ChatFormat, model_context
from ..models.loading import load_chat_format
from ..policy.dpo_config import DPOConfig, DPORun
from ..reporting import Reporter
from ..reward.data import PreferenceExample, split_by_fit
from .layer import is_main_process, job_reporter, register_policy, staging_path
from .phase_launch import job_launch, launch_phase, weights_digest, with_launch_precision
from .policy_job import load_plan_models, pinned_examples, reference_path, start_policy

DPO_FOLDER = "dpo"  # resumable states: <data dir>/dpo/job-<id>[-<name>]/checkpoint-<step>
LABELS_FILE = "labels.json"  # beside them: the label ids the run trains on
LISTED_SOURCES = 8
EXCLUDED, TOO_LONG = "excluded", "too_long"  # labels left out besides ties and both bad


@dataclass
class DPOOutcome:
    steps: int = field(metadata={"help": "Optimiser steps done in total."})
    policy_id: int = field(metadata={"help": "The registered policy version."})
    metrics: dict = field(metadata={"help": "The last logged metrics and the last samples' measures."})
    labels: int = field(metadata={"help": "Labels trained on."})
    left_out: dict = field(metadata={"help": "Labels left out, by outcome (tie, both_bad)."})


def dpo_examples(store: Store, config: DPOConfig, source: str | None = None, loop: LoopLabels | None = None
                 ) -> tuple[list[PreferenceExample], dict[str, int]]:
    """The examples DPO trains on (with `loop`, a loop job's round's labels: `storage.types.LoopLabels`) and the
    labels it leaves out by outcome (ties and both-bad, unless `train_ties`); raises InvalidInput, in one line, when
    nothing would train."""
    labeled = training_view(store, training_labels(store, loop=loop)) + ranking_comparison_pairs(store, loop)
    if source is not None:
        sources = sorted({lp.annotator for lp in labeled})
        labeled = [lp for lp in labeled if lp.annotator == source]
        if not labeled:
            named = ", ".join(sources[:LISTED_SOURCES]) + (" ..." if len(sources) > LISTED_SOURCES else "")
            raise InvalidInput(f"no labels from source {source!r}; the store's labels come from: "
                               f"{named or 'nobody yet'} (import-preferences --source names a data set)")
    examples, left_out = [], Counter()
    for lp in labeled:
        target = lp.outcome.target(config.both_bad_as_tie)
        if target is None or (target == 0.5 and not config.train_ties):
            left_out[lp.outcome.value] += 1
            continue
        if lp.prompt_excluded:
            left_out[EXCLUDED] += 1
            continue
        examples.append(PreferenceExample(lp.label_id if lp.pair_id is not None else -lp.label_id, lp.pair_id,
                                          lp.prompt_content, lp.first, lp.second, target))
    if examples:
        return examples, dict(left_out)
    stored = count_labels(store, include_skips=False, evaluation=False)
    if left_out[EXCLUDED]:
        raise InvalidInput(f"no label can train DPO, {left_out_line(left_out)}; include the prompts again "
                           "(python app.py prompts) or label more pairs")
    if stored and not labeled and source is None:
        raise InvalidInput(f"all {stored} labels belong to pairs whose generations were deleted; queue and label new "
                           "pairs before training DPO")
    if labeled:
        raise InvalidInput(f"the {len(labeled)} labels are all ties or 'both bad', which DPO leaves out by default; "
                           "train them at p = 0.5 with --train-ties, or label more pairs")
    raise InvalidInput("no labels to train DPO on (skips do not count); label some pairs or import preference data "
                       "first (python app.py import-preferences)")


def state_dir(store: Store, job_id: int, name: str = "") -> Path:
    """Where a job's resumable DPO state lives (`name` tells apart several DPO phases of one job)."""
    return store.data_dir / DPO_FOLDER / f"job-{job_id}{'-' + name if name else ''}"


@dataclass
class DPOPlan:
    """Everything a DPO run needs, resolved from the store and checked: JSON-able, so every process of a launched
    phase builds the same trainer from it without the store."""

    config: dict = field(metadata={"help": "DPOConfig settings."})
    policy_path: str = field(metadata={"help": "The start policy's directory."})
    reference_path: str | None = field(metadata={"help": "The reference's directory (None: see reference_path)."})
    examples: list = field(metadata={"help": "The PreferenceExamples that train."})
    left_out: dict = field(metadata={"help": "Labels left out, by outcome."})
    state_dir: str | None = field(default=None, metadata={"help": "Where the resumable state is saved and read."})
    staged: str | None = field(default=None, metadata={"help": "Where rank 0 saves the trained policy."})

    @classmethod
    def from_dict(cls, values: dict) -> DPOPlan:
        return cls(**{**values, "examples": [PreferenceExample(**e) for e in values["examples"]]})


def plan_dpo(store: Store, run: DPORun, loop: LoopLabels | None = None) -> tuple[DPOPlan, Policy]:
    """The plan of `run` and its start policy (with `loop`, on a loop job's round's labels), after every check that
    loads no model (settings, policy, labels, pairs and sample prompts against the policy's context); writes
    nothing."""
    config = run.config
    config.check()
    start = start_policy(store, run.policy_id)
    examples, left_out = dpo_examples(store, config, run.source, loop)
    context = model_context(start.path)
    if context is not None:
        examples, too_long = fitting_examples(load_chat_format(start.path), examples, context, config.response_length)
        left_out = {**left_out, TOO_LONG: len(too_long)} if too_long else left_out
        if not examples:
            raise InvalidInput(f"no label can train DPO, {left_out_line(left_out)} (its context of {context} with "
                               f"response_length {config.response_length}); lower response_length")
    return DPOPlan(asdict(config), start.path, reference_path(store, start, config.lora), examples, left_out), start


def train_plan(plan: DPOPlan, reporter: Reporter):
    """Run (or resume, from `plan.state_dir`) the plan on this process; the main process saves the policy into
    `plan.staged`. Raises JobCancelled after saving a checkpoint."""
    from ..policy.dpo import save_dpo_policy, train_dpo

    config = DPOConfig(**plan.config)
    policy, reference, tokenizer, _ = load_plan_models(plan.policy_path, plan.reference_path, config.lora,
                                                       with_value_head=False)
    result = train_dpo(config, policy, tokenizer, load_chat_format(plan.policy_path, tokenizer), plan.examples,
                       reference=reference, reporter=reporter, state_dir=plan.state_dir,
                       monitor=load_scorer(config.monitor_oracle) if config.monitor_oracle else None)
    if is_main_process() and plan.staged is not None:
        save_dpo_policy(result, plan.staged)
    result.trainer.accelerator.wait_for_everyone()
    return result


def run_phase(spec: dict, reporter: Reporter) -> dict:
    """One process of a launched DPO phase (`trainers.entry.phase_worker`): the plan in `spec["plan"]`."""
    result = train_plan(DPOPlan.from_dict(spec["plan"]), reporter)
    return {"steps": result.steps, "metrics": result.metrics, "digest": weights_digest(result.trainer.model)}


def run_dpo(store: Store, run: DPORun, job_id: int | None = None, state_name: str = "", step_offset: int = 0,
            phase: str | None = "dpo", listener: Reporter | None = None, loop: LoopLabels | None = None
            ) -> DPOOutcome:
    """Run (or resume) `run` reporting to `job_id`, register the new policy, and drop the resumable state.

    The state lives in `state_dir(store, job_id, state_name)`; metrics are logged at `step_offset + step`; the job's
    phase reads `"{phase} i/N"` (None: the caller keeps its own); `listener` hears every step. Raises JobCancelled
    (after saving a checkpoint) when the job's cancel flag is set. A job with an accelerate config trains in a
    launched phase (`trainers.jobs.phase_launch`), here otherwise. With `loop` (a loop's round) it trains on that loop
    job's labels only (`storage.types.LoopLabels`).
    """
    plan, start = plan_dpo(store, run, loop)
    folder = state_dir(store, job_id, state_name) if job_id is not None else None
    if folder is not None:
        plan.examples = pinned_examples(plan.examples, folder / LABELS_FILE, lambda e: e.label_id, "label", "DPO")
    plan.state_dir = str(folder) if folder is not None else None
    plan.staged = str(staging_path(store))
    launch = job_launch(store, job_id)
    try:
        if launch is not None:
            plan.config = with_launch_precision(plan.config, launch)
            done = launch_phase(store, job_id, launch, f"dpo-{state_name or 'run'}", {"kind": "dpo",
                                "plan": asdict(plan)}, {"step_offset": step_offset, "phase": phase}, listener)
            steps, metrics = done["steps"], done["metrics"]
        else:
            result = train_plan(plan, job_reporter(store, job_id, step_offset, phase, listener))
            steps, metrics = result.steps, result.metrics
    except BaseException:
        shutil.rmtree(plan.staged, ignore_errors=True)
        raise
    policy_id = register_policy(store, Path(plan.staged), parent_id=start.id,
                                round=run.round if run.round is not None else start.round + 1,
                                note=f"DPO, {steps} steps on {len(plan.examples)} labels", made_by="dpo")
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return DPOOutcome(steps, policy_id, metrics, len(plan.examples), plan.left_out)


def fitting_examples(chat: ChatFormat, examples: list[PreferenceExample], context: int,
                     response_length: int) -> tuple[list[PreferenceExample], list[PreferenceExample]]:
    """(fitting, too long): nothing is cut, so a pair that does not fit the policy's `context`, or whose prompt leaves
    no room for the `response_length` of the samples that measure the policy, is left out."""
    fitting, too_long = split_by_fit(chat, examples, context)
    prompts = chat.prompts_ids([e.prompt for e in fitting])
    roomy = [len(ids) + response_length <= context for ids in prompts]
    return ([e for e, ok in zip(fitting, roomy, strict=True) if ok],
            too_long + [e for e, ok in zip(fitting, roomy, strict=True) if not ok])


def left_out_line(left_out: dict[str, int]) -> str:
    """`left out: 3 ties, 1 both bad` (empty when nothing was)."""
    names = {Outcome.TIE.value: "ties", Outcome.BOTH_BAD.value: "both bad", EXCLUDED: "of excluded prompts",
             TOO_LONG: "too long for the policy"}
    parts = [f"{count} {names.get(outcome, outcome)}" for outcome, count in sorted(left_out.items()) if count]
    return f"left out: {', '.join(parts)}" if parts else ""


def run_job(store: Store, job: Job) -> None:
    """The worker's runner for `dpo` jobs (every process under accelerate)."""
    run_dpo(store, DPORun.from_dict(job.config), job.id)
