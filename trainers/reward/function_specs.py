"""The `reward_functions` setting checked without running anything (torch-free, so the Train tab and `/start_loop`
check it too): a list of `{"name", "weight", "label", <options>}` entries, each a built-in
(`trainers.reward.builtin_rewards`) with its options, or `module:function`, which only the command line may name.

    parse_reward_functions('[{"name": "math_answer", "weight": 1.0}]', allow_custom=False)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from storage.errors import InvalidInput

from .builtin_rewards import BUILTINS

KNOWN_KEYS = ("name", "weight", "label")  # an entry's keys besides its options


def is_custom(name: str) -> bool:
    """Whether an entry names user code (`module:function`) rather than a built-in."""
    return ":" in name


@dataclass(frozen=True)
class RewardFunctionSpec:
    """One checked entry of `reward_functions`."""

    name: str
    weight: float = 1.0
    label: str = ""  # its metrics' name: the built-in's name or the custom function's, unless given
    options: dict = field(default_factory=dict)


def parse_reward_functions(value, allow_custom: bool = True) -> list[RewardFunctionSpec]:
    """The entries of `value` (a list, or its JSON text; "" or None: none), checked: a known built-in with its options
    or, when `allow_custom`, `module:function`; weights numbers; labels unique. InvalidInput (one line) otherwise."""
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InvalidInput(f"reward functions are not valid JSON ({exc}); write a list such as "
                               '[{"name": "math_answer", "weight": 1.0}]') from None
    if not isinstance(value, list):
        raise InvalidInput('reward functions must be a list such as [{"name": "math_answer", "weight": 1.0}]')
    specs = [_spec(entry, allow_custom) for entry in value]
    labels = [spec.label for spec in specs]
    repeated = next((label for label in labels if labels.count(label) > 1), None)
    if repeated is not None:
        raise InvalidInput(f"two reward functions are named {repeated!r}; give one a \"label\" of its own")
    return specs


def _spec(entry, allow_custom: bool) -> RewardFunctionSpec:
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise InvalidInput(f"each reward function is an object with a \"name\", got {str(entry)[:60]}")
    name, weight = entry["name"], entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise InvalidInput(f"reward function {name}'s weight must be a number, got {weight!r}")
    options = {key: value for key, value in entry.items() if key not in KNOWN_KEYS}
    if is_custom(name):
        if not allow_custom:
            raise InvalidInput(f"the reward function {name!r} names code to run, which only the command line may "
                               f"do (python app.py ppo/loop --reward-functions); here use the built-ins: "
                               f"{', '.join(BUILTINS)}")
        label = entry.get("label") or name.rpartition(":")[2]
    elif name in BUILTINS:
        _, accepted, check = BUILTINS[name]
        unknown = [key for key in options if key not in accepted]
        if unknown:
            takes = ", ".join(accepted) or "no options"
            raise InvalidInput(f"reward function {name} has no option {unknown[0]!r}; it takes {takes}")
        check(options)
        label = entry.get("label") or name
    else:
        raise InvalidInput(f"unknown reward function {name!r}; use one of {', '.join(BUILTINS)}, or module:function "
                           "on the command line")
    if not isinstance(label, str):
        raise InvalidInput(f"reward function {name}'s label must be text, got {label!r}")
    return RewardFunctionSpec(name, float(weight), label, options)
