"""Reward-model runs on a store: the worker's `reward` jobs, `python app.py train-reward` and the loop's reward phase.

This is the job layer around `trainers.reward.trainer`: it reads the labels that train
(`storage.labels.training_labels`: every current label but skips and win-rate judgements, as examples with target p = 1,
0 or 0.5: ties, and "both bad" unless `both_bad_as_tie` is off; those of excluded prompts and those longer than the
model's context are left out, counted) and every ranking verdict (one example of its comparisons), checks the inputs,
splits by pair or ranking item (one item's labels never straddle the split),
trains `ensemble` members (K > 1: each on a bootstrap resample), then normalises and registers them. The model starts
from the project's reward base (`init --reward-base`), else the SFT policy (the root of the newest policy's lineage); it
reads prompts and responses in its own format (`ChatFormat`), so a base with another tokenizer or chat template works
too. Its scores are normalised on the newest policy's samples.

With `training: incremental` a training continues the newest reward model (member k from its member k, as a warm start
does) on its *share*: the labels that model has not seen (`seen_label_ids` in its reward_info.json) plus a seeded replay
sample of `replay_labels` older ones (`trainers.reward.replay`); the other labels are not trained on at all, so its
cost follows the new labels. The first reward model, with none before it, trains on every label. A model that
continues another (incremental or warm-started) validates on its lineage's whole held-out set: the pairs the model
before it validated on (`val_pair_ids`), and a fifth (`val_fraction`) of the pairs new to the lineage
(`trainers.reward.data.lineage_split`), so it is never validated on what its lineage trained on.

Each member is a plain HF directory under `<store data dir>/reward_models/` with `reward_info.json` (labels used,
metrics, normalisation, ensemble index); it is written under a temporary name, renamed when complete, and only then
registered in the store, all members in one transaction.

    result = train_reward_model(store, RewardConfig(ensemble=1), job_id=job.id)   # JobCancelled when stopped
"""

from __future__ import annotations

import json
import random
import shutil
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

import torch

from labeling.queue.ranking import verdict_comparisons
from labeling.stats.overlap import training_view
from labeling.transfer.conversations import PromptInput
from storage import Store
from storage.errors import InvalidInput, NotFound
from storage.generations import SAMPLE_SOURCE, list_generations
from storage.labels import count_labels, training_labels
from storage.metrics import last_step
from storage.policies import get_policy, latest_policy, reward_base_path
from storage.prompts import get_prompt
from storage.rankings import ranking_verdicts
from storage.reward_models import add_reward_model, latest_reward_models
from storage.types import Job, LoopLabels, Policy

from ..models.chat_format import ChatFormat, listed, model_context
from ..models.loading import default_device, load_chat_format, load_tokenizer
from ..reporting import Reporter
from ..reward.config import RewardConfig, RewardTraining
from ..reward.data import (
    Example,
    PreferenceExample,
    RankingExample,
    bootstrap,
    example_from_dict,
    lineage_split,
    split_by_fit,
    split_by_pair,
    unit_order,
)
from ..reward.replay import incremental_share
from ..reward.scorer import INFO_FILE, RewardScorer
from ..reward.trainer import preference_metrics, train_member
from .layer import is_main_process, is_single_process, job_reporter, staging_path, start_a_project
from .phase_launch import job_launch, launch_phase, weights_digest, with_launch_precision

REWARD_MODELS_FOLDER = "reward_models"
STAGING_PREFIX = ".staging-"  # a member being written
MODEL_PREFIX = "rm-r"  # registered members: rm-r<round>-<random>-m<k>


@dataclass(frozen=True)
class LeftOutLabels:
    """Labels a reward training leaves out (kept in the store and in exports): those whose prompt is excluded, and
    those whose prompt and longer response do not fit the reward model's context (nothing is cut)."""

    excluded: tuple[int, ...] = ()  # label ids
    too_long: tuple[int, ...] = ()
    context: int | None = None

    def line(self) -> str:
        """ "12 labels left out: 12 too long for the reward model's context of 512 (labels 3, 9, ...)", or ""."""
        parts = []
        if self.too_long:
            parts.append(f"{len(self.too_long)} too long for the reward model's context of {self.context} "
                         f"(labels {listed(list(self.too_long))})")
        if self.excluded:
            parts.append(f"{len(self.excluded)} of excluded prompts")
        count = len(self.too_long) + len(self.excluded)
        return f"{count} label{'s' if count != 1 else ''} left out: {'; '.join(parts)}" if parts else ""


@dataclass(frozen=True)
class RewardTrainingResult:
    """What `train_reward_model` registered: one id, path and metrics dict per ensemble member."""

    reward_model_ids: list[int]
    paths: list[str]
    metrics: list[dict]
    labels_used: int
    train_pairs: int
    val_pairs: int
    left_out: LeftOutLabels = field(default_factory=LeftOutLabels)
    replayed: int = 0  # incremental training: the older labels among labels_used


@dataclass(frozen=True)
class RewardInputs:
    """What a reward training starts from, checked: the examples, the policy to normalise on, the initial weights
    (a model directory; with a warm start or incremental training, one per member of the newest reward model), how
    they read prompts and responses, the labels left out, and the labels the newest reward model's lineage has seen
    (with `warm_dirs`)."""

    examples: list[Example]
    policy: Policy
    init_dir: Path
    chat: ChatFormat
    warm_dirs: tuple[Path, ...] = ()
    left_out: LeftOutLabels = field(default_factory=LeftOutLabels)
    seen_label_ids: frozenset[int | str] = frozenset()
    training: str = RewardTraining.FULL.value
    held_out: frozenset[int | str] = frozenset()  # with `warm_dirs`: the items the newest reward model validated on

    @property
    def incremental(self) -> bool:
        """Does this training continue the newest reward model on its share (incremental, with one to continue)?"""
        return bool(self.warm_dirs) and self.training == RewardTraining.INCREMENTAL


def check_reward_inputs(store: Store, config: RewardConfig, loop: LoopLabels | None = None) -> RewardInputs:
    """Every check that needs no training, so bad input fails in one line (StudioError) before anything is written:
    the policies, the initial model, the labels (with `loop`, a loop job's round's: `storage.types.LoopLabels`);
    those of excluded prompts and those longer than that model's context are left out, counted."""
    config.check()
    policy = get_policy(store, config.policy_id) if config.policy_id is not None else latest_policy(store)
    if policy is None:
        raise NotFound(f"the store has no policy, so no reward model can start from it; {start_a_project(store)}")
    examples, excluded = load_examples(store, config.both_bad_as_tie, config.margin, loop)
    continues = config.warm_start or config.training == RewardTraining.INCREMENTAL
    warm_dirs = tuple(Path(m.path) for m in latest_reward_models(store)) if continues else ()
    init_dir = warm_dirs[0] if warm_dirs else Path(reward_base(store, config, policy))
    chat = load_chat_format(init_dir)  # raises ModelError: no directory, no tokenizer, no pad token
    context = model_context(init_dir)
    examples, too_long = split_by_fit(chat, examples, context)
    left_out = LeftOutLabels(tuple(excluded), tuple(e.label_id for e in too_long), context)
    if not examples:
        raise InvalidInput(f"no label can train a reward model: {left_out.line()}; include the prompts again "
                           "(python app.py prompts) or start the reward model from a longer-context model")
    seen, held_out = lineage(warm_dirs[0]) if warm_dirs else (frozenset(), frozenset())
    return RewardInputs(examples, policy, init_dir, chat, warm_dirs, left_out, seen, config.training, held_out)


def lineage(model_dir: Path) -> tuple[frozenset[int | str], frozenset[int | str]]:
    """(seen, held out): the labels a reward model and those it continued trained or validated on (`label_ids` in
    files older than incremental training, which always trained on every label), and the items it validated on."""
    info = json.loads((model_dir / INFO_FILE).read_text())
    return frozenset(info.get("seen_label_ids", info["label_ids"])), frozenset(info.get("val_pair_ids", ()))


def reward_base(store: Store, config: RewardConfig, policy: Policy) -> str:
    """The model a reward model starts from: the policy version `init_policy_id` names, else the project's reward
    base (`init --reward-base`), else the SFT root of `policy`'s lineage."""
    if config.init_policy_id is not None:
        return get_policy(store, config.init_policy_id).path
    return reward_base_path(store, policy)


def load_examples(store: Store, both_bad_as_tie: bool = True, margin: float = 0.0,
                  loop: LoopLabels | None = None) -> tuple[list[Example], list[int]]:
    """Every current non-skip label that trains (none on a win-rate pair; with `loop`, none a synthetic annotator gave
    on another job's items) as an example, with its own margin (imported or graded) or `margin`, then every ranking
    verdict that trains as one example of its comparisons, but those of excluded prompts, whose label ids come second;
    raises InvalidInput when no label can train."""
    labeled = training_view(store, training_labels(store, loop=loop))  # each label, or one per pair (overlap)
    trained = [(lp, target) for lp in labeled if (target := lp.outcome.target(both_bad_as_tie)) is not None]
    examples: list[Example] = [PreferenceExample(lp.label_id, lp.pair_id, lp.prompt_content, lp.first, lp.second,
                                                 target, margin if lp.margin is None else lp.margin)
                               for lp, target in trained if not lp.prompt_excluded]
    ranked = [(v, c) for v in ranking_verdicts(store, training=True, loop=loop)
              if (c := verdict_comparisons(v, both_bad_as_tie))]
    examples += [RankingExample(v.label_id, v.ranking_id, v.prompt_content, v.responses, c, margin)
                 for v, c in ranked if not v.prompt_excluded]
    if trained or ranked:
        return examples, ([lp.label_id for lp, _ in trained if lp.prompt_excluded]
                          + [v.label_id for v, _ in ranked if v.prompt_excluded])
    stored = count_labels(store, include_skips=False, evaluation=False)
    if not stored and count_labels(store, include_skips=False):
        raise InvalidInput("every label is on a win-rate pair, which judges policy versions and never trains; label "
                           "the round's pairs before training a reward model")
    if stored and not labeled:
        raise InvalidInput(f"all {stored} labels belong to pairs whose generations were deleted; "
                           "queue and label new pairs before training a reward model")
    if labeled:
        raise InvalidInput(f"the {len(labeled)} labels are all 'both bad', which this run leaves out; "
                           "train them as ties or label more pairs")
    raise InvalidInput("no labels to train a reward model on (skips do not count); label some pairs first")


@dataclass
class RewardPlan:
    """Everything every process of a reward training needs, resolved from the store and checked: JSON-able, so every
    process of a launched phase trains from it without the store."""

    config: dict  # RewardConfig settings
    init_dir: str  # the model the members start from (with a warm start, the newest reward model's first member)
    policy_id: int  # the policy whose samples normalise the scores
    train: list[Example]
    val: list[Example]
    norm_texts: tuple[list, list[str], str]  # (prompts, responses, source) the scores are normalised on
    staged: list[str]  # where each member is written before it is registered
    warm_dirs: list[str] = field(default_factory=list)  # warm start: the newest reward model's members
    seen_label_ids: list[int | str] = field(default_factory=list)  # what the trained model's lineage has seen (keys)
    replayed: int = 0  # incremental training: the older labels among train

    def start_dir(self, k: int) -> Path:
        """Where member k starts: the newest reward model's member k (its first when it had fewer), else the base."""
        return Path(self.warm_dirs[k % len(self.warm_dirs)] if self.warm_dirs else self.init_dir)

    @property
    def members(self) -> list[list[Example]]:
        """Each member's training examples: all of them, or (K > 1) a bootstrap resample each."""
        seed, ensemble = self.config["seed"], self.config["ensemble"]
        return [self.train] if ensemble == 1 else [bootstrap(self.train, seed + k) for k in range(ensemble)]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> RewardPlan:
        examples = {name: [example_from_dict(e) for e in values[name]] for name in ("train", "val")}
        return cls(**{**values, **examples})


def plan_reward_training(store: Store, config: RewardConfig, inputs: RewardInputs | None = None) -> RewardPlan:
    """The plan of a reward training: the checked inputs (checked here unless given), incremental training's share,
    split by pair, and the normalisation texts."""
    inputs = inputs or check_reward_inputs(store, config)
    examples = inputs.examples
    split_seed = config.seed if config.split_seed is None else config.split_seed
    if inputs.warm_dirs:  # never validate on what the lineage trained on
        train, val = lineage_split(examples, inputs.seen_label_ids, inputs.held_out, config.val_fraction, split_seed)
    else:
        train, val = split_by_pair(examples, config.val_fraction, split_seed)
    replayed = []
    if inputs.incremental:
        new, replayed = incremental_share(train, inputs.seen_label_ids, config.replay_labels, config.seed)
        train = new + replayed
        if not train:
            raise InvalidInput("no label that trains is new since the newest reward model and replay_labels is 0, "
                               "so incremental training has nothing to train on; label more pairs, or set "
                               "replay_labels or training: full")
    norm_texts = _normalisation_texts(store, inputs.policy.id, examples, config.norm_samples, config.seed)
    staged = [str(staging_path(store, REWARD_MODELS_FOLDER, STAGING_PREFIX))
              for _ in range(config.ensemble)]
    seen = sorted(inputs.seen_label_ids | {e.key for e in examples}, key=unit_order)
    if inputs.warm_dirs:
        config = replace(config, learning_rate=config.learning_rate * config.continue_lr_scale)
    return RewardPlan(asdict(config), str(inputs.init_dir), inputs.policy.id, train, val, norm_texts, staged,
                      [str(d) for d in inputs.warm_dirs], seen, len(replayed))


def train_reward_model(store: Store, config: RewardConfig, job_id: int | None = None,
                       listener: Reporter | None = None, loop: LoopLabels | None = None) -> RewardTrainingResult:
    """Train `config.ensemble` members from the reward base (or, warm-started, from the newest reward model's),
    checkpoint them and register them in the store.

    Metrics go to the store under `job_id` (steps continue after the job's earlier `reward/` steps); `listener`
    hears every step and progress report. Raises JobCancelled, with nothing registered, when the job is stopped.
    A job with an accelerate config trains in a launched phase (`trainers.jobs.phase_launch`), here otherwise. With
    `loop` (a loop's round) it trains on that loop job's labels only (`storage.types.LoopLabels`).
    """
    inputs = check_reward_inputs(store, config, loop)
    plan = plan_reward_training(store, config, inputs)
    step_offset = 0 if job_id is None else (last_step(store, job_id, "reward/") or 0)
    launch = job_launch(store, job_id)
    try:
        if launch is not None:
            plan.config = with_launch_precision(plan.config, launch)
            launch_phase(store, job_id, launch, f"reward-r{config.round}", {"kind": "reward", "plan": plan.to_dict()},
                         {"step_offset": step_offset}, listener)
        else:
            train_plan(plan, job_reporter(store, job_id, step_offset, listener=listener))
        return register_reward_models(store, config, job_id, plan.policy_id, [Path(p) for p in plan.staged],
                                      len(plan.train) + len(plan.val), len({e.unit for e in plan.train}),
                                      len({e.unit for e in plan.val}), inputs.left_out, plan.replayed)
    finally:
        for staged in plan.staged:
            shutil.rmtree(staged, ignore_errors=True)


def train_plan(plan: RewardPlan, reporter: Reporter, on_trained: Callable | None = None) -> list[dict]:
    """Train every member of `plan` on this process (the main process also writes each one's reward_info.json);
    returns each member's metrics; `on_trained` sees each trained model. Raises JobCancelled when stopped.

    In one process the trained member is scored where it is, once: the normalisation texts and the validation
    examples' responses in one pass, which gives its validation metrics too (the Trainer does not validate the
    last step again); a launched phase's processes validate together, and its main process reads the saved member."""
    config, init_dir = RewardConfig(**plan.config), Path(plan.init_dir)
    chat, pad_id = load_chat_format(init_dir), load_tokenizer(init_dir).pad_token_id
    return [_train_and_finish(plan, config, chat, pad_id, k, member_examples, reporter, on_trained)
            for k, member_examples in enumerate(plan.members)]


def _train_and_finish(plan: RewardPlan, config: RewardConfig, chat: ChatFormat, pad_id: int, k: int,
                      member_examples: list[Example], reporter: Reporter, on_trained: Callable | None) -> dict:
    """Member `k` trained, scored, and (on the main process) finished; returns its metrics."""
    staged, scores, alone = Path(plan.staged[k]), {}, is_single_process()

    def score(model: torch.nn.Module) -> None:  # train_member calls it before `validate`
        if alone:
            scores.update(_member_scores(RewardScorer([model], chat, pad_id, [(0.0, 1.0)]), plan))
        if on_trained is not None:
            on_trained(model)

    def validate(model: torch.nn.Module) -> dict[str, float]:
        return validation_metrics(plan.val, scores, config.label_noise)

    metrics = train_member(config, k, plan.start_dir(k), chat, member_examples, plan.val, staged, reporter, score,
                           validate if alone else None)
    if is_main_process():
        if not scores:
            scores = _member_scores(RewardScorer.from_dirs([staged], norms=[(0.0, 1.0)], device=default_device()), plan)
        _finish_member(staged, plan, k, member_examples, metrics, scores)
    return metrics


def run_phase(spec: dict, reporter: Reporter) -> dict:
    """One process of a launched reward-model phase (`trainers.entry.phase_worker`): the plan in `spec["plan"]`."""
    digests = []
    metrics = train_plan(RewardPlan.from_dict(spec["plan"]), reporter,
                         lambda model: digests.append(weights_digest(model)))
    return {"metrics": metrics, "digest": "/".join(digests)}


def _member_scores(scorer: RewardScorer, plan: RewardPlan) -> dict[tuple[str, str], float]:
    """A member's raw score of each distinct (prompt as JSON, response) that finishing it reads: the normalisation
    texts and the validation examples' responses (often the same texts: the policy's samples), each scored once."""
    prompts, responses, _ = plan.norm_texts
    wanted = [*zip(prompts, responses, strict=True), *((e.prompt, t) for e in plan.val for t in e.texts)]
    texts = {(json.dumps(p), r): (p, r) for p, r in wanted}
    scored = scorer.raw_scores([p for p, _ in texts.values()], [r for _, r in texts.values()])[0]  # (distinct,)
    return {key: value.item() for key, value in zip(texts, scored, strict=True)}


def validation_metrics(val: list[Example], scores: dict[tuple[str, str], float], label_noise: float) -> dict:
    """`val_loss`, `val_accuracy` and `val_tie_logloss` of the validation examples from their responses' scores, as
    `PreferenceTrainer.evaluate` computes them (each comparison weighted 1 / its example's comparisons)."""
    d, target, margin, weight = [], [], [], []
    for e in val:
        s = [scores[json.dumps(e.prompt), text] for text in e.texts]
        for a, b, p in e.comparisons:
            d.append(s[a] - s[b])
            target.append(p)
            margin.append(e.margin)
            weight.append(1 / len(e.comparisons))
    metrics = preference_metrics(*(torch.tensor(v, dtype=torch.float32) for v in (d, target)),
                                 torch.tensor(margin, dtype=torch.float32), label_noise,
                                 torch.tensor(weight, dtype=torch.float32))
    return {f"val_{name}": value for name, value in metrics.items()}


def _finish_member(out_dir: Path, plan: RewardPlan, k: int, member_examples: list[Example], metrics: dict,
                   scores: dict[tuple[str, str], float]) -> None:
    """Write reward_info.json beside the saved member: its normalisation (mean/std of its `scores` of the
    normalisation texts) and P(first preferred) of each validation pair, which the loop's annotator agreement reads
    instead of scoring them again."""
    prompts, responses, source = plan.norm_texts
    examples = plan.train + plan.val
    pairs = [e for e in plan.val if isinstance(e, PreferenceExample)]
    raw = torch.tensor([scores[json.dumps(p), r] for p, r in zip(prompts, responses, strict=True)])  # (N,)
    raw = raw[~raw.isnan()]  # NaN: a text over the model's context, not scored (none fit: no normalisation)
    norm_mean, norm_std = (raw.mean().item(), max(raw.std(unbiased=False).item(), 1e-6)) if len(raw) else (0.0, 1.0)
    lead = torch.tensor([scores[json.dumps(e.prompt), e.first] - scores[json.dumps(e.prompt), e.second]
                         for e in pairs])
    first_probability = dict(zip((str(e.pair_id) for e in pairs), torch.sigmoid(lead).tolist(), strict=True))
    info = {
        "labels_used": len(examples), "label_ids": sorted({e.label_id for e in examples}),
        "seen_label_ids": plan.seen_label_ids, "replayed": plan.replayed,
        "member_label_ids": [e.label_id for e in member_examples],
        "val_pair_ids": sorted({e.unit for e in plan.val}, key=unit_order), "val_first_probability": first_probability,
        "metrics": metrics, "norm_mean": norm_mean, "norm_std": norm_std,
        "norm_samples": len(raw), "norm_source": source, "policy_id": plan.policy_id,
        "ensemble_index": k, "ensemble_size": len(plan.staged), "config": plan.config,
    }
    (out_dir / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")


def _normalisation_texts(store: Store, policy_id: int, examples: list[Example], limit: int,
                         seed: int) -> tuple[list[PromptInput], list[str], str]:
    """(prompts, responses, source): the policy's samples, or the labelled responses when it has none."""
    generations = list_generations(store, policy_id=policy_id, source=SAMPLE_SOURCE)
    if generations:
        prompts = {}
        rows = random.Random(seed).sample(generations, min(limit, len(generations)))
        for g in rows:
            if g.prompt_id not in prompts:
                prompts[g.prompt_id] = get_prompt(store, g.prompt_id).content
        return [prompts[g.prompt_id] for g in rows], [g.text for g in rows], f"policy {policy_id} samples"
    responses = sorted({(unit_order(e.unit), i, text) for e in examples for i, text in enumerate(e.texts)})
    by_unit = {unit_order(e.unit): e.prompt for e in examples}
    rows = random.Random(seed).sample(responses, min(limit, len(responses)))
    return [by_unit[unit] for unit, _, _ in rows], [text for _, _, text in rows], "labelled responses"


def register_reward_models(store: Store, config: RewardConfig, job_id: int | None, policy_id: int,
                           staging: list[Path], labels_used: int, train_pairs: int, val_pairs: int,
                           left_out: LeftOutLabels = LeftOutLabels(), replayed: int = 0) -> RewardTrainingResult:
    """Rename the complete members staged by the trainer to their final directories and register them all in one
    transaction (the directories are removed again if registering fails)."""
    name = f"{MODEL_PREFIX}{config.round}-{uuid.uuid4().hex[:8]}"
    finals = [staged.parent / f"{name}-m{k}" for k, staged in enumerate(staging)]
    infos = [json.loads((staged / INFO_FILE).read_text()) for staged in staging]
    for staged, final in zip(staging, finals, strict=True):
        staged.rename(final)
    try:
        with store.write():
            ids = [add_reward_model(store, str(final), labels_used, info["metrics"], info["norm_mean"],
                                    info["norm_std"], policy_id=policy_id, round=config.round, ensemble_index=k,
                                    ensemble_size=len(finals), job_id=job_id)
                   for k, (final, info) in enumerate(zip(finals, infos, strict=True))]
    except BaseException:
        for final in finals:
            shutil.rmtree(final, ignore_errors=True)
        raise
    return RewardTrainingResult(ids, [str(f) for f in finals], [i["metrics"] for i in infos], labels_used,
                                train_pairs, val_pairs, left_out, replayed)


def run_job(store: Store, job: Job) -> None:
    """The worker's runner for `reward` jobs: the job's config is a RewardConfig as a dict."""
    known = {f.name for f in fields(RewardConfig)}
    unknown = sorted(set(job.config) - known)
    if unknown:
        raise InvalidInput(f"unknown reward-model setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
    train_reward_model(store, RewardConfig(**job.config), job_id=job.id)
