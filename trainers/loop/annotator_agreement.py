"""How the reward model agrees with each annotator, computed in the worker (it needs torch) for the Samples tab.

For every current label on one of the newest reward model's validation pairs (so the model never trained on it) that
prefers one response (first or second; ties, both-bad and skips say nothing here), the model (its ensemble's mean
P(first preferred), as each member scored it when it was trained, else scored here) agrees when it prefers the same
response.
Per annotator the share of agreeing labels is stored as metric `annotator/<name>/rm_agreement`, and the number of
labels compared as `annotator/<name>/rm_labels`, under the reward job at step = the reward model's round.

    record_annotator_agreement(store, job_id)          # after train_reward_model(..., job_id=job_id)
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from storage import Store
from storage.labels import training_labels
from storage.metrics import log_metrics
from storage.reward_models import latest_reward_models
from storage.types import Outcome

from ..reward.scorer import INFO_FILE, RewardScorer


def record_annotator_agreement(store: Store, job_id: int, scorer: RewardScorer | None = None) -> dict[str, float]:
    """Score the annotators' decided labels on the newest reward model's validation pairs with that model and store
    the agreement per annotator; returns {annotator: agreement}. Nothing is stored when no reward model or no decided
    validation label exists."""
    members = latest_reward_models(store)
    held_out = validation_pair_ids(members[0].path) if members else set()
    decided = [p for p in training_labels(store)
               if p.outcome in (Outcome.FIRST, Outcome.SECOND) and p.pair_id in held_out]
    if not members or not decided:
        return {}
    stored = stored_first_probabilities([m.path for m in members])
    if scorer is None and all(p.pair_id in stored for p in decided):
        first_preferred = [stored[p.pair_id] > 0.5 for p in decided]
    else:
        scorer = scorer or RewardScorer.from_store(store)
        probabilities = scorer.preference_probabilities([p.prompt for p in decided], [p.first for p in decided],
                                                        [p.second for p in decided]).mean(0)
        known = ~probabilities.isnan()  # NaN: a pair too long for the reward model's context (it trained on none)
        decided = [p for p, fits in zip(decided, known.tolist(), strict=True) if fits]
        first_preferred = (probabilities[known] > 0.5).tolist()
    agree, total = defaultdict(int), defaultdict(int)
    for pair, model_first in zip(decided, first_preferred, strict=True):
        total[pair.annotator] += 1
        agree[pair.annotator] += model_first == (pair.outcome is Outcome.FIRST)
    agreement = {name: agree[name] / total[name] for name in total}
    values = {}
    for name in total:
        values[f"annotator/{name}/rm_agreement"] = agreement[name]
        values[f"annotator/{name}/rm_labels"] = total[name]
    log_metrics(store, job_id, members[0].round, values)
    return agreement


def validation_pair_ids(model_dir: str) -> set[int]:
    """The pairs a reward model was validated on, never trained on (from its reward_info.json; none when absent)."""
    info = Path(model_dir) / INFO_FILE
    return set(json.loads(info.read_text()).get("val_pair_ids", [])) if info.exists() else set()


def stored_first_probabilities(model_dirs: list[str]) -> dict[int, float]:
    """{pair id: the members' mean P(first preferred)} for the validation pairs every member scored when it was
    trained (`val_first_probability` in reward_info.json; models trained before it have none)."""
    stored = [json.loads((Path(d) / INFO_FILE).read_text()).get("val_first_probability", {}) for d in model_dirs
              if (Path(d) / INFO_FILE).exists()]
    if len(stored) < len(model_dirs):
        return {}
    return {int(pair): sum(s[pair] for s in stored) / len(stored) for pair in set.intersection(*map(set, stored))}
