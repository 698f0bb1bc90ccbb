"""Reward functions written as for TRL's GRPOTrainer, named `tests.custom_rewards:NAME` by the tests; `SEEN` keeps
what the last one was called with."""

import math
import time

SEEN = {}


def trl_style(prompts, completions, completion_ids, answer, **kwargs):
    """A reward function as written for TRL's GRPOTrainer: the reference field `answer` by name."""
    SEEN.update(prompts=prompts, completions=completions, completion_ids=completion_ids, answer=answer, **kwargs)
    return [1.0 if str(a) in c else 0.0 for c, a in zip(completions, answer, strict=True)]


def conversational(prompts, completions, **kwargs):
    SEEN.update(prompts=prompts, completions=completions)
    return [float(len(c[0]["content"])) for c in completions]


def opinionated(completions, **kwargs):
    return [None if "?" in c else 2.0 for c in completions]


def raises(completions, **kwargs):
    raise ValueError("bad input\nsecond line")


def too_few(completions, **kwargs):
    return [1.0]


def not_a_number(completions, **kwargs):
    return [math.nan] * len(completions)


def text_values(completions, **kwargs):
    return ["1"] * len(completions)


def slow(completions, **kwargs):
    time.sleep(2)
    return [0.0] * len(completions)


def hangs(completions, **kwargs):
    time.sleep(3600)
    return [0.0] * len(completions)


def huge(completions, **kwargs):
    """Finite in Python, inf in float32."""
    return [1e308] * len(completions)


def beyond_float32(completions, **kwargs):
    """Just past float32's largest value (about 3.4e38)."""
    return [1e39 if i % 2 else 0.0 for i in range(len(completions))]
