"""Typed rows returned by storage functions, the label outcome enum and every pair selector's value."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Selector(enum.StrEnum):
    """What queued or stored a pair (`pairs.selector`, `rankings.selector`); annotators never see it. The first six
    choose a loop round's pairs (the setting `selector`, `ROUND_SELECTORS`); the others mark pairs made for one
    purpose."""

    RANDOM = "random"
    DISAGREEMENT = "disagreement"
    THOMPSON = "thompson"
    INFO_GAIN = "info_gain"
    DIVERSE = "diverse"
    D_OPTIMAL = "d_optimal"
    CHECK = "check"  # a check pair: one the reward model ranked confidently, to check it (`storage.check_pairs`)
    WINRATE = "winrate"  # two versions' held-out samples, judging a version (`storage.winrate`)
    ARENA = "arena"  # an arena vote: a win-rate pair the label queue never serves (`storage.arena`)
    IMPORTED = "imported"  # arrived already labeled (`storage.preferences`, gold rankings): never queued


ROUND_SELECTORS = (Selector.RANDOM, Selector.DISAGREEMENT, Selector.THOMPSON, Selector.INFO_GAIN, Selector.DIVERSE,
                   Selector.D_OPTIMAL)  # the values of a loop's `selector` setting, the default first


class Outcome(str, enum.Enum):
    """A label's outcome, relative to the pair's stored order (first, second), not to screen sides."""

    FIRST = "first"
    SECOND = "second"
    TIE = "tie"
    BOTH_BAD = "both_bad"
    SKIP = "skip"

    def target(self, both_bad_as_tie: bool = True) -> float | None:
        """Preference target p = P(first preferred): 1, 0, 0.5, or None when the label does not train."""
        if self is Outcome.FIRST:
            return 1.0
        if self is Outcome.SECOND:
            return 0.0
        if self is Outcome.TIE or (self is Outcome.BOTH_BAD and both_bad_as_tie):
            return 0.5
        return None


@dataclass(frozen=True)
class LoopLabels:
    """The labels a loop job's round counts and trains on: people's on any item (its own, the people's queue's,
    another job's), imports and gold as always, but a synthetic annotator's (`synthetic`: the oracle's name; a judge's
    verdicts always are) only on the pairs and rankings job `job_id` queued, never another job's."""

    job_id: int
    synthetic: tuple[str, ...]

    def clause(self, annotator: str, item_job: str) -> tuple[str, list]:
        """The SQL condition (and its parameters) keeping a label of `annotator` (a column) on an item queued by
        `item_job` (a column)."""
        names = ", ".join("?" * len(self.synthetic))
        return f"({annotator} NOT IN ({names}) OR {item_job} = ?)", [*self.synthetic, self.job_id]


class JobStatus(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    PAUSED = "paused"  # a loop stopped itself on a failure warning (`on_warning: pause`); resume continues it

    @property
    def active(self) -> bool:
        return self in (JobStatus.QUEUED, JobStatus.RUNNING)

    @property
    def resumable(self) -> bool:
        """Stopped before its end (Stop, Ctrl-C, a crash, a warning): `--resume` or the Train tab's Resume continues."""
        return not self.active and self is not JobStatus.COMPLETED


@dataclass(frozen=True)
class Prompt:
    """A prompt: plain `text`, or a conversation whose turns are `messages` (then `text` is their plain form)."""

    id: int
    text: str
    source: str | None
    heldout: bool
    messages: list[dict] | None = None
    excluded: bool = False  # left out of sampling, training and evaluation (kept, and exported)
    reference: dict | None = None  # the fields a prompt file gave beside the prompt (`answer`, ...), by name

    @property
    def content(self) -> str | list[dict]:
        """What the model is prompted with: the conversation's turns, or the text."""
        return self.messages if self.messages is not None else self.text


@dataclass(frozen=True)
class Policy:
    id: int
    path: str
    parent_id: int | None
    round: int
    created: float
    note: str | None


@dataclass(frozen=True)
class Generation:
    id: int
    prompt_id: int
    policy_id: int | None
    text: str
    token_count: int | None
    params: dict
    seed: int | None
    ended_with_eos: bool | None
    source: str | None


@dataclass(frozen=True)
class Pair:
    id: int
    prompt_id: int
    first_id: int
    second_id: int
    round: int
    policy_id: int | None
    selector: str
    score: float | None
    job_id: int | None = None  # the loop job whose round queued it; None: the people's queue (or an import)


@dataclass(frozen=True)
class Label:
    id: int
    pair_id: int
    annotator: str
    outcome: Outcome
    left_id: int | None
    decision_ms: int | None
    vote_id: str | None
    created: float


@dataclass(frozen=True)
class RewardModel:
    id: int
    path: str
    policy_id: int | None
    round: int
    labels_used: int
    metrics: dict
    norm_mean: float
    norm_std: float
    ensemble_index: int
    ensemble_size: int
    job_id: int | None
    created: float


@dataclass(frozen=True)
class JobWarning:
    """A failure warning a job recorded when it fired: its rule, the round and step where it fired, what it says.
    `acknowledged` is when a resume continued past it (a paused loop does not pause again for it)."""

    job_id: int
    rule: str
    round: int
    step: int | None
    title: str
    detail: str
    advice: str
    created: float
    acknowledged: float | None = None


@dataclass(frozen=True)
class Job:
    id: int
    kind: str
    config: dict
    status: JobStatus
    pid: int | None
    heartbeat: float | None
    cancel_requested: bool
    error: str | None
    phase: str | None
    progress: float | None
    created: float
    started: float | None
    finished: float | None
    launch: dict | None = None  # its accelerate config, as jobs.launch_config.AccelerateLaunch.to_dict() writes it
