"""The studio's store: the only package with SQL. Typed functions over one SQLite file; see db.Store."""

from .db import Store
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
