"""Preference import as the command line and the Data tab run it: into the store's project, where an hh-rlhf
dialogue's Human/Assistant turns become role turns when the project's policy has a chat template.

    result = import_into_project(store, "hh.jsonl.gz", "hh-rlhf", skip_invalid=True)
    result.summary()
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from labeling.transfer.preference_import import PreferenceFileImport, import_preference_file
from storage import Store
from storage.policies import latest_policy


def policy_has_chat_template(store: Store) -> bool:
    """Whether the store's newest policy has a chat template (False when the store has no policy)."""
    policy = latest_policy(store)
    if policy is None:
        return False
    from trainers.models.chat_format import (
        ChatFormat,  # reads the tokenizer files only: no torch
    )

    return ChatFormat.from_dir(policy.path).chat_template is not None


def import_into_project(store: Store, path: str | Path, source: str, skip_invalid: bool = False,
                        progress: Callable[[int], None] | None = None) -> PreferenceFileImport:
    """Import a preference file as labels by `source`, in the form the project's policy reads."""
    return import_preference_file(store, path, source, skip_invalid=skip_invalid,
                                  chat_turns=policy_has_chat_template(store), progress=progress)


def import_notes(store: Store, prompt_ids: tuple[int, ...], source: str | None = None) -> list[str]:
    """What an import says about what it brought that does not fit: new prompts longer than the policy reads (with
    the loop's default response length) and, for a preference import by `source`, its labels that the reward model
    leaves out; each kept, counted and named. Empty when everything fits."""
    from trainers.loop.prompt_use import import_budget, import_note, label_use  # no torch

    notes = [import_note(store, prompt_ids, import_budget(store))]
    labels = label_use(store, source) if source is not None else None
    if labels is not None and labels.left_out:
        notes.append(f"{labels.line(f' by {source}')}; the rest are kept (exports keep them)")
    return [note for note in notes if note]
