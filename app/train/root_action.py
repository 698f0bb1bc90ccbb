"""Making a version the root by hand: `python app.py set-root vK` and the Train tab's **Make root** (admins). An SFT
version whose held-out fluency collapsed is registered as its start's child, not the root (`trainers.jobs.sft_job`'s
new-root check); this makes it the root anyway, so later rounds' KL reference, DPO's reference and the SFT side of
win-rate pairs follow it. Any version that is not a root may be made one; the one it was trained from stays on the
leaderboard.

    python app.py set-root v3 --db studio.db    # app/commands/set_root_cli.py
    on_make_root(studio, request, "v3")      # the button: admins only, recorded in the audit trail
"""

from __future__ import annotations

import gradio as gr

from app.context import Studio, bind, user_errors
from labeling.versions.sft_policy import set_root
from storage import Store
from storage.audit import AuditAction
from storage.job_warnings import list_warnings
from trainers.policy.sft_config import MAKE_SFT_POLICY, ROOT_CHECK_RULE


def root_warning_lines(store: Store, job_id: int) -> str:
    """The job's new-root warnings (an SFT version not made the root) as the Train tab shows them, or ""."""
    return "".join(f"\n\n⚠ {w.title}: {w.detail}. {w.advice[0].upper()}{w.advice[1:]}."
                   for w in list_warnings(store, job_id) if w.rule == ROOT_CHECK_RULE)


def on_make_root(studio: Studio, request: gr.Request, version: str) -> str:
    """Make root (admins): the version typed beside the button becomes a root; returns the line saying so."""
    studio.require_admin(request)
    with user_errors():
        line = set_root(studio.store, version)
    studio.record(request, AuditAction.ROOT_SET, version=version.strip())
    return line


def build(studio: Studio) -> None:
    """The Train tab's Make root row: a version and the button, for an SFT version the new-root check kept from
    anchoring (its warning names it)."""
    with gr.Row():
        version = gr.Textbox(label="Version to make the SFT policy (e.g. v1: an SFT version the fluency check held "
                                   "back)", placeholder="v1", elem_id="train-root-version", scale=3,
                             info="Makes this version the SFT policy: later versions stay close to it (the KL term, "
                                  "DPO's reference) and win-rate pairs compare against it (admins).")
        button = gr.Button(MAKE_SFT_POLICY, elem_id="train-make-root", scale=1)
    done = gr.Markdown(elem_id="train-root-done")
    button.click(bind(on_make_root, studio), version, done, api_visibility="private")
