"""Old stores after the renames: a PPO or GRPO job is a `policy` job (m021_policy_job_kind renames stored `ppo`
rows, and a `ppo` row is still read as one), version folders are named by what made them (an old store's SFT
version in a `ppo-r0-` folder keeps working), and a run saved as `ppo_state.pt` resumes."""

import shutil
from dataclasses import asdict

import pytest
from sqlite_utils import Database

from app.commands import status_cli
from storage import Store
from storage.jobs import claim_job, create_job, finish_job, get_job, list_jobs
from storage.metrics import read_metrics
from storage.migrations import migrations
from storage.policies import add_policy, list_policies
from storage.prompts import add_prompts
from storage.types import JobStatus
from tests.policy_helpers import PROMPTS, CancelAt, cli, make_policy, make_tokenizer
from trainers.jobs.layer import JobKind, job_kind_label
from trainers.jobs.policy_job import state_dir, train_policy
from trainers.policy.checkpoint import OLD_STATE_FILE, STATE_FILE, has_state
from trainers.policy.config import PolicyRun
from trainers.reporting import JobCancelled

pytestmark = pytest.mark.usefixtures("one_thread")
BEFORE = "m021_policy_job_kind"


def old_store(path) -> Store:
    """A store as the studio left it before the rename (every migration before `BEFORE`), not migrated on open."""
    migrations.apply(Database(path), stop_before=BEFORE)
    return Store(path, migrate=False)


def test_the_migration_renames_ppo_jobs_and_a_ppo_row_still_reads_as_a_policy_job(tmp_path):
    old = old_store(tmp_path / "old.db")
    ppo = create_job(old, "ppo", {"settings": {"algorithm": "grpo"}})
    finish_job(old, ppo, JobStatus.CANCELLED)
    loop = create_job(old, "loop", {})
    finish_job(old, loop, JobStatus.COMPLETED)
    old.close()

    store = Store(tmp_path / "old.db")
    assert [(job.id, job.kind) for job in list_jobs(store)] == [(loop, "loop"), (ppo, JobKind.POLICY)]
    assert store.db().execute("SELECT kind FROM jobs WHERE id = ?", [ppo]).fetchone()[0] == "policy"  # renamed
    assert job_kind_label(get_job(store, ppo)) == "grpo"
    assert f"resume: python app.py ppo --resume {ppo}" in "\n".join(status_cli.job_lines(store, get_job(store, ppo)))
    late = create_job(store, "ppo", {})  # as a worker of the old code would write it
    assert get_job(store, late).kind == JobKind.POLICY == "policy"


def test_an_old_store_with_a_ppo_job_a_ppo_r0_folder_and_ppo_state_opens_lists_and_resumes(tmp_path, capsys):
    old = old_store(tmp_path / "old.db")
    sft = old.data_dir / "policies" / "ppo-r0-20250101-000000-abcdef"  # where an SFT version was once registered
    make_policy().save_pretrained(sft)
    make_tokenizer().save_pretrained(sft)
    add_policy(old, str(sft))
    add_prompts(old, PROMPTS)
    run = PolicyRun(iterations=3, reward="oracle", policy_id=1, settings={"batch_size": 4, "response_length": 6})
    job_id = create_job(old, "ppo", asdict(run))
    claim_job(old, job_id, pid=1)
    with pytest.raises(JobCancelled):
        train_policy(old, run, job_id, listener=CancelAt(old, job_id, 1))
    finish_job(old, job_id, JobStatus.CANCELLED)
    saved = state_dir(old, job_id)
    shutil.move(saved / STATE_FILE, saved / OLD_STATE_FILE)  # the state file's old name
    assert has_state(saved)
    old.close()

    assert cli("status", "--db", str(tmp_path / "old.db")) == 0
    listed = capsys.readouterr().out
    assert f"job {job_id} policy: cancelled" in listed and f"python app.py ppo --resume {job_id}" in listed
    assert cli("ppo", "--db", str(tmp_path / "old.db"), "--resume", str(job_id)) == 0
    store = Store(tmp_path / "old.db")
    assert get_job(store, job_id).status is JobStatus.COMPLETED
    assert sorted(r["step"] for r in read_metrics(store, job_id, names=["ppo/kl"])) == [1, 2, 3]  # from step 2 on
    v0, v1 = list_policies(store)
    assert v0.path == str(sft) and v1.parent_id == v0.id and v1.path.split("/")[-1].startswith("ppo-r1-")
