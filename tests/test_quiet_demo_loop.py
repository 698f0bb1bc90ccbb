"""The README's headless loop on the demo (`python app.py loop --rounds 3 --labels-per-round 100 --annotator
oracle`), a healthy run: its oracle score and win rate rise, it records no warning, the Curves tab finds nothing, and
its terminal shows one readable line per round and the result."""

import subprocess
import sys
from pathlib import Path

from app.context import Studio
from app.curves.curves_tab import ALL, findings, load_curves
from storage import jobs as job_rows
from storage.job_warnings import list_warnings
from storage.rounds import list_rounds

ROOT = Path(__file__).resolve().parent.parent
README_LOOP = ["--rounds", "3", "--labels-per-round", "100", "--annotator", "oracle"]


def test_the_readmes_demo_loop_ends_quiet_with_one_line_per_round(demo_store):
    result = subprocess.run([sys.executable, "app.py", "loop", "--db", str(demo_store.path), *README_LOOP], cwd=ROOT,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-2000:]
    [job] = job_rows.list_jobs(demo_store)
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if " done: " in line] == [f"round {r}/3 done" for r in (1, 2, 3)]
    assert "{" not in result.stdout  # no Python dicts
    assert lines[-1].startswith(f"job {job.id} (loop) completed: made v1–v3 in 3 rounds · v3 vs SFT ")
    assert lines[-1].endswith(" · no warnings") and "judgements by the oracle annotator" in lines[-1]
    assert "\r" not in result.stderr  # not a terminal: plain progress lines, no bar redrawn in place
    oracle = [r["summary"]["oracle_score"] for r in list_rounds(demo_store, job.id)]
    assert oracle[-1] > oracle[0]  # healthy: the oracle's score rose
    assert list_warnings(demo_store, job.id) == []
    assert findings(load_curves(Studio(demo_store), job.id), ALL) == []
