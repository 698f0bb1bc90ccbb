"""Start-up time of the studio: from `python app.py serve` to a served page, on a new store (first start: migrate,
seed the demo, sample, queue pairs) and on the same store again (later start). Prints a table.

    python bench/startup.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def time_to_page(db: Path, timeout: float = 600) -> float:
    """Seconds from launching `app.py serve` until its page answers 200; the server is stopped afterwards."""
    port = free_port()
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "serve", "--db", str(db), "--port", str(port)],
                              cwd=db.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - started < timeout:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    if response.status == 200:
                        return time.perf_counter() - started
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"no page after {timeout} s")
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="fresh stores to time")
    args = parser.parse_args()
    rows = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as folder:
            db = Path(folder) / "studio.db"
            rows.append((time_to_page(db), time_to_page(db)))
    print(f"{'run':>3} | {'first start (s)':>15} | {'later start (s)':>15}")
    for i, (first, later) in enumerate(rows, 1):
        print(f"{i:>3} | {first:>15.1f} | {later:>15.1f}")


if __name__ == "__main__":
    main()
