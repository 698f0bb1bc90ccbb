"""GRPO math against hand-computed cases: group advantages (Bessel's std, equal rewards give 0), the clipped
surrogate with β·k3 inside the loss, sequence vs token normalisation, padding that must not count."""

import math

import pytest
import torch

from trainers.policy.grpo_math import group_advantages, grpo_loss, sequence_mean, zero_variance_share
from trainers.policy.ppo_math import kl_estimate

PAD = 1e6  # a value on padding positions that would wreck any result it leaked into


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_group_advantages_use_bessels_std_and_equal_rewards_give_zero():
    # group 1: [0, 0, 2, 2], mean 1, deviations ±1, Bessel's variance 4/3 (population variance would be 1)
    # group 2: all 5: centred 0, std 0 -> 0 / (0 + eps) = 0, no NaN
    advantages = group_advantages(t([0.0, 0.0, 2.0, 2.0, 5.0, 5.0, 5.0, 5.0]), group_size=4, eps=1e-4)
    a = 1 / (2 / math.sqrt(3) + 1e-4)
    torch.testing.assert_close(advantages, t([-a, -a, a, a, 0.0, 0.0, 0.0, 0.0]).float())
    assert advantages.shape == (8,) and bool(torch.isfinite(advantages).all())


def test_group_advantages_standardise_each_group_on_its_own():
    # [1, 2, 3]: mean 2, Bessel std 1; [10, 30, 20]: mean 20, std 10
    advantages = group_advantages(t([1.0, 2.0, 3.0, 10.0, 30.0, 20.0]), group_size=3, eps=0.0)
    torch.testing.assert_close(advantages, t([-1.0, 0.0, 1.0, -1.0, 1.0, 0.0]).float())
    with pytest.raises(AssertionError, match="groups of 4"):
        group_advantages(t([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), group_size=4)


def test_zero_variance_share_counts_groups_of_equal_rewards():
    assert zero_variance_share(t([1.0, 1.0, 2.0, 3.0, 0.0, 0.0]), group_size=2).item() == pytest.approx(2 / 3)


def test_sequence_mean_averages_each_row_then_the_rows():
    # row 0: (1 + 3) / 2 = 2; row 1: 6 / 1 = 6; mean 4 (a token mean would give 10 / 3)
    assert sequence_mean(t([[1.0, 3.0], [6.0, PAD]]), t([[1, 1], [1, 0]])).item() == 4.0


# Two responses: row 0 with two real tokens (advantage +1), row 1 with one real token then padding (advantage -2).
# Per-token ratios π_θ/π_old = e^0.5 (first tokens) and 1 (row 0's second token); clip range 0.2.
#   row 0, token 0: max(-1·e^0.5, -1·1.2) = -1.2 (the clipped term wins)
#   row 0, token 1: max(-1, -1) = -1
#   row 1, token 0: max(2·e^0.5, 2·1.2) = 2e^0.5 = 3.29744 (unclipped)
LOGPROBS = [[-0.5, -1.0], [-0.5, -1e9]]  # the pad token's log-prob is about -1e9 (ruled out when sampling)
OLD = [[-1.0, -1.0], [-1.0, 0.0]]
MASK = [[1, 1], [1, 0]]
ADVANTAGES = [1.0, -2.0]


def loss_of(ref_logprobs, beta, loss_norm, logprobs=None):
    logprobs = t(LOGPROBS) if logprobs is None else logprobs
    return grpo_loss(logprobs, t(OLD), ref_logprobs, t(ADVANTAGES), t(MASK), clip_range=0.2, beta=beta,
                     loss_norm=loss_norm)


def test_clipped_surrogate_with_sequence_and_token_normalisation():
    ref = t([[-0.5, -1.0], [-0.5, 0.0]])  # π_ref = π_θ on real tokens: k3 = 0
    e = math.exp(0.5)
    loss, clip_fraction, kl = loss_of(ref, beta=0.5, loss_norm="sequence")
    assert loss.item() == pytest.approx(((-1.2 - 1.0) / 2 + 2 * e) / 2)  # 1.09872
    assert clip_fraction.item() == pytest.approx(1 / 3) and kl.item() == 0.0
    loss, _, _ = loss_of(ref, beta=0.5, loss_norm="token")
    assert loss.item() == pytest.approx((-1.2 - 1.0 + 2 * e) / 3)  # 0.36581


def test_k3_to_the_reference_is_inside_the_loss():
    # row 0, token 0: π_ref = 2 π_θ, so u = 2 and k3 = u - log u - 1 = 1 - log 2; every other real token: k3 = 0
    ref = t([[-0.5 + math.log(2), -1.0], [-0.5, 0.0]])
    k3 = 1 - math.log(2)
    e = math.exp(0.5)
    loss, _, kl = loss_of(ref, beta=0.5, loss_norm="sequence")
    assert loss.item() == pytest.approx(((-1.2 + 0.5 * k3 - 1.0) / 2 + 2 * e) / 2)
    assert kl.item() == pytest.approx(k3 / 3)  # the mean over the 3 real tokens
    assert loss_of(ref, beta=0.0, loss_norm="sequence")[0].item() == pytest.approx(((-1.2 - 1.0) / 2 + 2 * e) / 2)


def test_gradients_by_hand_and_none_through_padding():
    logprobs = t(LOGPROBS).requires_grad_()
    loss, _, _ = loss_of(t([[-0.5, -1.0], [-0.5, 0.0]]), beta=0.5, loss_norm="sequence", logprobs=logprobs)
    loss.backward()
    # d/dlogprob of -A·ρ·(1/row length)·(1/rows): row 0 token 1: -1·1/4; row 1 token 0: 2·e^0.5/2;
    # row 0 token 0 is clipped (no gradient through the ratio); k3's gradient is 0 where π_θ = π_ref
    expected = t([[0.0, -0.25], [math.exp(0.5), 0.0]])
    torch.testing.assert_close(logprobs.grad, expected)


def test_k3_is_never_negative_and_zero_when_the_policy_is_the_reference():
    torch.manual_seed(0)
    logprobs, ref = -torch.rand(4, 6, dtype=torch.float64) * 3, -torch.rand(4, 6, dtype=torch.float64) * 3
    assert bool((kl_estimate(logprobs, ref, "k3") >= 0).all())
    mask = (torch.rand(4, 6) > 0.3).double()
    mask[:, 0] = 1
    zero = torch.zeros(4, dtype=torch.float64)
    for norm in ("sequence", "token"):  # no advantage: the loss is β·k3 alone
        loss, _, kl = grpo_loss(logprobs, logprobs, ref, zero, mask, clip_range=0.2, beta=1.0, loss_norm=norm)
        assert loss.item() > 0 and kl.item() > 0
        loss, _, kl = grpo_loss(logprobs, logprobs, logprobs, zero, mask, clip_range=0.2, beta=1.0, loss_norm=norm)
        assert loss.item() == 0.0 and kl.item() == 0.0


def test_unknown_loss_norm_is_refused():
    with pytest.raises(ValueError, match="unknown loss_norm 'mean'; use sequence or token"):
        loss_of(t([[-0.5, -1.0], [-0.5, 0.0]]), beta=0.1, loss_norm="mean")
