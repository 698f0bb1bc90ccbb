"""`python app.py sft` and the sft job on a store: demonstrations imported, SFT registered merged as a new root (the
reference from then on) that loads with AutoModelForCausalLM, refusals in one line before any job, too-long
demonstrations left out and counted, a stopped or killed job resumed to the end; one stopped by SIGINT or SIGTERM
exits 130 or 143 (as shells report) with its resume line, which `status` prints too."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from storage.jobs import claim_job, create_job, finish_job, get_job, list_jobs
from storage.metrics import read_metrics
from storage.policies import list_policies, root_policy, trained_from
from storage.types import JobStatus
from tests.helpers import wait_for
from tests.policy_helpers import PROMPTS, CancelAt, cli
from trainers.jobs.sft_job import run_sft, state_dir
from trainers.models.loading import load_policy
from trainers.policy.sft_config import SFTRun
from trainers.reporting import JobCancelled

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ["--epochs", "2", "--batch-size", "4", "--learning-rate", "5e-3", "--heldout-share", "0.25"]


@pytest.fixture
def demo_store(seeded_store, tmp_path):
    """The seeded store (tiny GPT-2, no chat template) with 8 demonstrations by `writers`."""
    path = tmp_path / "demos.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "completion": " great ."}) + "\n" for p in PROMPTS))
    assert cli("import-demonstrations", "--db", str(seeded_store.path), str(path), "--source", "writers") == 0
    return seeded_store


def test_sft_registers_a_merged_new_root_that_loads_as_a_causal_lm(demo_store, capsys):
    store = demo_store
    code = cli("sft", "--db", str(store.path), *SETTINGS)
    out = capsys.readouterr()
    assert code == 0, out.err
    [job] = list_jobs(store)
    assert job.kind == "sft" and job.status is JobStatus.COMPLETED
    base, sft = list_policies(store)
    assert sft.parent_id is None and root_policy(store, sft).id == sft.id and trained_from(store, sft.id) == base.id
    assert sft.note == "SFT of v0, 4 steps on 6 demonstrations (the new SFT policy)"
    model = AutoModelForCausalLM.from_pretrained(sft.path)
    assert not torch.equal(model.transformer.wte.weight, load_policy(base.path).transformer.wte.weight)
    assert not (Path(sft.path) / "adapter").exists()
    names = {r["name"] for r in read_metrics(store, job.id)}
    assert {"sft/loss", "sft/token_accuracy", "sft/heldout_loss"} <= names
    assert "demonstrations: 8 of 8 train SFT; registered policy v1\n" in out.out
    assert Path(sft.path).name.startswith("sft-r0-")  # named by what made it (an SFT version was once ppo-r0-...)
    assert not state_dir(store, job.id).exists()


def test_without_as_root_the_version_is_the_starts_child(demo_store):
    assert cli("sft", "--db", str(demo_store.path), *SETTINGS, "--no-as-root") == 0
    base, sft = list_policies(demo_store)
    assert sft.parent_id == base.id and root_policy(demo_store, sft).id == base.id


def test_too_long_and_excluded_demonstrations_are_left_out_and_counted(demo_store, capsys):
    from storage.demonstrations import ImportedDemonstration, import_demonstrations
    from storage.prompts import PromptSelection, list_prompts, set_excluded

    store = demo_store
    import_demonstrations(store, [ImportedDemonstration("the plot was", " great" * 30)], "long")  # context 32
    set_excluded(store, PromptSelection(ids=(list_prompts(store)[0].id,)))
    assert cli("sft", "--db", str(store.path), *SETTINGS) == 0
    out = capsys.readouterr().out
    assert "demonstrations: 7 of 9 train SFT; 1 too long for the policy's context of 32 (demonstrations 9); " \
           "1 of excluded prompts" in out


@pytest.mark.parametrize("arguments, message", [
    (["--epochs", "0"], "epochs must be a positive number, got 0.0"),
    (["--heldout-share", "1"], "heldout_share must be in [0, 1)"),
    (["--source", "nobody"], "no demonstrations by 'nobody'; the store's come from: writers"),
    (["--policy", "9"], "--policy 9: no policy id 9 (versions: v0 to v0); name a version as vK, e.g. --policy v0"),
    (["--policy", "v9"], "--policy v9: no such version (versions: v0 to v0); name one as vK, e.g. --policy v0"),
])
def test_bad_sft_input_is_one_line_exit_2_and_writes_nothing(demo_store, capsys, arguments, message):
    code = cli("sft", "--db", str(demo_store.path), *SETTINGS, *arguments)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert list_jobs(demo_store) == [] and len(list_policies(demo_store)) == 1


def test_an_empty_demonstration_set_is_refused_before_any_job(seeded_store, capsys):
    assert cli("sft", "--db", str(seeded_store.path)) == 2
    err = capsys.readouterr().err
    assert "the store has no demonstrations; write some in the Label tab (W) or import them" in err
    assert list_jobs(seeded_store) == []


def test_a_killed_sft_job_resumes_from_its_last_complete_checkpoint_to_the_end(demo_store):
    store = demo_store
    run = SFTRun(policy_id=1, settings={"batch_size": 2, "epochs": 1, "save_every": 1, "heldout_share": 0.0})
    job_id = create_job(store, "sft", {"policy_id": 1, "source": None, "as_root": True, "round": None,
                                       "settings": run.settings})
    claim_job(store, job_id, pid=1)
    with pytest.raises(JobCancelled):
        run_sft(store, run, job_id, listener=CancelAt(store, job_id, 2))
    folder = state_dir(store, job_id)
    (folder / "checkpoint-4").mkdir()  # a kill mid-save leaves a checkpoint without its trainer state
    finish_job(store, job_id, JobStatus.INTERRUPTED)
    assert len(list_policies(store)) == 1
    assert cli("sft", "--db", str(store.path), "--resume", str(job_id)) == 0
    assert get_job(store, job_id).status is JobStatus.COMPLETED
    assert sorted(r["step"] for r in read_metrics(store, job_id, names=["sft/loss"])) == [1, 2, 3, 4]
    assert len(list_policies(store)) == 2 and not folder.exists()


def test_an_sft_stopped_by_sigterm_exits_143_and_status_says_how_to_resume(demo_store):
    store, sig = demo_store, signal.SIGTERM  # SIGINT goes the same way (130): tests/test_loop_stopping.py
    sft = subprocess.Popen([sys.executable, "app.py", "sft", "--db", str(store.path), *SETTINGS, "--epochs", "500"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: sft.poll() is not None or read_metrics(store, 1, names=["sft/loss"]), timeout=300)
    sft.send_signal(sig)
    out, err = sft.communicate(timeout=120)
    assert get_job(store, 1).status is JobStatus.CANCELLED, err[-2000:]
    assert sft.returncode == 143  # as shells report a process SIGTERM ended, not 0
    assert out.splitlines()[-1].startswith("sft job 1: cancelled at ") and out.endswith("; resume with --resume 1\n")
    status = subprocess.run([sys.executable, "app.py", "status", "--db", str(store.path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert f"  resume: python app.py sft --resume 1 --db {store.path}" in status.stdout.splitlines()
