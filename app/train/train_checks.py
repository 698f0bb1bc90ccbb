"""The Train tab's form checked field by field, each named by its label ("Rounds is required", "Reward LR must be above
0"), before any job row is written; the whole numbers made ints. The settings' own checks (`LoopConfig`) still run
after, on what the form and the advanced JSON give together; a message of theirs that names a form field by its
setting name says its label instead. `config_from_form` turns the checked form, its preset and the advanced JSON into
the run's `LoopConfig` (the Train tab's buttons and its SFT action start from it).

The form's components carry no minimum or maximum of their own: Gradio would refuse a value before this check with a
message that names no field ("Value -1 is less than minimum value 1")."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from app.train import reward_form
from app.train.train_form import FORM, iterations_label, lr_label
from storage.errors import InvalidInput
from trainers.loop.config import LoopConfig, settings_from_json


@dataclass(frozen=True)
class Rule:
    """What a form field takes: a number from `low` (excluded when `above`) to `high`, whole or not; blank allowed
    when `optional`. A field without a rule (a choice, a checkbox) must only be set."""

    low: float | None = None
    above: bool = False
    high: float | None = None
    whole: bool = False
    optional: bool = False


LABELS = {  # the form's fields by their labels on screen (the two of the policy optimiser follow the algorithm)
    "rounds": "Rounds", "samples_per_prompt": "K: samples per prompt", "rank_k": "Answers per judgement",
    "labels_per_round": "N: labels in round 1 (then × label_decay)",
    "label_budget": "B: labels of all rounds (blank: from N)", "selector": "Pair selector",
    "ensemble": "Reward ensemble size", "kl_coef": "β: KL coefficient", "reward_lr": "Reward LR",
    "reward_epochs": "Reward epochs", "annotator": "Labels from", "algorithm": "Policy optimiser",
    "group_size": "G: GRPO responses per prompt", "dpo_beta": "DPO β (its KL to the SFT policy)",
    "label_decay": "Label decay (each later round × this)", "check_share": "Check-pair share of labels",
    "reward_patience": "Reward early-stop patience (0: off)", "reward_warm_start": "Warm-start the reward model",
    "on_warning": "On a failure warning", "sft_first": "SFT first: fine-tune on the demonstrations before round 1",
}
RULES = {
    "rounds": Rule(1, whole=True), "samples_per_prompt": Rule(2, whole=True), "rank_k": Rule(2, high=6, whole=True),
    "labels_per_round": Rule(1, whole=True),
    "label_budget": Rule(0, whole=True, optional=True), "policy_iterations": Rule(1, whole=True),
    "ensemble": Rule(1, whole=True), "kl_coef": Rule(0), "reward_lr": Rule(0, above=True),
    "policy_lr": Rule(0, above=True), "reward_epochs": Rule(1, whole=True), "group_size": Rule(2, whole=True),
    "dpo_beta": Rule(0, above=True), "label_decay": Rule(0, above=True, high=1), "check_share": Rule(0, high=0.5),
    "reward_patience": Rule(0, whole=True),
}


def field_label(name: str, algorithm: str) -> str:
    """A form field's label as shown with this policy optimiser chosen."""
    if name == "policy_iterations":
        return iterations_label(algorithm)
    if name == "policy_lr":
        return lr_label(algorithm)
    return LABELS[name]


def number(value: float, rule: Rule) -> str:
    return f"{value:g}" if not rule.whole else str(int(value))


def check_field(label: str, value, rule: Rule | None):
    """One field's value (a whole number as int), or InvalidInput naming the field by `label`."""
    if value is None or value == "":
        if rule is not None and rule.optional:
            return None
        raise InvalidInput(f"{label} is required")
    if rule is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"{label} must be a number, got {str(value)[:40]!r}")
    if rule.whole and value != int(value):
        raise InvalidInput(f"{label} must be a whole number, got {value:g}")
    if rule.low is not None and (value <= rule.low if rule.above else value < rule.low):
        raise InvalidInput(f"{label} must be {'above' if rule.above else 'at least'} {number(rule.low, rule)}, got "
                           f"{value:g}")
    if rule.high is not None and value > rule.high:
        raise InvalidInput(f"{label} must be at most {rule.high:g}, got {value:g}")
    return int(value) if rule.whole else value


def checked_form(values: dict) -> dict:
    """The form's settings (by field name) checked in the form's order, by label; whole numbers as ints, a blank
    optional field as None."""
    algorithm = values.get("algorithm") or "ppo"
    return {name: check_field(field_label(name, algorithm), value, RULES.get(name)) for name, value in values.items()}


def in_form_words(message: str, values: dict) -> str:
    """A settings check's message with each form field's setting name replaced by its label (quoted)."""
    algorithm = values.get("algorithm") or "ppo"
    names = re.compile(r"\b(" + "|".join(map(re.escape, values)) + r")\b")
    return names.sub(lambda found: f'"{field_label(found.group(1), algorithm)}"', message)


def config_from_form(presets: dict[str, LoopConfig], preset: str, advanced: str, *values) -> LoopConfig:
    """The preset (of the project's `presets`), then the form's fields (each checked, by its label), then the advanced
    JSON on top; a reward of the functions alone starts from the preset's RLVR settings and reads no label field. A
    reward learning rate changed in the form counts as given when the JSON switches `reward_lora`."""
    on_top = settings_from_json(advanced)
    form, base = reward_form.form_for_reward(dict(zip(FORM, values, strict=True)), presets[preset], on_top)
    settings = {**base.to_dict(), **checked_form(form)}
    settings["label_budget"] = settings["label_budget"] or None  # blank or 0: from N
    try:
        config = LoopConfig.from_dict(settings)
    except InvalidInput as exc:
        raise InvalidInput(in_form_words(str(exc), form)) from None
    if config.reward_model.learning_rate != presets[preset].reward_model.learning_rate:
        on_top = {"reward_lr": config.reward_model.learning_rate, **on_top}
    return config.updated(on_top)
