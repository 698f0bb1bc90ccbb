"""A loop's pulse: while one step of a phase runs longer than `PULSE_S` (loading a model, one PPO or GRPO iteration,
a batch of evaluation samples), the job's phase in the store and the terminal's progress line say so every `PULSE_S`
seconds, with the time spent since the phase last moved (`round 1/1: GRPO iteration 3/40 · 25 s since`), so no
phase is silent for longer. It writes no log lines (the log keeps the steps themselves) and runs in a thread of its
own, which the store allows (a connection per thread).

    with Pulse(lambda phase, fraction: heartbeat(phase, fraction)) as pulse:
        pulse.moved("round 1/3: GRPO iteration 0/10", 0.4)     # each real report; the pulse repeats it while quiet
"""

from __future__ import annotations

import threading
import time
from typing import Callable

PULSE_S = 8.0  # a running phase is reported at least this often (checked every fifth of it: silent < 10 s)


class Pulse:
    """Repeats the last reported phase, with the seconds since it was reported, while no new report comes."""

    def __init__(self, beat: Callable[[str, float], None], every: float = PULSE_S):
        self.beat, self.every = beat, every
        self.last: tuple[str, float, float, float] | None = None  # (phase, fraction, reported at, last beat at)
        self.lock = threading.Lock()  # held by a real report and by a beat: a beat never overtakes a report
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="loop-pulse", daemon=True)

    def moved(self, phase: str, fraction: float) -> None:
        """The phase moved (call it holding `lock`, with the report that says so)."""
        now = time.monotonic()
        self.last = (phase, fraction, now, now)

    def _run(self) -> None:
        while not self.stopped.wait(self.every / 5):
            with self.lock:
                if self.last is None or self.stopped.is_set():
                    continue
                phase, fraction, reported, beaten = self.last
                now = time.monotonic()
                if now - beaten >= self.every:
                    self.last = (phase, fraction, reported, now)
                    self.beat(f"{phase} · {now - reported:.0f} s since", fraction)

    def __enter__(self) -> "Pulse":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()
