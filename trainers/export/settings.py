"""The settings a version was made with, as its export reports them: the run's own settings file in its folder (PPO
and GRPO's `ppo_config.json`, DPO's `dpo_config.json`, SFT's `sft_config.json`), and the sampling settings its
generation config carries (the run's where it sampled, else the project's preset).

    settings = version_settings(store, policy)   # {"made_by": "PPO", "run": {...}, "temperature": 1.0, ...}
"""

from __future__ import annotations

import json
from pathlib import Path

from storage import Store
from storage.types import Policy

from ..loop.presets import project_preset
from ..policy.checkpoint import CONFIG_FILE as POLICY_SETTINGS
from ..policy.dpo import CONFIG_FILE as DPO_SETTINGS
from ..policy.sft import CONFIG_FILE as SFT_SETTINGS

SAMPLING = ("temperature", "top_p", "top_k", "response_length")


def run_settings(folder: Path) -> tuple[str, dict]:
    """What made the version in `folder` (`PPO`, `GRPO`, `DPO`, `SFT`; `imported` for a model a project started
    from) and that run's settings (empty when there are none)."""
    for file, kind in ((POLICY_SETTINGS, None), (DPO_SETTINGS, "DPO"), (SFT_SETTINGS, "SFT")):
        if (folder / file).is_file():
            settings = json.loads((folder / file).read_text())
            return kind or str(settings.get("algorithm", "ppo")).upper(), settings
    return "imported", {}


def version_settings(store: Store, policy: Policy) -> dict:
    """`made_by` and `run` (from `run_settings`), and the sampling settings of `SAMPLING`."""
    made_by, run = run_settings(Path(policy.path))
    preset = project_preset(store).config
    sampling = {name: run.get(name, getattr(preset, name)) for name in SAMPLING}
    return {"made_by": made_by, "run": run, **sampling}
