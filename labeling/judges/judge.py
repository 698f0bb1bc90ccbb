"""A judge model's verdict on a pair (RLAIF, MT-Bench's pairwise judge): the prompt, strict parsing, both orders.

Each pair is judged twice, its responses as assistant A then B and swapped, to cancel position bias: the two answers
agree, or the verdict is a tie (a judge that always answers `[[A]]` yields ties). An answer is parsed strictly: exactly
one of `[[A]]`, `[[B]]`, `[[C]]` (a tie) may appear in it; an answer with none is a refusal when it reads as one, else
unparseable, and one with two different verdicts is unparseable. Failures (timeouts, refusals, unparseable answers,
errors) are counted and stored, never guessed. The confidence of a verdict is the mean probability the two orders put
on it when the judge returns the verdict token's probabilities (a local model, an endpoint with log-probabilities),
else the share of the two orders that gave it (1, 0.5 or 0).

The judge itself is a `JudgeClient`: `labeling.judges.judge_endpoint.EndpointClient` (an OpenAI-compatible
chat-completions server) here, or `trainers.models.judge_model.LocalJudge` (a model folder or GGUF, torch) in a worker.

    template = JudgeTemplate.load()                     # the shipped pairwise template, or JudgeTemplate.load(path)
    result = judge_queue(store, client, template, n=50, trains=True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from storage import Store
from storage.errors import InvalidInput
from storage.judge_verdicts import NewVerdict, PendingPair, add_verdicts, unjudged_pairs
from storage.settings import get_setting
from storage.types import Outcome

DEFAULT_TEMPLATE = Path(__file__).resolve().parents[2] / "assets" / "judge_pairwise.md"
PLACEHOLDERS = ("{question}", "{answer_a}", "{answer_b}")
VERDICT = re.compile(r"\[\[([ABC])\]\]")
LETTERS = ("A", "B", "C")
REFUSAL = re.compile(r"\b(I can(?:no|')t|I cannot|I won't|I will not|I'm sorry|I am sorry|I'm unable|I am unable|"
                     r"as an AI)\b", re.IGNORECASE)
EXCERPT_CHARS = 300
TEMPLATE_MAX_CHARS = 20_000


class Status(StrEnum):
    """How one attempt ended: a verdict, or the failure that was counted instead."""

    OK = "ok"
    TIMEOUT = "timeout"
    REFUSAL = "refusal"
    UNPARSEABLE = "unparseable"
    ERROR = "error"


@dataclass(frozen=True)
class Reply:
    """A judge's answer to one prompt: its text, the probabilities it put on the verdict letters A, B, C at the
    verdict token (normalised over the three; None when the judge does not return them), or the failure that
    stopped it (a timeout, an endpoint's refusal, an error) with `text` saying what happened."""

    text: str
    probs: dict[str, float] | None = None
    failure: Status | None = None


class JudgeClient(Protocol):
    """A judge model: `name` (how its verdicts are stored) and one chat completion per call."""

    name: str

    def complete(self, messages: list[dict]) -> Reply: ...


@dataclass(frozen=True)
class JudgeTemplate:
    """The judge prompt: a system part with `{guidelines}` (the project's guidelines go there) and a user part with
    `{question}`, `{answer_a}`, `{answer_b}`. A file holds them under the lines `## system` and `## user`."""

    system: str
    user: str

    @classmethod
    def load(cls, path: str | Path | None = None) -> JudgeTemplate:
        """The template in `path` (the shipped pairwise one when None); one clear line when it is unusable."""
        path = Path(path) if path is not None else DEFAULT_TEMPLATE
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read the judge template {path}: {exc}; pass a UTF-8 text file") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, where: str = "the judge template") -> JudgeTemplate:
        if len(text) > TEMPLATE_MAX_CHARS:
            raise InvalidInput(f"{where} has {len(text)} characters; keep it under {TEMPLATE_MAX_CHARS}")
        head, has_system, rest = text.partition("## system\n")
        system, has_user, user = rest.partition("\n## user\n")
        if not has_system or not has_user or head.strip():
            raise InvalidInput(f"{where} must start with a line `## system`, then hold a line `## user` (see "
                               "assets/judge_pairwise.md)")
        missing = [p for p in PLACEHOLDERS if p not in user]
        if missing:
            raise InvalidInput(f"the user part of {where} lacks {', '.join(missing)}; it must show the question and "
                               "both answers")
        return cls(system.strip(), user.strip())

    def messages(self, guidelines: str, question: str, answer_a: str, answer_b: str) -> list[dict]:
        """The chat messages of one order (texts inserted as they are: no format string reads their braces)."""
        user = self.user
        for placeholder, value in zip(PLACEHOLDERS, (question, answer_a, answer_b), strict=True):
            user = user.replace(placeholder, value)
        return [{"role": "system", "content": self.system.replace("{guidelines}", guidelines)},
                {"role": "user", "content": user}]


@dataclass(frozen=True)
class OrderAnswer:
    """What one order's answer says: a verdict letter (A, B or C) with `status` ok, or the failure."""

    status: Status
    letter: str | None = None
    probs: dict[str, float] | None = None
    excerpt: str = ""

    def to_dict(self) -> dict:
        return {"status": self.status.value, "verdict": self.letter, "probs": self.probs, "excerpt": self.excerpt}


def parse_verdict(text: str) -> OrderAnswer:
    """Strict parsing of an answer: exactly one verdict, `[[A]]`, `[[B]]` or `[[C]]` (repeated is fine); none reads
    as a refusal when the text refuses, else as unparseable; two different verdicts are unparseable."""
    letters = set(VERDICT.findall(text))
    excerpt = text[-EXCERPT_CHARS:]
    if len(letters) == 1:
        return OrderAnswer(Status.OK, letters.pop(), excerpt=excerpt)
    if not letters and REFUSAL.search(text):
        return OrderAnswer(Status.REFUSAL, excerpt=excerpt)
    return OrderAnswer(Status.UNPARSEABLE, excerpt=excerpt)


def read_reply(reply: Reply) -> OrderAnswer:
    """A reply as an order's answer: its failure, or its strictly parsed verdict with the letters' probabilities."""
    if reply.failure is not None:
        return OrderAnswer(reply.failure, excerpt=reply.text[-EXCERPT_CHARS:])
    answer = parse_verdict(reply.text)
    return OrderAnswer(answer.status, answer.letter, reply.probs, answer.excerpt) if answer.letter else answer


# What a letter means for the pair's (first, second): in order 0 the first response is A, in order 1 it is B.
_MEANING = ({"A": Outcome.FIRST, "B": Outcome.SECOND, "C": Outcome.TIE},
            {"A": Outcome.SECOND, "B": Outcome.FIRST, "C": Outcome.TIE})


@dataclass(frozen=True)
class PairVerdict:
    """Both orders' answers on a pair and what they add up to: the outcome (relative to (first, second)) and its
    confidence when both orders gave a verdict, else the first failure's status and no outcome."""

    status: Status
    outcome: Outcome | None
    confidence: float | None
    orders: tuple[OrderAnswer, OrderAnswer]


def combine(first_order: OrderAnswer, second_order: OrderAnswer) -> PairVerdict:
    """Two orders' answers as one verdict: the outcome both give, else a tie (position-inconsistent). Confidence:
    the mean probability the orders put on that outcome when both carry probabilities, else the share of the two
    orders that gave it."""
    orders = (first_order, second_order)
    failed = next((o.status for o in orders if o.status != Status.OK), None)
    if failed is not None:
        return PairVerdict(failed, None, None, orders)
    said = [_MEANING[i][o.letter] for i, o in enumerate(orders)]
    outcome = said[0] if said[0] == said[1] else Outcome.TIE
    if all(o.probs for o in orders):
        confidence = sum(_outcome_prob(o.probs, i, outcome) for i, o in enumerate(orders)) / 2
    else:
        confidence = sum(s == outcome for s in said) / 2
    return PairVerdict(Status.OK, outcome, confidence, orders)


def _outcome_prob(probs: dict[str, float], order: int, outcome: Outcome) -> float:
    """The probability an order's letters put on `outcome` of the pair."""
    return sum(p for letter, p in probs.items() if _MEANING[order].get(letter) == outcome)


def letter_probs(values: dict[str, float]) -> dict[str, float] | None:
    """Probabilities (or unnormalised weights) of A, B, C normalised over the three; None when none has any."""
    total = sum(values.get(letter, 0.0) for letter in LETTERS)
    return {letter: values.get(letter, 0.0) / total for letter in LETTERS} if total > 0 else None


def judge_pair(client: JudgeClient, template: JudgeTemplate, guidelines: str, question: str, first: str,
               second: str) -> PairVerdict:
    """The judge's verdict on (first, second): both orders asked, then combined."""
    answers = [read_reply(client.complete(template.messages(guidelines, question, a, b)))
               for a, b in ((first, second), (second, first))]
    return combine(*answers)


@dataclass
class JudgeRun:
    """What a judging pass did: verdicts by status, how many train, the pair ids judged."""

    judge: str
    counts: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in Status})
    training: int = 0
    pair_ids: list[int] = field(default_factory=list)

    @property
    def judged(self) -> int:
        return sum(self.counts.values())

    def line(self) -> str:
        """`judge qwen judged 20 pairs: 17 verdicts (12 train), 1 timeout, 2 unparseable`."""
        failures = ", ".join(f"{n} {s}" for s, n in self.counts.items() if s != Status.OK and n)
        return (f"judge {self.judge} judged {self.judged} pairs: {self.counts[Status.OK]} verdicts "
                f"({self.training} train){', ' + failures if failures else ''}")


def judge_queue(store: Store, client: JudgeClient, template: JudgeTemplate, n: int, trains: bool = False,
                min_confidence: float = 0.0, round: int | None = None, pending: list[PendingPair] | None = None,
                progress=None) -> JudgeRun:
    """Judge up to `n` queued pairs the judge has not answered (or the `pending` pairs given), storing each verdict as
    it comes. With `trains` (the user chose the judge as annotator), verdicts of confidence at least `min_confidence`
    train and take their pairs out of people's queue (win-rate pairs' never train); without it they are suggestions.
    `progress(done, total)` is called after each pair."""
    if n < 0:
        raise InvalidInput(f"the number of pairs to judge must be 0 or more, got {n}")
    if not 0 <= min_confidence <= 1:
        raise InvalidInput(f"the judge's confidence threshold must be between 0 and 1, got {min_confidence}")
    guidelines = str(get_setting(store, "guidelines"))
    pairs = pending if pending is not None else unjudged_pairs(store, client.name, n, round=round)
    run = JudgeRun(client.name)
    for done, pair in enumerate(pairs[:n], 1):
        verdict = judge_pair(client, template, guidelines, pair.prompt, pair.first, pair.second)
        training = (trains and not pair.winrate and verdict.status == Status.OK
                    and verdict.confidence >= min_confidence)
        add_verdicts(store, [NewVerdict(pair.pair_id, client.name, verdict.status.value, verdict.outcome,
                                        verdict.confidence, [o.to_dict() for o in verdict.orders], training)])
        run.counts[verdict.status.value] += 1
        run.training += training
        run.pair_ids.append(pair.pair_id)
        if progress:
            progress(done, len(pairs[:n]))
    return run
