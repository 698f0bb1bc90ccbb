"""What a loop job achieved, in one line: the versions it made, the newest one's win rate against the SFT policy with
its interval and who judged it, the oracle's held-out score before and after, each reward function's held-out pass
rate before and after (with the intervals: `trainers.loop.pass_rates`), and its failure warnings. The end of
`python app.py loop`, `status` and the Train tab's result card show it. Torch-free: the serving process imports it.

    job 1 (loop) completed: made v1–v3 in 3 rounds · v3 vs SFT 81% [70%, 89%] (48 judgements by the oracle
    annotator) · oracle score 0.53 → 1.22 · no warnings
"""

from __future__ import annotations

from collections import Counter

from labeling.queue.synthetic import ORACLE_NAME
from labeling.versions.winrate import version_names, winrate_report
from storage import Store
from storage.job_warnings import list_warnings
from storage.metrics import read_metrics
from storage.policies import list_policies
from storage.rounds import list_rounds
from storage.types import Job
from storage.winrate import winrate_judgements

from .pass_rates import change_text, function_labels, pass_rates


def who_judged(annotators: list[str]) -> str:
    """Who gave these judgements: "the oracle annotator", "people (2 annotators)", or "people and the oracle
    annotator (30 and 18)"."""
    counts = Counter(ORACLE_NAME if name == ORACLE_NAME else "people" for name in annotators)
    people = len({name for name in annotators if name != ORACLE_NAME})
    if not counts["people"]:
        return "the oracle annotator"
    by_people = f"people ({people} annotator{'s' if people != 1 else ''})"
    if not counts[ORACLE_NAME]:
        return by_people
    return f"people and the oracle annotator ({counts['people']} and {counts[ORACLE_NAME]})"


def pass_rate_changes(store: Store, job: Job, rounds: list[dict]) -> list[str]:
    """Each of the loop's reward functions' held-out pass rate on the version its first round trained from and on its
    newest version, with their intervals and the change's."""
    labels = function_labels(job.config)
    if not labels:
        return []
    parents = {policy.id: policy.parent_id for policy in list_policies(store)}
    start = parents.get(rounds[0]["policy_id"])
    before = pass_rates(store, start, labels) if start is not None else {}
    return [change_text(before.get(label), after)
            for label, after in pass_rates(store, rounds[-1]["policy_id"], labels).items()]


def job_summary(store: Store, job: Job) -> str | None:
    """The loop job's result in one line; None for another kind of job, or a loop that made no version yet."""
    if job.kind != "loop":
        return None
    rounds = list_rounds(store, job.id)
    if not rounds:
        return None
    names = version_names(list_policies(store))
    made = [names[r["policy_id"]] for r in rounds if r["policy_id"] in names]
    span = made[0] if len(made) == 1 else f"{made[0]}–{made[-1]}"
    parts = [f"made {span} in {len(rounds)} round{'s' if len(rounds) != 1 else ''}"]
    newest = next((v for v in winrate_report(store, rounds=0).versions if v.policy_id == rounds[-1]["policy_id"]), None)
    if newest is not None and newest.judgements:
        judges = [j.annotator for j in winrate_judgements(store) if j.policy_id == newest.policy_id]
        parts.append(f"{newest.name} vs SFT {newest.rate:.0%} [{newest.low:.0%}, {newest.high:.0%}] "
                     f"({newest.judgements} judgements by {who_judged(judges)})")
    oracle = sorted((r["step"], r["value"]) for r in read_metrics(store, job.id, names=["round/oracle_score"]))
    if len(oracle) > 1:
        parts.append(f"oracle score {oracle[0][1]:.2f} → {oracle[-1][1]:.2f}")
    parts.extend(pass_rate_changes(store, job, rounds))
    warnings = list_warnings(store, job.id)
    parts.append(f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}" if warnings else "no warnings")
    return f"job {job.id} (loop) {job.status.value}: " + " · ".join(parts)
