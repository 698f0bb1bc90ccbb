"""Policy versions: checkpoint directories, each with its parent and the round that produced it."""

from __future__ import annotations

import time

from .db import Store
from .errors import Conflict, NotFound
from .settings import REWARD_BASE_SETTING, get_setting
from .types import Policy


def add_policy(store: Store, path: str, parent_id: int | None = None, round: int = 0, note: str | None = None) -> int:
    with store.write() as db:
        cursor = db.execute(
            "INSERT INTO policies (path, parent_id, round, created, note) VALUES (?, ?, ?, ?, ?)",
            [str(path), parent_id, round, time.time(), note],
        )
        return cursor.lastrowid


def set_trained_from(store: Store, policy_id: int, trained_from: int) -> None:
    """Record which version `policy_id` was trained from when it is a root of its own (an SFT version that became the
    KL reference); `root_policy` does not follow this link."""
    with store.write() as db:
        db.execute("UPDATE policies SET trained_from = ? WHERE id = ?", [trained_from, policy_id])


def make_root(store: Store, policy_id: int) -> None:
    """Make version `policy_id` a root of its own (`root_policy` stops at it), its parent kept as `trained_from`;
    Conflict when it already is a root."""
    with store.write() as db:
        row = db.execute("SELECT parent_id FROM policies WHERE id = ?", [policy_id]).fetchone()
        if row is None:
            raise NotFound(f"policy version {policy_id} does not exist; see the list of policy versions")
        if row[0] is None:
            raise Conflict(f"policy id {policy_id} is already a root; nothing to change")
        db.execute("UPDATE policies SET trained_from = parent_id, parent_id = NULL WHERE id = ?", [policy_id])


def trained_from(store: Store, policy_id: int) -> int | None:
    """The version `policy_id` was trained from (its parent, or for a root of its own the `trained_from` link)."""
    row = store.db().execute("SELECT coalesce(parent_id, trained_from) FROM policies WHERE id = ?",
                             [policy_id]).fetchone()
    return row[0] if row else None


def _row(row: dict) -> Policy:
    return Policy(row["id"], row["path"], row["parent_id"], row["round"], row["created"], row["note"])


def get_policy(store: Store, policy_id: int) -> Policy:
    rows = list(store.db().query("SELECT * FROM policies WHERE id = ?", [policy_id]))
    if not rows:
        raise NotFound(f"policy version {policy_id} does not exist; see the list of policy versions")
    return _row(rows[0])


def latest_policy(store: Store) -> Policy | None:
    rows = list(store.db().query("SELECT * FROM policies ORDER BY id DESC LIMIT 1"))
    return _row(rows[0]) if rows else None


def list_policies(store: Store) -> list[Policy]:
    return [_row(r) for r in store.db().query("SELECT * FROM policies ORDER BY id")]


def root_policy(store: Store, policy: Policy) -> Policy:
    """The first version of `policy`'s lineage (parent after parent): the SFT policy PPO stays close to."""
    seen = {policy.id}
    while policy.parent_id is not None and policy.parent_id not in seen:
        policy = get_policy(store, policy.parent_id)
        seen.add(policy.id)
    return policy


def reward_base_path(store: Store, policy: Policy) -> str:
    """The folder a reward model starts from: the project's reward base (`init --reward-base`), else the SFT root of
    `policy`'s lineage."""
    return get_setting(store, REWARD_BASE_SETTING) or root_policy(store, policy).path
