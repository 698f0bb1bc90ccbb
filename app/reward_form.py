"""The Train tab's reward functions: the built-ins with a weight each (0: off), the length target and the regex
pattern, and what the loop maximises (the reward model, the functions alone, or both). "Use these rewards" writes
`reward`, `reward_functions` (and `rm_weight`) into the advanced settings' JSON, where they can be read and edited; a
`module:function` is never offered here (the command line names code to run: docs/rewards.md)."""

from __future__ import annotations

import json

import gradio as gr

from trainers.loop.config import settings_from_json
from trainers.loop.loop_rewards import LOOP_REWARDS
from trainers.reward.builtin_rewards import BUILTINS

from .context import user_errors

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


def build(advanced: gr.Code) -> None:
    """Lay out the reward functions' fields and wire their button to the advanced settings' JSON."""
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
    use.click(reward_settings_json, [advanced, reward, rm_weight, length_target, pattern, *weights], advanced,
              api_visibility="private")
