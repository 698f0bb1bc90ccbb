"""An SFT job's worker killed with SIGKILL mid-run: the studio marks the job interrupted, nothing half-written is
registered, and the resumed job goes on from its last complete checkpoint to the end, each step logged once."""

from dataclasses import asdict

from storage import jobs as job_rows
from storage.demonstrations import ImportedDemonstration, import_demonstrations
from storage.policies import list_policies
from tests.policy_helpers import PROMPTS
from tests.worker_helpers import kill_in_step_and_resume, logged_steps
from trainers.policy.sft_config import SFTRun


def test_an_sft_worker_killed_mid_run_resumes_from_its_last_complete_checkpoint(seeded_store):
    """Killed during step 11 of 24 (checkpoints every 4 steps): the resumed worker starts from checkpoint 8."""
    store = seeded_store
    import_demonstrations(store, [ImportedDemonstration(p, " great and good .") for p in PROMPTS], "writers")
    run = SFTRun(settings={"batch_size": 1, "epochs": 3, "save_every": 4, "heldout_share": 0.0,
                           "learning_rate": 1e-3})
    job_id = job_rows.create_job(store, "sft", asdict(run))
    killed = kill_in_step_and_resume(store, job_id, "trainers.policy.sft:StudioSFTTrainer.compute_loss", step=11)
    base, sft = list_policies(store)
    assert sft.parent_id is None and sft.note.startswith("SFT of v0, 24 steps on 8 demonstrations")
    logged = logged_steps(store, job_id, "sft/loss")
    assert [step for step, _ in logged] == list(range(1, 25))  # each step once, none missing
    assert all(created < killed for step, created in logged if step <= 8)  # kept from before the kill
    assert all(created > killed for step, created in logged if step > 8)  # trained again after checkpoint 8
    assert not (store.data_dir / "sft" / f"job-{job_id}").exists()
