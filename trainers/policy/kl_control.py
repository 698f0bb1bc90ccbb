"""KL coefficient controllers: a fixed β, or the adaptive controller of Ziegler et al. 2019 (section 2.2).

The adaptive controller moves β in proportion to how far the measured KL is from its target:
e = clip(KL / target - 1, -0.2, 0.2);  β <- β · (1 + e · n_steps / horizon).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FixedKLController:
    """β stays at its initial value."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> float:
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


@dataclass
class AdaptiveKLController:
    """β rises when the sequence KL is above `target` and falls when below, at a rate set by `horizon` episodes."""

    value: float
    target: float
    horizon: int

    def update(self, current_kl: float, n_steps: int) -> float:
        """Adjust β after an iteration of `n_steps` episodes whose mean sequence KL was `current_kl`; returns β."""
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])


def make_kl_controller(init_kl_coef: float, target_kl: float | None,
                       horizon: int) -> FixedKLController | AdaptiveKLController:
    """The adaptive controller when a target KL is given, else a fixed coefficient."""
    if target_kl is None:
        return FixedKLController(init_kl_coef)
    return AdaptiveKLController(init_kl_coef, target_kl, horizon)
