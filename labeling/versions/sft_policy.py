"""Making a version the SFT policy by hand (`python app.py set-root vK`, the Train tab's button): what later
versions stay close to (the KL term, DPO's reference) and win-rate pairs compare against.

    line = set_root(store, "v3")   # NotFound, Conflict: one line
"""

from __future__ import annotations

from storage import Store
from storage.errors import Conflict, NotFound
from storage.policies import get_policy, list_policies, make_root

from .winrate import version_names, version_number


def set_root(store: Store, version: str) -> str:
    """Make `version` (`vK` or `K`) a root; returns the line saying so. NotFound, Conflict: one line."""
    number = version_number(version or "")
    names = version_names(list_policies(store))
    policy_id = next((pid for pid, name in names.items() if name == f"v{number}"), None)
    if policy_id is None:
        known = f"v0–v{len(names) - 1}" if names else "none yet"
        raise NotFound(f"no policy version {version!r} (versions: {known}); name one as vK, e.g. v1")
    if get_policy(store, policy_id).parent_id is None:
        raise Conflict(f"v{number} is already an SFT policy; nothing to change")
    make_root(store, policy_id)
    return (f"v{number} is now the SFT policy: later versions trained from it stay close to it (the KL term, DPO's "
            "reference) and win-rate pairs compare against it")
