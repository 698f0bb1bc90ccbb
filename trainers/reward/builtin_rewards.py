"""The built-in reward functions: checks of a response's text, never evaluated as code.

Each is called as TRL's GRPOTrainer calls its `reward_funcs` (`trainers.reward.functions` does the calling):
`completions` (texts, or lists holding one assistant turn), the reference fields by name (`answer`, ...), options
bound from the function's entry; each returns one float per completion, or None where it has no opinion (a prompt
without the reference it checks against).

- `math_answer`: the response's final answer (the last `\\boxed{...}`, else the number after the last `####`, else
  the last number of the text) against the reference `answer` (read the same way, so `#### 42` works): 1.0 when
  they agree within `tolerance`, else 0.0 (no number: 0.0).
- `exact_match`: 1.0 when the response equals the reference `field` (default `answer`), whitespace trimmed and
  collapsed, case ignored unless `case_sensitive`.
- `regex`: 1.0 when `pattern` (at most MAX_PATTERN_CHARS) is found in the response, within REGEX_TIMEOUT_S.
- `format`: 1.0 when each of `tags` (default think, answer) appears as `<tag>...</tag>`, in that order.
- `length`: 1.0 up to `target` tokens (`unit: chars` counts characters), falling linearly to 0.0 at twice it.
- `json_valid`: 1.0 when the response (or its one ```json fenced block) parses as JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Callable

import regex as bounded_re  # the `regex` package: a search with a timeout

from storage.errors import InvalidInput

MAX_PATTERN_CHARS = 200
REGEX_TIMEOUT_S = 0.5
MAX_CHECKED_CHARS = 100_000  # of a response: a longer one is checked on its first MAX_CHECKED_CHARS

_NUMBER = re.compile(r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-−]?\.\d+")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_HASHES = "####"
_FENCED_JSON = re.compile(r"```(?:json)?\s*\n(.*?)\n?```", re.DOTALL)


def completion_text(completion) -> str:
    """A completion's text: itself, or the content of the assistant turn(s) TRL passes for a conversation."""
    if isinstance(completion, str):
        return completion[:MAX_CHECKED_CHARS]
    return "".join(turn.get("content") or "" for turn in completion)[:MAX_CHECKED_CHARS]


def parse_number(text: str) -> float | None:
    """A number as written in text ("1,234", "-5", "3.50", "−2"), or None."""
    try:
        return float(text.replace(",", "").replace("−", "-"))
    except ValueError:
        return None


def final_answer(text: str) -> float | None:
    """The final answer of a text: the last \\boxed{}'s number, else the first number after the last `####`, else
    the last number of the text; None when it holds no number."""
    boxed = _BOXED.findall(text)
    if boxed:
        numbers = _NUMBER.findall(boxed[-1])
        return parse_number(numbers[-1]) if numbers else None
    if _HASHES in text:
        numbers = _NUMBER.findall(text.rsplit(_HASHES, 1)[1])
        if numbers:
            return parse_number(numbers[0])
    numbers = _NUMBER.findall(text)
    return parse_number(numbers[-1]) if numbers else None


def reference_answer(value) -> float | None:
    """The reference `answer` as a number: a number as it is, a text read as `final_answer` reads a response."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return final_answer(str(value))


def math_answer(completions, answer=None, tolerance: float = 1e-6, **kwargs) -> list[float | None]:
    answers = answer if answer is not None else [None] * len(completions)
    scores = []
    for completion, expected in zip(completions, answers, strict=True):
        target = reference_answer(expected)
        if target is None:
            scores.append(None)
            continue
        got = final_answer(completion_text(completion))
        scores.append(float(got is not None and math.isclose(got, target, rel_tol=0.0, abs_tol=tolerance)))
    return scores


def _normalised(text: str, case_sensitive: bool) -> str:
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


def exact_match(completions, field: str = "answer", case_sensitive: bool = False, **kwargs) -> list[float | None]:
    references = kwargs.get(field) or [None] * len(completions)
    return [None if reference is None else
            float(_normalised(completion_text(c), case_sensitive) == _normalised(str(reference), case_sensitive))
            for c, reference in zip(completions, references, strict=True)]


def regex(completions, pattern: str = "", **kwargs) -> list[float]:
    compiled = bounded_re.compile(pattern)
    scores = []
    for completion in completions:
        try:
            scores.append(float(compiled.search(completion_text(completion), timeout=REGEX_TIMEOUT_S) is not None))
        except TimeoutError:
            raise TimeoutError(f"the pattern {pattern!r} ran past {REGEX_TIMEOUT_S} s on one response; simplify it "
                               "(no nested repeats)") from None
    return scores


def format(completions, tags: list[str] = ("think", "answer"), **kwargs) -> list[float]:  # noqa: A001 (TRL's name)
    pattern = re.compile(".*?".join(rf"<{re.escape(tag)}>.*?</{re.escape(tag)}>" for tag in tags), re.DOTALL)
    return [float(pattern.search(completion_text(c)) is not None) for c in completions]


def length(completions, target: int = 200, unit: str = "tokens", completion_ids=None, **kwargs) -> list[float]:
    if unit == "tokens" and completion_ids is not None:
        sizes = [len(ids) for ids in completion_ids]
    else:
        sizes = [len(completion_text(c)) for c in completions]
    return [1.0 if size <= target else max(0.0, 1.0 - (size - target) / target) for size in sizes]


def json_valid(completions, **kwargs) -> list[float]:
    scores = []
    for completion in completions:
        text = completion_text(completion).strip()
        fenced = _FENCED_JSON.findall(text)
        try:
            json.loads(fenced[0] if len(fenced) == 1 else text)
            scores.append(1.0)
        except ValueError:
            scores.append(0.0)
    return scores


def _check_math_answer(options: dict) -> None:
    tolerance = options.get("tolerance", 1e-6)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise InvalidInput(f"math_answer's tolerance must be a number at least 0, got {tolerance!r}")


def _check_exact_match(options: dict) -> None:
    if not isinstance(options.get("field", "answer"), str):
        raise InvalidInput("exact_match's field must name a reference field, such as \"answer\"")


def _check_regex(options: dict) -> None:
    pattern = options.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise InvalidInput("regex needs a pattern, e.g. {\"name\": \"regex\", \"pattern\": \"^Answer:\"}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidInput(f"regex's pattern has {len(pattern)} characters, over {MAX_PATTERN_CHARS}; shorten it")
    try:
        bounded_re.compile(pattern)
    except bounded_re.error as exc:
        raise InvalidInput(f"regex's pattern {pattern!r} is not a regular expression ({exc}); fix it") from None


def _check_format(options: dict) -> None:
    tags = options.get("tags", ["think", "answer"])
    if not isinstance(tags, list) or not tags or not all(isinstance(t, str) and re.fullmatch(r"[\w-]+", t)
                                                         for t in tags):
        raise InvalidInput(f"format's tags must be a list of tag names such as [\"think\", \"answer\"], got {tags!r}")


def _check_length(options: dict) -> None:
    target, unit = options.get("target", 200), options.get("unit", "tokens")
    if isinstance(target, bool) or not isinstance(target, int) or target < 1:
        raise InvalidInput(f"length's target must be a whole number at least 1, got {target!r}")
    if unit not in ("tokens", "chars"):
        raise InvalidInput(f"length's unit must be tokens or chars, got {unit!r}")


def _check_nothing(options: dict) -> None:
    return None


# name -> (function, the options it takes, their check)
BUILTINS: dict[str, tuple[Callable, tuple[str, ...], Callable[[dict], None]]] = {
    "math_answer": (math_answer, ("tolerance",), _check_math_answer),
    "exact_match": (exact_match, ("field", "case_sensitive"), _check_exact_match),
    "regex": (regex, ("pattern",), _check_regex),
    "format": (format, ("tags",), _check_format),
    "length": (length, ("target", "unit"), _check_length),
    "json_valid": (json_valid, (), _check_nothing),
}
