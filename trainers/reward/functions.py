"""Reward functions: verifiable checks beside (or instead of) the reward model, called as TRL calls `reward_funcs`.

A run's `reward_functions` is a list of entries `{"name": ..., "weight": 1.0, <options>}`; `name` is a built-in
(`trainers.reward.builtin_rewards`) or `module:function` (named on the command line only, never from the browser).
Every function is called with TRL's GRPOTrainer keywords, so a function written for TRL works unchanged:
`prompts`, `completions`, `completion_ids` (the response's tokens) and every reference field of the prompts by name
(`answer`, ...: every field any prompt's reference holds, one value per row, None where a prompt lacks it). When any
prompt of the batch is a conversation, prompts are lists of turns and each completion a list holding one assistant
turn, as TRL passes them.

A function returns one number (or None: no opinion) per completion. The reward of a response is
Σ wᵢ·fᵢ over the functions with an opinion (TRL's nansum; none: 0), plus `rm_weight` times the reward model's
normalised score when the run's reward is `rm+functions`. A function that raises, returns the wrong number of
values, a NaN or a non-number, a value (or weighted value) outside float32's range (the precision rewards are used
in: 1e39 is inf there), or runs past FUNCTION_TIMEOUT_S (it runs in a thread apart from training) stops the run with
a RewardFunctionError naming it; the trainer adds the iteration.

    functions = RewardFunctions.build([{"name": "math_answer", "weight": 1.0}], references_by_prompt)
    scores = functions(prompts, responses)     # (B,) tensor; functions.metrics(): mean and pass rate per function
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import numbers
import threading
from typing import Callable

import torch

from storage.errors import InvalidInput

from ..models.finite import FLOAT32_MAX, fits_float32
from .builtin_rewards import BUILTINS
from .function_specs import RewardFunctionSpec, is_custom, parse_reward_functions

FUNCTION_TIMEOUT_S = 60.0  # one call of one function on one batch


class RewardFunctionError(InvalidInput):
    """A reward function failed during a run (raised, wrong length, NaN, past its time limit)."""


def load_function(spec: RewardFunctionSpec) -> Callable:
    """The callable of an entry: a built-in with its options bound, or the imported `module:function`."""
    if not is_custom(spec.name):
        return functools.partial(BUILTINS[spec.name][0], **spec.options)
    module_name, _, function_name = spec.name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"cannot import module {module_name!r} for the reward function {spec.name}: {exc}; check "
                           "the name and PYTHONPATH") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise InvalidInput(f"module {module_name!r} has no function {function_name!r}; name a reward function")
    return functools.partial(function, **spec.options) if spec.options else function


def trl_inputs(prompts: list, responses: list[str]) -> tuple[list, list]:
    """Prompts and completions as TRL passes them: texts, or (when any prompt is a conversation) lists of turns and
    one assistant turn per completion."""
    if not any(isinstance(prompt, list) for prompt in prompts):
        return list(prompts), list(responses)
    turns = [prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}] for prompt in prompts]
    return turns, [[{"role": "assistant", "content": response}] for response in responses]


def prompt_key(prompt) -> str:
    """The key of a prompt (text or turns) in a references map."""
    return json.dumps(prompt, ensure_ascii=False, sort_keys=True)


class RewardFunctions:
    """The weighted sum of a run's reward functions, called as `score(prompts, responses) -> (B,)`; the latest
    call's values per function are kept for `metrics`."""

    def __init__(self, specs: list[RewardFunctionSpec], functions: list[Callable], references: dict[str, dict],
                 encode: Callable[[str], list[int]] | None = None, timeout_s: float = FUNCTION_TIMEOUT_S):
        self.specs, self.functions, self.references = specs, functions, references
        # every field any prompt's reference holds, passed on every batch (None where a prompt lacks it), as TRL
        # passes every column of its data set
        self.fields = list(dict.fromkeys(name for reference in references.values() for name in reference))
        self.encode, self.timeout_s = encode, timeout_s
        self.latest: dict[str, list[float | None]] = {}

    @classmethod
    def build(cls, entries, references: dict[str, dict], encode: Callable[[str], list[int]] | None = None,
              timeout_s: float = FUNCTION_TIMEOUT_S) -> RewardFunctions:
        """From `reward_functions` entries (custom ones allowed: the caller checked where they came from) and a map
        `prompt_key(prompt) -> reference`; `encode` gives a response's token ids (`completion_ids`)."""
        specs = parse_reward_functions(entries, allow_custom=True)
        return cls(specs, [load_function(spec) for spec in specs], references, encode, timeout_s)

    def keywords(self, prompts: list, responses: list[str]) -> dict:
        """TRL's keywords for one batch: prompts, completions, completion_ids and each reference field by name."""
        trl_prompts, completions = trl_inputs(prompts, responses)
        references = [self.references.get(prompt_key(prompt)) or {} for prompt in prompts]
        ids = [self.encode(response) for response in responses] if self.encode is not None else None
        return {"prompts": trl_prompts, "completions": completions, "completion_ids": ids,
                **{name: [reference.get(name) for reference in references] for name in self.fields}}

    def __call__(self, prompts: list, responses: list[str]) -> torch.Tensor:
        keywords = self.keywords(prompts, responses)
        total = torch.zeros(len(responses))
        self.latest = {}
        for spec, function in zip(self.specs, self.functions, strict=True):
            values = self._call(spec, function, keywords, len(responses))
            self.latest[spec.label] = values
            weighted = [0.0 if v is None else spec.weight * v for v in values]
            if not all(fits_float32(v) for v in weighted):
                raise RewardFunctionError(f"reward function {spec.label}'s values times its weight {spec.weight:g} "
                                          f"reach {max(weighted, key=abs):g}, outside float32's range (±"
                                          f"{FLOAT32_MAX:.1e}); lower the weight or scale the values down")
            total += torch.tensor(weighted)
        if not torch.isfinite(total).all():
            raise RewardFunctionError(f"the weighted sum of the reward functions {', '.join(self.latest)} leaves "
                                      f"float32's range (±{FLOAT32_MAX:.1e}); scale their values down")
        return total

    def _call(self, spec: RewardFunctionSpec, function: Callable, keywords: dict, rows: int) -> list[float | None]:
        """One function's values on a batch, checked; RewardFunctionError naming it on any failure."""
        outcome: dict = {}

        def call() -> None:
            try:
                outcome["values"] = function(**keywords)
            except BaseException as exc:  # the user's code: any error stops the run, named
                outcome["error"] = exc

        # a daemon thread: one that runs past its time is left behind, and never holds the process at its exit
        thread = threading.Thread(target=call, name=f"reward-function-{spec.label}", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            raise RewardFunctionError(f"reward function {spec.label} ran past its time limit of {self.timeout_s:g} s "
                                      "on one batch; make it faster")
        if "error" in outcome:
            exc = outcome["error"]
            raise RewardFunctionError(f"reward function {spec.label} raised {type(exc).__name__}: "
                                      f"{str(exc).splitlines()[0] if str(exc) else '(no message)'}") from exc
        return check_values(spec.label, outcome["values"], rows)

    def metrics(self) -> dict[str, float]:
        """Per function of the latest call: `<label>/mean` of its values and `<label>/pass_rate` (the share above 0),
        over the rows it had an opinion on (0.0 when none)."""
        out = {}
        for label, values in self.latest.items():
            scored = [v for v in values if v is not None]
            out[f"{label}/mean"] = sum(scored) / len(scored) if scored else 0.0
            out[f"{label}/pass_rate"] = sum(v > 0 for v in scored) / len(scored) if scored else 0.0
        return out


def check_values(label: str, values, rows: int) -> list[float | None]:
    """A function's return value as floats (None kept), or RewardFunctionError naming the function."""
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise RewardFunctionError(f"reward function {label} returned {type(values).__name__}, not a list of one "
                                  "number per completion")
    if len(values) != rows:
        raise RewardFunctionError(f"reward function {label} returned {len(values)} values for {rows} completions; "
                                  "return one per completion (None: no opinion)")
    checked = []
    for value in values:
        if value is None:
            checked.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise RewardFunctionError(f"reward function {label} returned {value!r}, not a number (or None)")
        if not math.isfinite(value):
            raise RewardFunctionError(f"reward function {label} returned {value}; return finite numbers "
                                      "(None: no opinion)")
        if not fits_float32(value):
            raise RewardFunctionError(f"reward function {label} returned {value:g}, outside float32's range (±"
                                      f"{FLOAT32_MAX:.1e}), the precision rewards are used in; return smaller "
                                      "numbers (None: no opinion)")
        checked.append(float(value))
    return checked


class CombinedReward:
    """`rm_weight` · the reward model's normalised score + the reward functions' weighted sum; its `metrics` are
    the functions'."""

    def __init__(self, reward_model: Callable | None, rm_weight: float, functions: RewardFunctions):
        self.reward_model, self.rm_weight, self.functions = reward_model, rm_weight, functions

    def __call__(self, prompts: list, responses: list[str]) -> torch.Tensor:
        total = self.functions(prompts, responses)
        if self.reward_model is not None:
            total = total + self.rm_weight * torch.as_tensor(self.reward_model(prompts, responses),
                                                             dtype=torch.float32).cpu()
        return total

    def metrics(self) -> dict[str, float]:
        return self.functions.metrics()
