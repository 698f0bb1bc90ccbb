"""Policy versions with evaluation samples, for the win-rate tests (tests/test_winrate.py, the Leaderboard tab's
browser test and the winrate_below_sft warning's test)."""

from storage.generations import EVAL_SOURCE, NewGeneration, add_generations
from storage.policies import add_policy
from storage.prompts import add_prompts, list_prompts

HELD_OUT = 16


def versions(store, count: int = 2, samples: int = 2) -> list[int]:
    """An SFT root and `count` versions after it, each with `samples` evaluation samples of 16 held-out prompts
    (`p<prompt>-v<version>-s<k>`, token counts growing with the version)."""
    add_prompts(store, [f"held-out question {k}" for k in range(HELD_OUT)], heldout=True)
    add_prompts(store, ["a training prompt"])
    ids = [add_policy(store, "/models/sft", round=0)]
    for r in range(1, count + 1):
        ids.append(add_policy(store, f"/models/v{r}", parent_id=ids[-1], round=r))
    for v, policy_id in enumerate(ids):
        add_generations(store, [NewGeneration(p.id, f"p{p.id}-v{v}-s{k}", policy_id=policy_id, token_count=10 + v,
                                              source=EVAL_SOURCE)
                                for p in list_prompts(store, heldout=True) for k in range(samples)])
    return ids


def by_version(text: str) -> float:
    """An oracle preferring newer versions: the `v<k>` in an evaluation sample's text (0 for other texts)."""
    return float(text.split("-v")[1].split("-")[0]) if "-v" in text else 0.0
