"""The Train tab's reward functions: the built-ins with a weight each (0: off), the length target and the regex
pattern, and what the loop maximises (the reward model, the functions alone, or both). "Use these rewards" writes
`reward`, `reward_functions` (and `rm_weight`) into the advanced settings' JSON, where they can be read and edited; a
`module:function` is never offered here (the command line names code to run: docs/rewards.md).

The functions alone (RLVR) need no labels: the button hides the label and reward-model fields (`LABEL_FIELDS`) and
the label schedule, and fills the policy fields with the RLVR settings (`trainers.loop.presets.RLVR_SETTINGS`); a
loop started with that reward reads none of the hidden fields (`form_for_reward`)."""

from __future__ import annotations

import json

import gradio as gr

from app.context import user_errors
from trainers.loop.config import LoopConfig, settings_from_json
from trainers.loop.loop_rewards import LOOP_REWARDS
from trainers.loop.presets import RLVR_SETTINGS, rlvr_config
from trainers.policy.config import RewardSource
from trainers.reward.builtin_rewards import BUILTINS

BUILTIN_NAMES = tuple(BUILTINS)
HINTS = {"math_answer": "final number vs the prompt's `answer`", "exact_match": "equals the prompt's `answer`",
         "regex": "the pattern below is found", "format": "`<think>…</think><answer>…</answer>`",
         "length": "within the target below", "json_valid": "parses as JSON"}


def reward_settings_json(advanced_json: str, reward: str, rm_weight: float, length_target: float, pattern: str,
                         *weights: float) -> str:
    """The advanced JSON with `reward`, `reward_functions` (the built-ins of non-zero weight, with their options) and
    `rm_weight` set from the form; the rm reward drops the functions."""
    with user_errors():
        settings = settings_from_json(advanced_json)
    functions = []
    for name, weight in zip(BUILTIN_NAMES, weights, strict=True):
        if weight:
            entry = {"name": name, "weight": float(weight)}
            entry.update({"target": int(length_target), "unit": "tokens"} if name == "length" else {})
            entry.update({"pattern": pattern} if name == "regex" else {})
            functions.append(entry)
    settings["reward"] = reward
    if reward == "rm":
        settings.pop("reward_functions", None)
        settings.pop("rm_weight", None)
    else:
        settings["reward_functions"] = functions
        settings.update({"rm_weight": float(rm_weight)} if reward == "rm+functions" else {})
    return json.dumps(settings, indent=1, ensure_ascii=False)


# the Train tab's fields a loop on the functions alone never reads: its labels, pairs and reward model
LABEL_FIELDS = ("samples_per_prompt", "labels_per_round", "label_budget", "label_decay", "annotator", "selector",
                "ensemble", "reward_lr", "reward_epochs", "reward_patience", "reward_warm_start", "check_share",
                "dpo_beta")
RLVR_FIELDS = ("algorithm", "rounds", "policy_iterations", "policy_lr", "kl_coef", "group_size")  # filled for RLVR


def functions_alone(settings: dict, preset: LoopConfig) -> bool:
    """Do these settings (the advanced JSON) on top of `preset` make the reward the functions alone?"""
    return settings.get("reward", preset.reward) == RewardSource.FUNCTIONS


def form_for_reward(form: dict, preset: LoopConfig, on_top: dict) -> tuple[dict, LoopConfig]:
    """The form's fields a loop reads and the preset they go on top of: with the reward of the functions alone (in
    `on_top`, the advanced JSON) the label fields are left out (unchecked, whatever they hold) and the preset is its
    RLVR settings; otherwise both as they are."""
    if not functions_alone(on_top, preset):
        return form, preset
    return {name: value for name, value in form.items() if name not in LABEL_FIELDS}, rlvr_config(preset)


def use_rewards(advanced_json: str, reward: str, rm_weight: float, length_target: float, pattern: str,
                *weights: float) -> list:
    """"Use these rewards": the advanced JSON; the label schedule and each label field shown unless the reward is the
    functions alone; the RLVR fields' values for that reward (left as they are otherwise)."""
    advanced = reward_settings_json(advanced_json, reward, rm_weight, length_target, pattern, *weights)
    rlvr = reward == RewardSource.FUNCTIONS
    shown = [gr.update(visible=not rlvr)] * (1 + len(LABEL_FIELDS))
    values = [gr.update(value=RLVR_SETTINGS[name]) if rlvr else gr.update() for name in RLVR_FIELDS]
    return [advanced, *shown, *values]


def build(advanced: gr.Code, schedule: gr.Markdown, fields: dict) -> None:
    """Lay out the reward functions' fields and wire their button to the advanced settings' JSON, the label
    schedule and the Train tab's `fields` (by setting name)."""
    gr.Markdown("**Reward functions** (verifiable rewards: [docs/rewards.md](docs/rewards.md)); a weight of 0 leaves "
                "a function out.")
    with gr.Row():
        reward = gr.Radio([r.value for r in LOOP_REWARDS], value="rm", label="The policy maximises",
                          info="`rm`: the reward model trained on the labels (the default); `functions`: the checks "
                               "below alone (verifiable rewards, no labels); `rm+functions`: both, added.")
        rm_weight = gr.Number(1.0, label="Reward model's weight (rm+functions)",
                              info="With rm+functions, the reward model's score is multiplied by this before the "
                                   "functions' scores are added; 1 weighs it as one function.")
        length_target = gr.Number(200, label="length: target tokens", precision=0, minimum=1,
                                  info="The answer length the `length` function rewards most.")
        pattern = gr.Textbox(label="regex: pattern", max_length=200,
                             info="The regular expression the `regex` function looks for in an answer.")
    with gr.Row():
        weights = [gr.Number(0.0, label=f"{name}: {HINTS[name]}", info="Its weight in the reward; 0 leaves it out.")
                   for name in BUILTIN_NAMES]
    use = gr.Button("Use these rewards", size="sm")
    outputs = [advanced, schedule, *[fields[name] for name in LABEL_FIELDS + RLVR_FIELDS]]
    use.click(use_rewards, [advanced, reward, rm_weight, length_target, pattern, *weights], outputs,
              api_visibility="private")
