"""The KL controllers (trainers/policy/kl_control.py) by hand: the adaptive β moves by the clipped error times the
episodes over the horizon; a fixed β stays; a state dict restores a controller."""

import pytest

from trainers.policy.kl_control import AdaptiveKLController, make_kl_controller


def test_adaptive_kl_controller_by_hand():
    controller = AdaptiveKLController(0.1, target=6.0, horizon=1000)
    # KL 9 -> error clip(0.5) = 0.2 -> beta * (1 + 0.2 * 100 / 1000) = 0.102
    assert controller.update(9.0, n_steps=100) == pytest.approx(0.102)
    # KL 4.5 -> error -0.25 clipped to -0.2 -> 0.102 * (1 - 0.02)
    assert controller.update(4.5, n_steps=100) == pytest.approx(0.102 * 0.98)
    # KL 6.6 -> error 0.1 -> * (1 + 0.1 * 0.1)
    assert controller.update(6.6, n_steps=100) == pytest.approx(0.102 * 0.98 * 1.01)
    fixed = make_kl_controller(0.05, None, 1000)
    assert fixed.update(100.0, n_steps=100) == 0.05
    restored = make_kl_controller(0.1, 6.0, 1000)
    restored.load_state_dict(controller.state_dict())
    assert restored.value == controller.value
