"""The model card of an exported version (`README.md`, with the YAML front matter the Hugging Face Hub reads): its
lineage from the base, the judgements in the store when it was made, its win rate against the SFT policy and its
leaderboard strength (the figures `status` and the Leaderboard give), its reward functions' held-out scores, the
failure warnings its training recorded, and its settings.

    write_model_card(store, policy, "v3", version_settings(store, policy), folder)
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from labeling.queue.synthetic import ORACLE_NAME
from labeling.versions.winrate import version_names, winrate_report
from storage import Store
from storage.generations import function_scores
from storage.job_warnings import list_warnings
from storage.judge_verdicts import JUDGE_PREFIX
from storage.lineage import judgement_counts, registering_job
from storage.policies import get_policy, list_policies, trained_from
from storage.types import Policy

from .settings import run_settings

CARD_FILE = "README.md"


def lineage(store: Store, policy: Policy) -> list[Policy]:
    """`policy`'s versions from the base it started from to itself (parents, and what a root was trained from)."""
    chain, seen = [policy], {policy.id}
    while (before := trained_from(store, chain[-1].id)) is not None and before not in seen:
        chain.append(get_policy(store, before))
        seen.add(before)
    return chain[::-1]


REWARDS = {"rm": "the reward model", "oracle": "the oracle", "functions": "reward functions {}",
           "rm+functions": "the reward model and reward functions {}"}


def trained_against(store: Store, policy: Policy, made_by: str) -> str:
    """What a PPO or GRPO version maximised (its job's `reward`: the reward model, the oracle, reward functions);
    empty for the others (SFT learns demonstrations, DPO the labels themselves)."""
    if made_by not in ("PPO", "GRPO"):
        return ""
    job = registering_job(store, policy)
    if job is None:
        return "unknown"
    names = ", ".join(str(f.get("name", "?")) for f in job.config.get("reward_functions") or [])
    reward = job.config.get("reward", "rm")
    return REWARDS.get(reward, reward).format(names)


def _annotator_kind(annotator: str) -> str:
    if annotator == ORACLE_NAME:
        return "the oracle"
    return "judge models" if annotator.startswith(JUDGE_PREFIX) else "people"


def judgement_table(store: Store, policy: Policy) -> list[str]:
    """Markdown rows: each kind of judgement in the store when `policy` was made, by people, the oracle and judges."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for count in judgement_counts(store, until=policy.created):
        table[count.kind][_annotator_kind(count.annotator)] += count.count
    if not table:
        return ["No judgements were in the store when it was made (it was imported, or trained on a reward function)."]
    columns = ("people", "the oracle", "judge models")
    rows = ["| judgements | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    rows += [f"| {kind} | " + " | ".join(str(table[kind][c]) for c in columns) + " |"
             for kind in ("pairs", "rankings", "demonstrations") if kind in table]
    return rows


def figures(store: Store, policy: Policy) -> list[str]:
    """The version's win rate against the SFT policy, its leaderboard standing and its reward functions' scores."""
    report = winrate_report(store)
    lines = [f"- {v.line()}" for v in report.versions if v.policy_id == policy.id]
    for s in report.leaderboard:
        if s.policy_id != policy.id:
            continue
        if s.anchor:
            lines.append(f"- leaderboard: {s.name} is the SFT policy (strength 0)")
        elif s.strength is None:
            lines.append(f"- leaderboard: {s.name} has no judgements yet")
        else:
            bounds = f" [{s.low:+.2f}, {s.high:+.2f}]" if s.low is not None else ""
            lines.append(f"- leaderboard: rank {s.rank} of {len(report.leaderboard)}, Bradley-Terry strength "
                         f"{s.strength:+.2f}{bounds} (SFT = 0), P(preferred to SFT) {s.beats_sft:.0%}, "
                         f"{s.judgements} judgements")
    for label, (mean, count) in function_scores(store).get(policy.id, {}).items():
        lines.append(f"- reward function {label}: mean {mean:.3f} on {count} held-out samples")
    return lines or ["- no blind judgements of it yet"]


def warning_lines(store: Store, policy: Policy) -> list[str]:
    """The failure warnings the job that made `policy` recorded in its round."""
    job = registering_job(store, policy)
    if job is None:
        return ["- none recorded"]
    found = [w for w in list_warnings(store, job.id) if w.round == policy.round]
    return [f"- {w.title} (step {w.step}): {w.detail}" for w in found] or ["- none recorded"]


def front_matter(base: Policy, made_by: list[str]) -> list[str]:
    """The Hub's metadata: the base model when the base folder names a Hub id, tags, and a licence left to the user."""
    config_file = Path(base.path) / "config.json"
    name = json.loads(config_file.read_text()).get("_name_or_path", "") if config_file.is_file() else ""
    hub_id = name if name.count("/") == 1 and not Path(name).is_absolute() and not name.startswith(".") else ""
    tags = ["rlhf", "rlhf-studio", *sorted({m.lower() for m in made_by if m != "imported"})]
    return ["---", *([f"base_model: {hub_id}"] if hub_id else []),
            "license: other  # set the licence: the base model's terms apply", "library_name: transformers",
            "pipeline_tag: text-generation", "tags:", *[f"- {t}" for t in tags], "---"]


def card_text(store: Store, policy: Policy, name: str, settings: dict) -> str:
    """The whole card as markdown."""
    chain = lineage(store, policy)
    names = version_names(list_policies(store))
    made_by = [run_settings(Path(p.path))[0] for p in chain]
    steps = [f"| {names[p.id]} | {kind} | {trained_against(store, p, kind)} | {p.note or ''} |"
             for p, kind in zip(chain, made_by, strict=True)]
    sampling = ", ".join(f"{k} {settings[k]}" for k in ("temperature", "top_p", "top_k", "response_length"))
    return "\n".join([
        *front_matter(chain[0], made_by), "",
        f"# {name}", "",
        f"Version {name} of an RLHF Studio project, made from {names[chain[0].id]} ({chain[0].note or 'the base'}) "
        f"by {' → '.join(names[p.id] for p in chain)}.", "",
        "## Lineage", "", "| version | made by | trained against | what |", "|---|---|---|---|", *steps, "",
        f"## Judgements behind it (in the store when {name} was made)", "", *judgement_table(store, policy), "",
        "## Evaluation (as `python app.py status` and the Leaderboard give it)", "", *figures(store, policy), "",
        "## Failure warnings its training recorded", "", *warning_lines(store, policy), "",
        "## Settings", "", f"Sampling (in generation_config.json): {sampling}.", "",
        f"{settings['made_by']} run settings:", "", "```json", json.dumps(settings["run"], indent=2), "```", "",
        "## Use", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
        "model = AutoModelForCausalLM.from_pretrained(FOLDER)", "tokenizer = AutoTokenizer.from_pretrained(FOLDER)",
        "```", ""])


def write_model_card(store: Store, policy: Policy, name: str, settings: dict, folder: Path) -> None:
    (folder / CARD_FILE).write_text(card_text(store, policy, name, settings))
