"""Ctrl-C (SIGINT) and SIGTERM of a process that runs a job: the first signal asks the job to stop, as the Train tab's
Stop does (its cancel flag), so the job ends `cancelled` at the end of its current step, resumable; a second one stops
at once (KeyboardInterrupt), and the worker still ends the job `cancelled`. The command then exits as shells report a
process the signal ended (`stopped_exit_code`: 130 after SIGINT, 143 after SIGTERM), so a script can tell a stopped
job from a completed one; a job stopped by the Train tab's Stop exits 0.

The flag is written, and the line saying so printed, from a helper thread: a signal handler runs between two
bytecodes of the main thread, which may be in the middle of a store transaction or of a write to the terminal.

    with stop_on_signals(store, job.id):
        runner(store, job)          # raises JobCancelled within one step of a Ctrl-C
    return stopped_exit_code()      # 130 after a Ctrl-C
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

from storage import Store
from storage import jobs as job_rows

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[signal.Signals] = []  # the signal that asked this process's current job to stop, once one did


def note_stop_signal(signum: int | None) -> None:
    """Record the signal that asked the job this process runs or follows to stop (None: none yet, a new job)."""
    _received[:] = [] if signum is None else [signal.Signals(signum)]


def stopped_exit_code() -> int:
    """A stopped job's command's exit code: 128 + the signal that stopped it, as shells report a process it ended
    (130 after SIGINT, 143 after SIGTERM); 0 when no signal did (the Train tab's Stop)."""
    return 128 + _received[0].value if _received else 0


def _ask_to_stop(store: Store, job_id: int, name: str) -> None:
    job_rows.request_cancel(store, job_id)
    print(f"{name}: stopping job {job_id} at the end of this step ({name} again stops at once); resume it with "
          f"--resume {job_id} or the Train tab's Resume", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stop_on_signals(store: Store, job_id: int) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM stop job `job_id` within a step (twice: at once). Only the main
    thread can catch signals; elsewhere (a test's thread) nothing changes."""
    note_stop_signal(None)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked = threading.Event()

    def on_signal(signum: int, frame) -> None:
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()
        note_stop_signal(signum)
        threading.Thread(target=_ask_to_stop, args=(store, job_id, signal.Signals(signum).name), daemon=True).start()

    # a signal the process was started ignoring (`nohup`, `&` in a script) stays ignored
    previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
