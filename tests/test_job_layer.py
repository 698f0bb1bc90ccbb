"""The job layer (trainers/jobs/layer.py): a store reporter logs metrics, reports the phase and reads the cancel
flag; only the main process of a distributed run reports to the store."""

from storage import jobs as job_rows
from storage.metrics import read_metrics
from trainers.jobs.layer import StoreReporter, job_reporter
from trainers.reporting import Reporter


def test_store_reporter_logs_metrics_reports_the_phase_and_reads_the_cancel_flag(store):
    job = job_rows.claim_job(store, job_rows.create_job(store, "ppo", {}), pid=1)
    heard = []

    class Listener(Reporter):
        def on_step(self, step, metrics):
            heard.append(("step", step))

        def progress(self, done, total):
            heard.append(("progress", done, total))

    reporter = StoreReporter(store, job.id, step_offset=10, phase="ppo", listener=Listener())
    reporter.on_step(1, {"ppo/kl": 0.5})
    reporter.on_step(2, {})  # nothing to log
    reporter.progress(1, 4)
    assert reporter.should_stop() is False
    assert [(r["step"], r["name"], r["value"]) for r in read_metrics(store, job.id)] == [(11, "ppo/kl", 0.5)]
    current = job_rows.get_job(store, job.id)
    assert (current.phase, current.progress) == ("ppo 1/4", 0.25)
    assert heard == [("step", 1), ("step", 2), ("progress", 1, 4)]
    job_rows.request_cancel(store, job.id)
    assert reporter.should_stop() is True


def test_only_the_main_process_reports_to_the_store(store, monkeypatch):
    job = job_rows.claim_job(store, job_rows.create_job(store, "ppo", {}), pid=1)
    assert isinstance(job_reporter(store, job.id), StoreReporter)
    listener = Reporter()
    assert job_reporter(store, None, listener=listener) is listener  # no job: the listener alone
    monkeypatch.setenv("RANK", "1")
    other = job_reporter(store, job.id)
    assert type(other) is Reporter and other.should_stop() is False
