"""The policy version a loop's first round trains from: its `start_version` (`python app.py loop --from v3`), else the
store's newest version. Checked before any job row is written (an unknown version, a missing folder: one line) and
said in the line a loop starts with. Later rounds train the version the round before made. The KL reference, DPO's
reference and the SFT side of win-rate pairs are the start version's SFT root (`storage.policies.root_policy`), as
for any run that starts from it; a LoRA version's adapter is continued (`trainers.jobs.policy_job`). Torch-free.

    starting from v1 (store round 1, the store's newest version, trained from v0; KL reference: v0, the SFT policy);
    to start from another version: --from vK (v0–v1)
"""

from __future__ import annotations

from pathlib import Path

from labeling.versions.winrate import version_names
from storage import Store
from storage.errors import InvalidInput
from storage.policies import list_policies, root_policy
from storage.types import Policy

from .config import LoopConfig


def start_policy(store: Store, config: LoopConfig, before: float | None = None) -> Policy | None:
    """The version `config` starts from (None: the store has no policy): its `start_version`, else the newest (made
    before `before`, a job's creation: versions other jobs made since are not its start); InvalidInput, one line, for
    a version the store does not have or whose folder is gone."""
    policies = list_policies(store)
    if config.start_version is None or not policies:
        earlier = [p for p in policies if before is None or p.created < before] or policies[:1]
        return earlier[-1] if earlier else None
    names = version_names(policies)
    policy = next((p for p in policies if names[p.id] == config.start_version), None)
    if policy is None:
        raise InvalidInput(f"the store has no policy version {config.start_version}, only {span(policies)}; start "
                           "from one of them")
    if not Path(policy.path).is_dir():
        raise InvalidInput(f"the folder of policy version {config.start_version} is missing ({policy.path}); restore "
                           "it, or start from another version")
    return policy


def span(policies: list[Policy]) -> str:
    """The store's versions in a few characters: `v0`, or `v0–v3`."""
    return "v0" if len(policies) == 1 else f"v0–v{len(policies) - 1}"


def start_line(store: Store, config: LoopConfig) -> str:
    """Which version the loop trains first, where it came from and its KL reference; how to start from another."""
    policies = list_policies(store)
    names, start = version_names(policies), start_policy(store, config)
    root = root_policy(store, start)
    where = [f"store round {start.round}"] if start.id != root.id else ["the SFT policy"]
    if start.id == policies[-1].id:
        where.append("the store's newest version")
    if start.id != root.id:
        where.append(f"trained from {names[start.parent_id]}; the SFT policy: {names[root.id]}")
    line = f"starting from {names[start.id]} ({', '.join(where)})"
    return line if len(policies) == 1 else f"{line}; to start from another version: --from vK ({span(policies)})"
