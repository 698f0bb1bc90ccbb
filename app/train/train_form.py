"""The Train tab's form: its fields (`FORM`), the presets that fill it (the project's own on page load, and why),
the labels each round collects, the token limits the settings give on the newest policy (with the prompts and
labels a loop would use and leave out), and the labels that name the chosen policy optimiser."""

from __future__ import annotations

import functools
from pathlib import Path

import gradio as gr

from app.context import Studio, markdown_literal
from labeling.queue.synthetic import ORACLE_NAME
from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput
from storage.labels import count_labels, labelled_by_others
from storage.policies import latest_policy
from storage.prompts import count_prompts, excluded_prompt_ids
from trainers.loop.config import (
    Annotator,
    LoopConfig,
    collects_labels,
    settings_from_json,
)
from trainers.loop.label_schedule import first_round_labels, labels_in_round, schedule_line
from trainers.loop.presets import DEMO, Preset, project_preset, project_presets
from trainers.loop.prompt_use import LabelUse, label_use, loop_prompts
from trainers.policy.config import Algorithm

# the form's LoopConfig fields, in the order it sends them
FORM = ("rounds", "samples_per_prompt", "labels_per_round", "label_budget", "policy_iterations", "selector", "ensemble",
        "kl_coef", "reward_lr", "policy_lr", "reward_epochs", "annotator", "algorithm", "group_size", "dpo_beta",
        "label_decay", "check_share", "reward_patience", "reward_warm_start", "on_warning", "sft_first",
        "rank_k")
LIMIT_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def show_limits(studio: Studio, preset_name: str = "demo", advanced_json: str = "{}", *counts) -> str:
    """The token limits the settings give on the newest policy, how many prompts and labels the loop would use and
    leave out (nothing is truncated: a prompt or a labelled pair over them is left out, counted), and the labels it
    will have: those it collects with the form's `counts` (rounds, N, B, decay; the preset's without them) on top of
    the store's."""
    policy = latest_policy(studio.store)
    if policy is None:
        return "**Limits:** no policy yet; start a project with `python app.py init` (or the demo: `init --demo`)."
    try:
        preset = project_presets(studio.store)[preset_name]
        settings = {**preset.to_dict(), **settings_from_json(advanced_json)}
    except InvalidInput:
        return "**Limits:** fix the advanced settings' JSON to see them."
    store = studio.store
    state = (count_prompts(store), excluded_prompt_ids(store), count_labels(store), folder_state(policy.path))
    counted = limits_counted(store, policy.path, int(settings["response_length"]), state)
    if isinstance(counted, str):
        return f"**Limits:** {counted}"
    prompt_lines, labels = counted
    line = labels_line(labels, loop_schedule(preset, advanced_json, counts))
    return f"**Limits:** {markdown_literal('; '.join(prompt_lines + ([line] if line else [])))}."


def limits_once_idle(studio: Studio, preset_name: str = "demo", advanced_json: str = "{}", *counts) -> str | dict:
    """After a poll of the job: the limits again once no job runs (a finished job stored labels and may have made a
    new version); left as they are while one runs."""
    newest = job_rows.list_jobs(studio.store, limit=1)
    if newest and newest[0].status.active:
        return gr.skip()
    return show_limits(studio, preset_name, advanced_json, *counts)


def folder_state(path: str) -> tuple:
    """What changes when the files that set a policy's limits change (its config, tokenizer and chat template)."""
    files = [Path(path) / name for name in LIMIT_FILES]
    return tuple((file.stat().st_mtime_ns, file.stat().st_size) if file.is_file() else None for file in files)


@functools.lru_cache(maxsize=16)
def limits_counted(store: Store, policy_path: str, response_length: int, state: tuple) -> tuple | str:
    """The limits of a policy folder for a response length with the prompts the loop would use and leave out (lines),
    and the store's labels (`LabelUse`, None without any); `state` names what they depend on (prompt count, excluded
    ids, label count, the policy's files), so they are counted through the chat template once, not at every opening
    of the tab. A template or config the studio refuses is its one line."""
    try:
        return loop_prompts(store, policy_path, response_length).lines(), label_use(store)
    except InvalidInput as exc:
        return markdown_literal(str(exc))


def loop_schedule(preset: LoopConfig, advanced_json: str, counts: tuple) -> list[int] | None:
    """The labels each round of the loop collects with the form's `counts` (rounds, N, B, decay; the preset's when
    empty) and the advanced JSON on top: [] when it collects none (a reward of the functions alone), None while the
    counts are not valid."""
    try:
        form = {}
        if counts:
            rounds, first, budget, decay = counts
            form = {"rounds": int(rounds), "labels_per_round": int(first),
                    "label_budget": int(budget) if budget else None, "label_decay": float(decay)}
        config = LoopConfig.from_dict({**preset.to_dict(), **form}).updated(settings_from_json(advanced_json))
    except (InvalidInput, TypeError, ValueError):
        return None
    if not collects_labels(config):
        return []
    return [labels_in_round(config.labels_per_round, config.label_decay, i) for i in range(config.rounds)]


def labels_line(use: LabelUse | None, collected: list[int] | None) -> str:
    """The labels the loop will have: the ones it collects (`collected`, round by round) on top of the store's (`use`;
    those of them left out, named); "" with neither."""
    in_store = use.line(" in the store") if use else ""
    if not collected:
        return in_store
    rounds = len(collected)
    line = (f"labels: the loop collects {sum(collected)} ({' + '.join(map(str, collected))} over {rounds} "
            f"round{'s' * (rounds != 1)})")
    if use is None:
        return f"{line}; the store has none yet"
    line += f" on top of the {use.total} in the store: {sum(collected) + use.total} by its last round"
    return f"{line}; {in_store}" if use.left_out else line


def schedule_text(rounds, labels_per_round, label_budget, label_decay) -> str:
    """The labels each round collects with the form's counts (check pairs included): N, N x decay, ..., or the N the
    budget B gives."""
    try:
        rounds, decay = int(rounds), float(label_decay)
        if rounds < 1 or not 0 < decay <= 1:
            raise ValueError
        first = first_round_labels(int(label_budget), decay, rounds) if label_budget else int(labels_per_round)
    except (TypeError, ValueError):
        return "**Labels:** set the rounds, N (or B) and a label decay in (0, 1] to see how many each round collects."
    source = f"N = {first} from the budget B = {int(label_budget)}" if label_budget else f"N = {first}"
    return f"**Labels:** {schedule_line(first, decay, rounds)} ({source}; check pairs included)."


def fill_preset(name: str, presets: dict[str, LoopConfig] | None = None) -> list:
    """The form's values of a preset (of the project's `presets`; the demo's alone when None), in FORM order."""
    config = (presets or {DEMO: LoopConfig()})[name]
    return [config.setting(field) for field in FORM]


def form_presets(store: Store) -> dict[str, LoopConfig]:
    """The project's presets as the form offers them: labels from people (`human`) once people have labelled the
    store, not from the demo's oracle."""
    presets = project_presets(store)
    if not labelled_by_others(store, ORACLE_NAME):
        return presets
    return {name: config.updated({"annotator": Annotator.HUMAN.value}) for name, config in presets.items()}


def people_default(studio: Studio, seen: bool) -> tuple:
    """Each time the tab opens: the first time this page sees that people have labelled the store (a person has just
    labelled in the Label tab), "Labels from" turns to people; after that the user's choice stays. Returns the
    annotator's update and what the page has now seen."""
    labelled = labelled_by_others(studio.store, ORACLE_NAME)
    return (Annotator.HUMAN.value if labelled and not seen else gr.skip()), labelled


def on_preset(studio: Studio, name: str) -> list:
    return fill_preset(name, form_presets(studio.store))


def project_form(studio: Studio) -> list:
    """On page load: the preset chosen for the project's model, its values in the form, and why it was chosen."""
    preset = project_preset(studio.store)
    return [preset.name, *fill_preset(preset.name, form_presets(studio.store)), chosen_line(preset)]


def chosen_line(preset: Preset) -> str:
    return f"Starting settings for this project's model: **{preset.name}** ({markdown_literal(preset.reason)})."


def run_now_label(algorithm: str) -> str:
    """The policy-optimisation button names the chosen optimiser: "Run PPO now", "Run GRPO now" or "Run DPO now"."""
    return f"Run {algorithm.upper()} now"


def iterations_label(algorithm: str) -> str:
    if algorithm == Algorithm.DPO:
        return "M: iterations (PPO/GRPO; DPO runs epochs)"
    return f"M: {algorithm.upper()} iterations"


def lr_label(algorithm: str) -> str:
    return f"{algorithm.upper()} LR"


def on_algorithm(algorithm: str) -> tuple[gr.Button, gr.Number, gr.Number]:
    """The run button and the policy settings' labels name the chosen optimiser."""
    return (gr.Button(run_now_label(algorithm)), gr.Number(label=iterations_label(algorithm)),
            gr.Number(label=lr_label(algorithm)))
