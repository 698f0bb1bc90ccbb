"""A headless job's progress in the terminal: on a terminal, one bar on its own line (log lines print above it);
when the output is a file or a pipe, plain lines instead, one per reported step, with the percentage and the time
since the start.

    shown = TerminalProgress("loop")
    Loop(store, job, log=shown.log, progress=shown.progress).run()
    shown.close()

`StepBar` is the bar of a job trained in the terminal by a Trainer (SFT, DPO): its optimiser steps and last metrics.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from ..reporting import Reporter


class TerminalProgress:
    """`log(line)` and `progress(fraction, phase)` for a headless job, shown on `stream` (stderr by default)."""

    def __init__(self, name: str, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.started, self.last = time.monotonic(), None
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=1000, desc=name, unit="‰", file=self.stream, dynamic_ncols=True,
                            bar_format="{l_bar}{bar}| {elapsed}<{remaining} {postfix}")

    def log(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)  # the bar is cleared, the line printed, the bar drawn again
        else:
            print(line, flush=True)

    def progress(self, fraction: float, phase: str) -> None:
        if self.bar is not None:
            self.bar.update(int(fraction * 1000) - self.bar.n)
            self.bar.set_postfix_str(phase)
        elif (fraction, phase) != self.last:
            elapsed = int(time.monotonic() - self.started)
            print(f"[{fraction:4.0%} · {elapsed // 60}:{elapsed % 60:02d}] {phase}", file=self.stream, flush=True)
        self.last = (fraction, phase)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class StepBar(Reporter):
    """A terminal bar named `name` over a trainer's optimiser steps, with the last value of each metric of `shown`
    (the short name shown → the metric's name)."""

    def __init__(self, name: str, shown: dict[str, str]):
        from tqdm import tqdm

        self.bar = tqdm(total=0, desc=name, unit="step", file=sys.stderr)
        self.metric_names = shown
        self.shown: dict[str, str] = {}

    def progress(self, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.update(done - self.bar.n)

    def on_step(self, step: int, metrics) -> None:
        self.shown.update({k: f"{metrics[n]:.3f}" for k, n in self.metric_names.items() if n in metrics})
        self.bar.set_postfix(self.shown, refresh=False)
