"""The studio's store: the only package with SQL. Typed functions over one SQLite file; see db.Store."""

import sys

if "pandas" not in sys.modules:  # sqlite-utils imports pandas only to type its Timestamps, which the studio never
    sys.modules["pandas"] = None  # stores: ~65 MB in every process, training workers included, for nothing
    try:
        import sqlite_utils  # noqa: F401
    finally:
        del sys.modules["pandas"]

from .db import Store  # noqa: E402
from .errors import (
    Conflict,
    InvalidInput,
    NotAStudioStore,
    NotFound,
    StoreFromNewerVersion,
    StoreUnavailable,
    StudioError,
)
from .types import Generation, Job, JobStatus, Label, Outcome, Pair, Policy, Prompt, RewardModel

__all__ = [
    "Store", "StudioError", "NotAStudioStore", "StoreFromNewerVersion", "StoreUnavailable", "NotFound",
    "InvalidInput", "Conflict", "Outcome", "JobStatus", "Prompt", "Policy", "Generation", "Pair", "Label",
    "RewardModel", "Job",
]
