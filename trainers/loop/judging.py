"""A round's labels from a judge model (`annotator: judge`): RLAIF, or hybrid with `judge_threshold`.

The judge answers the round's pairs (both orders each, `labeling.judges.judge`) until every label the round wants is
either a verdict or a person's label: a verdict at least `judge_threshold` sure trains and takes its pair out of
people's queue; an unsure one leaves its pair to people (`judge_people`: the Label tab's annotators, whom the loop waits
for, or the oracle in benchmarks); a failed one (timeout, refusal, unparseable) is counted and another pair is judged in
its place. A round's count is people's labels plus the verdicts that train. After the round's reward model, the
judge's agreement with people's labels is checked (`judge_agreement_findings`).
"""

from __future__ import annotations

import time

from labeling.judges.judge import JudgeTemplate, judge_queue
from labeling.judges.judge_agreement import MIN_ITEMS_FOR_WARNING, store_agreement
from storage import Store
from storage import jobs as job_rows
from storage.judge_verdicts import round_training_verdicts, round_unsure_verdicts, unjudged_pairs

from ..models.judges import open_judge
from .config import Annotator, LoopConfig
from .diagnostics import Finding
from .ranking_round import round_judgements

JUDGE_AGREEMENT_RULE = "judge_agreement_low"
WINRATE_JUDGED = 10_000  # the most queued pairs of a round looked through for its win-rate pairs
PEOPLE_POLL_S = 2.0  # how often a hybrid round looks for people's labels (as trainers.loop.rounds does)


def round_labels(store: Store, config: LoopConfig, round: int, job_id: int | None = None) -> int:
    """The labels round `round` counts (with `job_id`: on the items that loop job queued): people's (win-rate pairs
    aside) and their ranking verdicts, plus the judge's verdicts that train."""
    people = round_judgements(store, round, job_id)
    return people + (round_training_verdicts(store, round, job_id) if config.annotator == Annotator.JUDGE else 0)


def collect_judge_labels(loop, index: int, g: int, seed: int) -> None:
    """Round g's labels by the judge, then by people for the pairs it was unsure of (see the module's docstring)."""
    config, store, wanted, job = loop.config, loop.store, loop.labels_wanted(index), loop.job.id
    client = open_judge(config.judge, store.data_dir, config.judge_model, config.judge_key_env, config.judge_timeout,
                        config.judge_max_mb)
    template = JudgeTemplate.load(config.judge_template)
    while (missing := wanted - round_labels(store, config, g, job) - round_unsure_verdicts(store, client.name, g,
                                                                                           job)) > 0:
        pending = unjudged_pairs(store, client.name, missing, round=g, winrate=False, job_id=job)
        if not pending:
            break
        loop.step(index, f"judging pairs ({wanted - missing}/{wanted})", 0.1)
        done = judge_queue(store, client, template, len(pending), trains=True, min_confidence=config.judge_threshold,
                           pending=pending)
        loop.log(f"round {index + 1}: {done.line()}")
        job_rows.add_log(store, loop.job.id, f"round {index + 1}: {done.line()}")
    winrate = [pair for pair in unjudged_pairs(store, client.name, WINRATE_JUDGED, round=g, job_id=job)
               if pair.winrate]
    if winrate:  # the round's win-rate pairs too: evaluation, never training, reported beside people's
        loop.step(index, f"judging {len(winrate)} win-rate pairs", 0.1)
        judge_queue(store, client, template, len(winrate), pending=winrate)
    if config.judge_people == Annotator.ORACLE:
        from labeling.queue.synthetic import OracleAnnotator

        oracle = OracleAnnotator.from_spec(config.oracle, noise=config.oracle_noise, seed=seed)
        while (missing := wanted - round_labels(store, config, g, job)) > 0 and oracle.label(store, missing,
                                                                                             job_id=job):
            pass
        return
    while (have := round_labels(store, config, g, job)) < wanted:
        loop.step(index, f"waiting for people's labels on the pairs the judge was unsure of ({have}/{wanted})",
                  0.1 + 0.2 * have / wanted)
        time.sleep(PEOPLE_POLL_S)


def judge_agreement_findings(store: Store, config: LoopConfig, round: int) -> list[Finding]:
    """A warning when the judge labels for training and agrees with people's labels (all rounds so far, at least
    MIN_ITEMS_FOR_WARNING items both judged) less often than `judge_min_agreement`."""
    if config.annotator != Annotator.JUDGE:
        return []
    found = []
    for figures in store_agreement(store, by_round=False):
        if figures.items >= MIN_ITEMS_FOR_WARNING and figures.agreement < config.judge_min_agreement:
            found.append(Finding(
                JUDGE_AGREEMENT_RULE, f"the judge {figures.judge} disagrees with people",
                f"{figures.line()}, below judge_min_agreement {config.judge_min_agreement:g}, while its verdicts "
                "train the reward model",
                "read the pairs where they differ (Data tab), raise judge_threshold so people label more, improve the "
                "judge template or use a stronger judge", round=round))
    return found
