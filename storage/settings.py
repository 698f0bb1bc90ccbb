"""Project settings (guidelines, overlap, reservation TTL, selector, reward base): JSON values under string keys."""

from __future__ import annotations

import json
from typing import Any

from .db import Store
from .types import Selector

REWARD_BASE_SETTING = "reward_base"  # the folder reward models start from (init --reward-base); None: the SFT policy

DEFAULTS: dict[str, Any] = {
    "guidelines": (
        "Pick the response that is **more positive about the movie** while still reading as a natural review.\n\n"
        "- **Tie**: equally good. **Both bad**: neither is acceptable. **Skip**: you cannot judge."
    ),
    "overlap": 1,
    "reservation_ttl_s": 600,
    "selector": Selector.RANDOM.value,
}


def get_setting(store: Store, key: str) -> Any:
    row = store.db().execute("SELECT value FROM settings WHERE key = ?", [key]).fetchone()
    return json.loads(row[0]) if row else DEFAULTS.get(key)


def set_setting(store: Store, key: str, value: Any) -> None:
    with store.write() as db:
        db.execute("INSERT INTO settings (key, value) VALUES (?, ?) "
                   "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                   [key, json.dumps(value)])
