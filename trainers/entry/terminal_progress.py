"""A headless job's progress in the terminal: on a terminal, one bar on its own line (log lines print above it);
when the output is a file or a pipe, plain lines instead, one per reported step, with the percentage and the time
since the start.

    shown = TerminalProgress("loop")
    Loop(store, job, log=shown.log, progress=shown.progress).run()
    shown.close()
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


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
