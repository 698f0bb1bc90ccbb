"""Starting a project on a user's model folder: checked, prepared in a copy when needed, registered as policy v0,
with its prompts, held-out prompts and labelling guidelines (`python app.py init`).

    result = start_project(store, "/models/my-instruct-model", prompts="prompts.jsonl", guidelines="Be kind.")
    for note in result.notes:     # what was done to the model, e.g. the pad token reused in a copy
        print(note)

The user's folders are only read. A copy in the data folder (`<store>-data/models/`) is made when the weights are
pickle-only (with `allow_pickle`: converted once to safetensors), when the model is a GGUF file (converted once:
`trainers.models.gguf`) or the tokenizer has no pad token distinct from EOS (an unused special token reused, else a
new one added and the embeddings grown). All or nothing: a refusal or a failure leaves the store and the data folder
as they were. The store's demo seeding plays no part here.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labeling.queue.annotation import check_guidelines, update_queue_settings
from labeling.transfer.importing import iter_prompts
from storage import Conflict, Store
from storage.policies import add_policy, list_policies
from storage.prompts import NewPrompt, add_prompts, count_prompts
from storage.settings import REWARD_BASE_SETTING, set_setting

from ..models.chat_format import PromptBudget
from ..models.checks import (
    ModelFolder,
    ModelRole,
    check_chat_template,
    check_vocab_fits,
    check_weights,
    declared_end_ids,
    inspect_model_dir,
    pickle_only,
    read_tokenizer,
)
from ..models.copies import PadFix, make_prepared_copy, plan_pad_fix
from ..models.gguf import SUFFIX as GGUF_SUFFIX
from ..models.gguf import GgufConversion, convert_gguf, gguf_source
from .prompt_use import import_budget, import_note

MODELS_DIR = "models"  # prepared copies, under the store's data folder


@dataclass(frozen=True)
class CheckedModel:
    """A model folder that passed every check, with the pad fix its tokenizer needs (None: none)."""

    folder: ModelFolder
    pad_fix: PadFix | None
    source: Path  # what the user named: the folder, or the GGUF file `folder` was converted from
    conversion: GgufConversion | None = None

    @property
    def needs_copy(self) -> bool:
        return self.pad_fix is not None or pickle_only(self.folder.path)


@dataclass(frozen=True)
class ProjectInit:
    """What `init_project` registered: policy v0, the reward base (None: the policy) and what it did, as sentences."""

    policy_id: int
    policy_path: Path
    reward_base: Path | None
    notes: tuple[str, ...]


def check_model_folder(path: str | Path, role: ModelRole, allow_pickle: bool = False) -> CheckedModel:
    """Every check of a folder the studio will start from (one-line ModelError naming the path); reads only."""
    folder = inspect_model_dir(Path(path).absolute(), role)
    check_weights(folder, allow_pickle)
    tokenizer = read_tokenizer(folder.path)
    check_vocab_fits(folder, tokenizer)
    check_chat_template(folder.path, tokenizer)
    return CheckedModel(folder, plan_pad_fix(tokenizer, declared_end_ids(folder, tokenizer)), folder.path.resolve())


def _refuse_started(store: Store) -> None:
    if list_policies(store) or count_prompts(store):
        raise Conflict(f"the store {store.path} already holds a policy or prompts; init starts a new project: "
                       "give it a new --db path")


def init_project(store: Store, policy_dir: str | Path, reward_base: str | Path | None = None,
                 allow_pickle: bool = False) -> ProjectInit:
    """Register `policy_dir` as policy v0 (the SFT root and the PPO reference) of an empty store, and the reward
    base (default: the policy) as a project setting; refuses a store that holds a policy or prompts. Either may be
    a GGUF file (or a folder holding one), converted once into a safetensors folder in the data folder."""
    _refuse_started(store)
    models_dir = store.data_dir / MODELS_DIR
    made: list[Path] = []
    staging = _Staging(models_dir, made)
    try:
        policy = _checked(policy_dir, ModelRole.POLICY, allow_pickle, staging)
        reward = None
        if reward_base is not None and Path(reward_base).resolve() != Path(policy_dir).resolve():
            reward = _checked(reward_base, ModelRole.REWARD, allow_pickle, staging)
        policy_path, notes = _prepare(policy, models_dir, "", made)
        reward_path, reward_notes = _prepare(reward, models_dir, "-reward-base", made) if reward else (None, [])
        with store.write():
            _refuse_started(store)
            note = f"SFT policy from {policy.source}" + (" (a prepared copy)" if policy_path != policy.source else "")
            policy_id = add_policy(store, str(policy_path), round=0, note=note)
            if reward_path is not None:
                set_setting(store, REWARD_BASE_SETTING, str(reward_path))
    except BaseException:
        _undo(made)
        raise
    finally:
        staging.remove()
    return ProjectInit(policy_id, policy_path, reward_path, tuple(notes + reward_notes))


class _Staging:
    """A hidden folder under `models_dir` where GGUF files are converted, made on first use (with `models_dir`,
    recorded in `made`) and removed at the end, whatever happened."""

    def __init__(self, models_dir: Path, made: list[Path]):
        self.models_dir, self.made, self.path = models_dir, made, None

    def folder(self, name: str) -> Path:
        if self.path is None:
            _make_dirs(self.models_dir, self.made)
            self.path = Path(tempfile.mkdtemp(dir=self.models_dir, prefix=".gguf-"))
        return self.path / name

    def remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def _checked(path: str | Path, role: ModelRole, allow_pickle: bool, staging: _Staging) -> CheckedModel:
    """The checked model `path` names: a model folder as it is, or a GGUF file converted into `staging` first."""
    source = gguf_source(path)
    if source is None:
        return check_model_folder(path, role, allow_pickle)
    converted = staging.folder(source.name[:-len(GGUF_SUFFIX)] or "model")
    conversion = convert_gguf(source.absolute(), converted)
    checked = check_model_folder(converted, role)
    return CheckedModel(checked.folder, checked.pad_fix, source.absolute(), conversion)


def _make_dirs(directory: Path, made: list[Path]) -> None:
    """Create `directory` and its missing parents, each recorded in `made` (so that a failure removes them)."""
    for folder in reversed([directory, *directory.parents]):
        if not folder.exists():
            folder.mkdir()
            made.append(folder)


def _unique_dir(parent: Path, name: str) -> Path:
    candidates = (parent / (name if n == 0 else f"{name}-{n}") for n in range(10_000))
    return next(path for path in candidates if not path.exists())


def _prepare(model: CheckedModel, models_dir: Path, suffix: str, made: list[Path]) -> tuple[Path, list[str]]:
    """The folder to register: the user's own, or a prepared copy under `models_dir` (appended to `made`); a
    converted GGUF file is moved there (or copied, when its pad token needs a fix too)."""
    if not model.needs_copy and model.conversion is None:
        return model.source, []
    _make_dirs(models_dir, made)
    name = model.folder.path.name if model.conversion is not None else model.source.name
    copy = _unique_dir(models_dir, name + suffix)
    notes = [model.conversion.describe(copy)] if model.conversion is not None else []
    if model.needs_copy:
        notes += make_prepared_copy(model.folder, model.pad_fix, copy, source=model.source)
    else:
        model.folder.path.rename(copy)
    made.append(copy)
    return copy, notes


def _undo(made: list[Path]) -> None:
    for path in reversed(made):  # the copies, then the folders created to hold them
        shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class ProjectStart:
    """What `start_project` did: the model part (`init`), and how many prompts and held-out prompts it imported."""

    init: ProjectInit
    prompts: int
    heldout: int
    budget: PromptBudget | None
    prompt_notes: tuple[str, ...] = ()  # prompts too long for the budget: kept, counted and named

    @property
    def notes(self) -> tuple[str, ...]:
        return self.init.notes + self.prompt_notes


def start_project(store: Store, policy_dir: str | Path, *, reward_base: str | Path | None = None,
                  prompts: str | Path | None = None, heldout: str | Path | None = None, guidelines: str | None = None,
                  allow_pickle: bool = False) -> ProjectStart:
    """`init_project`, then the prompt files and the guidelines. Every prompt is read and checked before anything
    is written, so a bad row is refused, naming its line, with the store as it was; a prompt longer than the policy
    reads is kept, counted and named (the loop leaves it out)."""
    _refuse_started(store)
    files = [(path, flag) for path, flag in ((prompts, False), (heldout, True)) if path is not None]
    read: list[tuple[list[NewPrompt], str, bool]] = [(list(iter_prompts(path)), Path(path).name, flag)
                                                     for path, flag in files]
    if guidelines is not None:
        check_guidelines(guidelines)
    init = init_project(store, policy_dir, reward_base, allow_pickle)
    counts, ids = {False: 0, True: 0}, []
    for rows, source, flag in read:
        added = add_prompts(store, rows, source=source, heldout=flag)
        counts[flag] += added.added
        ids += added.ids
    if guidelines is not None:
        update_queue_settings(store, guidelines=guidelines)
    budget = import_budget(store)
    note = import_note(store, tuple(ids), budget)
    return ProjectStart(init, counts[False], counts[True], budget, (note,) if note else ())
