"""Which stored prompts and labels a loop uses: prompts not excluded (`python app.py prompts --exclude`) that fit the
policy's budget (its context less the response length), and labels whose prompt is not excluded and whose prompt and
longer response fit the reward model's context. What does not fit is kept (exports keep it) and left out of
sampling, training and evaluation, counted and named by id, never cut. A round's samples too long for the reward
model's context as it reads them (a decoded sample may take more tokens than it was sampled in) are counted and named
too: the scorer leaves them out of the round's pairs (`trainers.reward.scorer`). No torch here: the Train tab, the
import commands and `prompts` count with it too.

    prompts = loop_prompts(store, policy.path, response_length=64)   # decided when a loop starts
    for line in prompts.lines():  # "training prompts: 2301 of 2310 used; 9 too long for 488 tokens (prompts 24, ...)"
        print(line)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from labeling.transfer.conversations import PromptInput
from storage import Store
from storage.errors import InvalidInput
from storage.labels import training_labels
from storage.policies import latest_policy, reward_base_path
from storage.prompts import count_prompts, list_prompts
from storage.reward_models import latest_reward_models
from storage.types import Generation, Prompt

from ..jobs.layer import start_a_project
from ..jobs.sft_data import check_sft_first
from ..models.chat_format import PromptBudget, PromptFit, listed, model_context, pair_token_counts, prompt_budget
from .config import LoopConfig, collects_labels
from .presets import project_preset
from .start_version import start_policy


@dataclass(frozen=True)
class PromptUse:
    """The prompts of one split (training or held out) a loop uses, and those it leaves out: excluded ones, and
    (of the rest) those too long for the budget (`fit` is None when the policy's context is unknown here)."""

    heldout: bool
    used: list[Prompt]
    excluded: int
    fit: PromptFit | None

    @property
    def too_long(self) -> int:
        return len(self.fit.too_long) if self.fit else 0

    @property
    def total(self) -> int:
        return len(self.used) + self.too_long + self.excluded

    def line(self) -> str:
        """ "training prompts: 2301 of 2310 used; 9 too long for 488 tokens (prompts 24, 31, ...); 0 excluded"."""
        parts = [f"{len(self.used)} of {self.total} used"]
        if self.too_long:
            parts.append(self.fit.too_long_line())
        if self.excluded:
            parts.append(f"{self.excluded} excluded")
        return f"{'held-out' if self.heldout else 'training'} prompts: {'; '.join(parts)}"


def prompt_use(store: Store, budget: PromptBudget | None, heldout: bool) -> PromptUse:
    """The stored prompts of a split against `budget` (None: the context is unknown, every prompt not excluded is
    used)."""
    prompts = list_prompts(store, heldout=heldout)
    return _split(prompts, _fit(prompts, budget), heldout)


def _fit(prompts: list[Prompt], budget: PromptBudget | None) -> PromptFit | None:
    """The prompts not excluded against `budget`, counted in one pass (None without a budget)."""
    return budget.fit([prompt for prompt in prompts if not prompt.excluded]) if budget is not None else None


def _split(prompts: list[Prompt], fit: PromptFit | None, heldout: bool) -> PromptUse:
    """The use of one split's prompts, from the fit of all of them."""
    excluded = sum(prompt.excluded for prompt in prompts if prompt.heldout == heldout)
    if fit is None:
        return PromptUse(heldout, [p for p in prompts if p.heldout == heldout and not p.excluded], excluded, None)
    part = PromptFit(fit.budget, [p for p in fit.fitting if p.heldout == heldout],
                     [(p, tokens) for p, tokens in fit.too_long if p.heldout == heldout])
    return PromptUse(heldout, part.fitting, excluded, part)


@dataclass(frozen=True)
class LoopPrompts:
    """The training and held-out prompts a loop uses with a policy and a response length."""

    budget: PromptBudget | None
    training: PromptUse
    heldout: PromptUse

    def lines(self) -> list[str]:
        """What a loop prints when it starts (and the Train tab shows): the limits, then each split's use."""
        limits = self.budget.describe() if self.budget else "the policy's context is unknown here"
        return [limits, self.training.line()] + ([self.heldout.line()] if self.heldout.total else [])

    def left_out(self) -> str:
        """ "; 9 training prompts and 1 held-out prompt left out (python app.py prompts lists them)", or ""."""
        counts = [(self.training.total - len(self.training.used), "training"),
                  (self.heldout.total - len(self.heldout.used), "held-out")]
        named = [f"{n} {split} prompt{'s' if n != 1 else ''}" for n, split in counts if n]
        return f"; {' and '.join(named)} left out (python app.py prompts lists them)" if named else ""


def loop_prompts(store: Store, policy_path: str, response_length: int) -> LoopPrompts:
    """Which prompts a loop with `response_length` uses on the policy at `policy_path` (tokenized once, here)."""
    budget = prompt_budget(policy_path, response_length)
    prompts = list_prompts(store)
    fit = _fit(prompts, budget)
    return LoopPrompts(budget, _split(prompts, fit, heldout=False), _split(prompts, fit, heldout=True))


def check_against_store(config: LoopConfig, store: Store) -> LoopPrompts:
    """Settings that depend on the store: a policy, responses within its context, and batches within the training
    prompts the loop can use: those not excluded that fit the context with `response_length` tokens to spare (the
    others are left out, counted; nothing is cut), and the version it starts from (`start_version`). Returns the
    prompts the loop uses."""
    policy = start_policy(store, config)
    if policy is None:
        what = "no policy" if count_prompts(store) else "no training prompts and no policy"
        raise InvalidInput(f"the store has {what}; {start_a_project(store)}")
    context = model_context(policy.path)
    if context is not None and config.response_length >= context:
        raise InvalidInput(f"response_length is {config.response_length} but the policy's context holds {context} "
                           f"tokens, prompt included; lower response_length")
    check_sft_first(config.sft.first, store, config.lora)
    prompts = loop_prompts(store, policy.path, config.response_length)
    training = prompts.training
    if training.total == 0:
        raise InvalidInput(f"the store has no training prompts; import some with python app.py import-prompts --db "
                           f"{store.path} FILE")
    if not training.used:
        raise InvalidInput(f"none of the store's training prompts can be used ({training.line()}); include some again "
                           f"(python app.py prompts --db {store.path}) or lower response_length")
    for name in ("prompts_per_round", "policy_batch_size") if collects_labels(config) else ("policy_batch_size",):
        if config.setting(name) > len(training.used):
            raise InvalidInput(f"{name} is {config.setting(name)} but only {len(training.used)} training prompts "
                               f"can be used{prompts.left_out()}; lower it or import more prompts")
    return prompts


def import_budget(store: Store) -> PromptBudget | None:
    """What imported prompts are counted against: the newest policy's context less the response length the
    project's loop starts from (its preset, `trainers.loop.presets`); None before a policy is registered, or when
    its context is unknown here."""
    policy = latest_policy(store)
    return prompt_budget(policy.path, project_preset(store).config.response_length) if policy else None


@dataclass(frozen=True)
class LabelUse:
    """The current labels that can train a reward model, and those left out: of excluded prompts, or whose prompt and
    longer response are too long for the reward base's context (`context`; None: unknown here)."""

    total: int
    too_long: list[int]  # label ids
    excluded: int
    context: int | None

    @property
    def left_out(self) -> int:
        return len(self.too_long) + self.excluded

    def line(self, whose: str = "") -> str:
        """ "labels: 2200 of 2312 train the reward model; 112 too long for its context of 512 (labels 3, ...)"."""
        parts = [f"{self.total - self.left_out} of {self.total} train the reward model"]
        if self.too_long:
            parts.append(f"{len(self.too_long)} too long for its context of {self.context} (labels "
                         f"{listed(self.too_long)})")
        if self.excluded:
            parts.append(f"{self.excluded} of excluded prompts")
        return f"labels{whose}: {'; '.join(parts)}"


def label_use(store: Store, annotator: str | None = None) -> LabelUse | None:
    """The current labels (by `annotator`, or all) against the reward base (`init --reward-base`, else the SFT
    policy); None when there are none, or no policy."""
    policy = latest_policy(store)
    labels = [lp for lp in training_labels(store) if lp.outcome.target() is not None and
              annotator in (None, lp.annotator)] if policy else []
    if not labels:
        return None
    kept = [lp for lp in labels if not lp.prompt_excluded]
    base = prompt_budget(reward_base_path(store, policy), 0)  # its context (None: unknown here) and its format
    too_long = []
    if base is not None and kept:
        tokens = pair_token_counts(base.chat, [lp.prompt_content for lp in kept], [lp.first for lp in kept],
                                   [lp.second for lp in kept])
        too_long = [lp.label_id for lp, n in zip(kept, tokens, strict=True) if n > base.context]
    return LabelUse(len(labels), too_long, len(labels) - len(kept), base.context if base else None)


def import_note(store: Store, prompt_ids: tuple[int, ...], budget: PromptBudget | None) -> str:
    """The line an import prints about its new prompts (`prompt_ids`) too long for `budget` (the policy's, with the
    loop's default response length): counted and named, kept, left out of sampling; "" when all fit."""
    if budget is None or not prompt_ids:
        return ""
    wanted = set(prompt_ids)
    fit = budget.fit([prompt for prompt in list_prompts(store) if prompt.id in wanted])
    if not fit.too_long:
        return ""
    return (f"{len(fit.too_long)} of the {len(prompt_ids)} new prompts are longer than the policy reads "
            f"({budget.limit} tokens: its context of {budget.context} less {budget.response_length} response tokens): "
            f"prompts {listed([prompt.id for prompt, _ in fit.too_long])}. They are kept (exports keep them) and left "
            f"out of sampling, training and evaluation; python app.py prompts --db {store.path} lists them")


def samples_too_long_line(store: Store, samples: Sequence[Generation], prompts: Mapping[int, PromptInput]) -> str:
    """The line a round logs about its samples whose prompt and response are too long for the newest reward model's
    context as its tokenizer reads them: left out of the round's pairs, counted and named; "" when all fit, without a
    reward model, or when its context is unknown here."""
    members = latest_reward_models(store)
    reader = prompt_budget(members[0].path, 0) if members and samples else None  # its format and context
    if reader is None:
        return ""
    rows = reader.chat.sequences_ids([prompts[s.prompt_id] for s in samples], [s.text for s in samples])
    too_long = [s.id for s, ids in zip(samples, rows, strict=True) if len(ids) > reader.context]
    if not too_long:
        return ""
    return (f"{len(too_long)} of the round's {len(samples)} samples are too long for the reward model's context of "
            f"{reader.context} as it reads them (samples {listed(too_long)}): left out of the round's pairs")
