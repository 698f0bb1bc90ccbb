"""The Train tab's SFT action: **Run SFT** fine-tunes the newest policy version on the store's demonstrations as an
`sft` job (the worker runs `trainers.jobs.sft_job`; its progress shows as every job's), registered merged as a new
root, the KL reference of later rounds. The button takes its settings from the loop's form as a loop's `sft_first`
does (`sft_epochs`, `sft_lr`, `lora`, `bf16`, `seed`: `trainers.loop.sft_steps.sft_settings`); the API
`/start_sft(settings)` takes `SFTConfig`'s settings and `policy_id`, `source`, `as_root` as JSON on top of the
project's preset, as `python app.py sft` does.

Admins only. Every check that loads no model (the settings, the policy version, the demonstrations that fit its
context) runs before the job row is written, each refusal in one line. No torch here: the worker loads the models.

    status = api_start_sft(studio, '{"epochs": 2, "source": "writers"}', request)   # {job_id, kind: "sft", ...}
"""

from __future__ import annotations

from dataclasses import asdict, fields

import gradio as gr

from app.context import Studio, user_errors
from app.refusals import refusing
from app.train.code_names import refuse_code_names
from app.train.job_view import JobView, job_status_dict, job_view
from app.train.train_checks import config_from_form
from labeling.versions.winrate import named_version
from storage import jobs as job_rows
from storage.audit import AuditAction
from storage.errors import InvalidInput, NotFound
from storage.policies import get_policy, latest_policy, list_policies
from trainers.jobs.launcher import reap_orphans, start_job
from trainers.jobs.layer import JobKind, start_a_project
from trainers.jobs.sft_data import checked_use
from trainers.loop.config import settings_from_json
from trainers.loop.presets import project_preset, project_presets
from trainers.loop.sft_steps import sft_settings
from trainers.policy.sft_config import SFTConfig, SFTRun, check_root_demonstrations

RUN_FIELDS = ("policy_id", "source", "as_root")  # the SFTRun fields the API takes beside SFTConfig's settings
VERSION_FIELD = "version"  # the version to fine-tune, `vK`, in the API's settings (`policy_id`: its old, internal id)


def checked_run(studio: Studio, run: SFTRun) -> SFTRun:
    """`run` with its start version fixed (a resumed job trains the same one), after every check that loads no
    model; InvalidInput or NotFound in one line."""
    store = studio.store
    check_types(run.settings)
    run.config.check_settings()
    start = get_policy(store, run.policy_id) if run.policy_id is not None else latest_policy(store)
    if start is None:
        raise NotFound(f"the store has no policy to fine-tune; {start_a_project(store)}")
    check_root_demonstrations(run.config, run.as_root, len(checked_use(store, start, run.source).used))
    return SFTRun(policy_id=start.id, source=run.source, as_root=run.as_root, settings=run.settings)


def check_types(settings: dict) -> None:
    """Refuse, in one line, a setting of the wrong type (a JSON string where a number goes, a number for a switch)."""
    defaults = {f.name: f.default for f in fields(SFTConfig)}
    for name, value in settings.items():
        default = defaults.get(name)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, (int, float)):
            ok = isinstance(value, int if isinstance(default, int) else (int, float)) and not isinstance(value, bool)
        else:  # lora_target_modules
            ok = value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        if not ok:
            kind = {bool: "true or false", int: "a whole number", float: "a number"}.get(
                type(default), "a list of module names or null")
            raise InvalidInput(f"the SFT setting {name} must be {kind}, got {value!r}")


def start(studio: Studio, run: SFTRun, request: gr.Request | None) -> dict:
    """Admins: check `run`, then start an `sft` job; returns its status."""
    studio.require_admin(request)
    refuse_code_names(studio, {**run.settings, "source": run.source})
    run = checked_run(studio, run)
    reap_orphans(studio.store)
    job_id = start_job(studio.store, JobKind.SFT, asdict(run), None)  # SFT trains in the worker's process
    studio.record(request, AuditAction.JOB_STARTED, job_id=job_id, kind=JobKind.SFT,
                  settings={"policy_id": run.policy_id, "source": run.source, **run.settings})
    return job_status_dict(studio, job_rows.get_job(studio.store, job_id))


def run_from_json(studio: Studio, settings_json: str) -> SFTRun:
    """The API's run: the project preset's SFT settings, then the JSON's (`SFTConfig` fields and `RUN_FIELDS`)."""
    values = settings_from_json(settings_json)
    known = {f.name for f in fields(SFTConfig)} | set(RUN_FIELDS) | {VERSION_FIELD}
    unknown = sorted(set(values) - known)
    if unknown:
        raise InvalidInput(f"unknown SFT setting {unknown[0]!r}; send SFTConfig's settings (python app.py sft --help) "
                           f"or {', '.join(RUN_FIELDS)}")
    run = {name: values.pop(name) for name in RUN_FIELDS if name in values}
    if VERSION_FIELD in values:
        version = values.pop(VERSION_FIELD)
        policies = list_policies(studio.store)
        named = named_version(policies, version)
        if named is None:
            raise InvalidInput(f"version {str(version)[:20]!r} is not one of this store's (v0 to "
                               f"v{len(policies) - 1}); name one as vK, e.g. \"v0\"")
        run["policy_id"] = named.id
    if run.get("policy_id") is not None and (isinstance(run["policy_id"], bool) or
                                             not isinstance(run["policy_id"], int)):
        raise InvalidInput(f"policy_id must be a policy version's id (a whole number), got {run['policy_id']!r}")
    if run.get("source") is not None and not isinstance(run["source"], str):
        raise InvalidInput(f"source must be an author's or an import's name, got {run['source']!r}")
    if not isinstance(run.get("as_root", True), bool):
        raise InvalidInput(f"as_root must be true or false, got {run['as_root']!r}")
    preset = sft_settings(project_preset(studio.store).config, 0)
    return SFTRun(**run, settings={**preset, **values})


def api_start_sft(studio: Studio, settings_json: str, request: gr.Request) -> dict:
    """Fine-tune the newest policy version (or `policy_id`) on the store's demonstrations (of `source`, when given)
    with a JSON object of SFT settings on top of the project's preset; registered as a new root unless `as_root` is
    false. Returns the job status."""
    with user_errors():
        return start(studio, run_from_json(studio, settings_json), request)


@refusing(JobView)
def on_start_sft(studio: Studio, request: gr.Request, preset_name: str, advanced_json: str, *values) -> JobView:
    """Run SFT: an `sft` job with the form's SFT settings (those of the loop's `sft_first`), a new root."""
    with user_errors():
        config = config_from_form(project_presets(studio.store), preset_name, advanced_json, *values)
        studio.require_admin(request)
        refuse_code_names(studio, config.to_dict())  # the form's every setting, those SFT leaves unused too
        state = start(studio, SFTRun(as_root=True, settings=sft_settings(config, 0)), request)
    return job_view(studio, job_rows.get_job(studio.store, state["job_id"]))
