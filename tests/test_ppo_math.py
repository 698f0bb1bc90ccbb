"""PPO math against hand-computed cases: two or three tokens, padding that must not count, k1/k2/k3."""

import math

import pytest
import torch

from trainers.policy.ppo_math import (
    compute_gae,
    entropy_from_logits,
    explained_variance,
    kl_estimate,
    logprobs_from_logits,
    masked_mean,
    policy_loss,
    sampler_logprobs,
    sampling_logits,
    token_rewards,
    value_loss,
    whiten,
)

PAD = 1e6  # a value on padding positions that would wreck any result it leaked into


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_masked_mean_ignores_padding():
    assert masked_mean(t([[1.0, 3.0, PAD]]), t([[1, 1, 0]])).item() == 2.0


def test_gae_two_tokens_then_padding():
    # t=1: delta = 2 + 0 - 1 = 1, A1 = 1;  t=0: delta = 1 + 1.0 - 0.5 = 1.5, A0 = 1.5 + 0.5 * 1 = 2
    rewards, values, mask = t([[1.0, 2.0, PAD]]), t([[0.5, 1.0, PAD]]), t([[1, 1, 0]])
    advantages, returns = compute_gae(rewards, values, mask, gamma=1.0, lam=0.5)
    torch.testing.assert_close(advantages, t([[2.0, 1.0, 0.0]]))
    torch.testing.assert_close(returns, t([[2.5, 2.0, 0.0]]))


def test_gae_with_discount_and_rows_of_different_lengths():
    # row 0, gamma 0.5, lam 1: A1 = 2 - 1 = 1; A0 = (1 + 0.5 * 1 - 0.5) + 0.5 * 1 = 1.5
    # row 1 has one real token: A0 = 3 - 2 = 1 (the value of the padding slot after it is not bootstrapped)
    rewards = t([[1.0, 2.0, 0.0], [3.0, PAD, PAD]])
    values = t([[0.5, 1.0, 0.0], [2.0, PAD, PAD]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    advantages, returns = compute_gae(rewards, values, mask, gamma=0.5, lam=1.0)
    torch.testing.assert_close(advantages, t([[1.5, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    torch.testing.assert_close(returns, t([[2.0, 2.0, 0.0], [3.0, 0.0, 0.0]]))


def test_gae_matches_the_sum_of_discounted_deltas():
    torch.manual_seed(0)
    rewards, values = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    lengths = [5, 3, 1]
    mask = t([[1.0 if j < n else 0.0 for j in range(5)] for n in lengths])
    gamma, lam = 0.9, 0.8
    advantages, _ = compute_gae(rewards, values, mask, gamma, lam)
    for b, n in enumerate(lengths):
        v = [values[b, j].item() for j in range(n)] + [0.0]
        deltas = [rewards[b, j].item() + gamma * v[j + 1] - v[j] for j in range(n)]
        for s in range(n):
            expected = sum((gamma * lam) ** (j - s) * deltas[j] for j in range(s, n))
            assert advantages[b, s].item() == pytest.approx(expected)


def test_kl_estimators_by_hand():
    logprobs, ref_logprobs = t([[-1.0, -2.0]]), t([[-2.0, -1.0]])  # log p/q = +1, -1
    torch.testing.assert_close(kl_estimate(logprobs, ref_logprobs, "k1"), t([[1.0, -1.0]]))
    torch.testing.assert_close(kl_estimate(logprobs, ref_logprobs, "k2"), t([[0.5, 0.5]]))
    # k3 = (q/p - 1) - log(q/p): e^-1 - 1 + 1 and e^1 - 1 - 1
    torch.testing.assert_close(kl_estimate(logprobs, ref_logprobs, "k3"), t([[math.exp(-1), math.e - 2]]))


def test_kl_estimators_vanish_when_policies_agree():
    same = t([[-0.3, -2.5]])
    for kind in ("k1", "k2", "k3"):
        torch.testing.assert_close(kl_estimate(same, same, kind), t([[0.0, 0.0]]))


def test_kl_estimator_unknown_kind():
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_estimate(t([[0.0]]), t([[0.0]]), "k4")


def test_whiten_over_real_tokens_only():
    values, mask = t([[1.0, 2.0], [3.0, PAD]]), t([[1, 1], [1, 0]])
    # mean 2, unbiased variance ((1 + 0 + 1) / 2) = 1
    torch.testing.assert_close(whiten(values, mask), t([[-1.0, 0.0], [1.0, 0.0]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(whiten(values, mask, shift_mean=False), t([[1.0, 2.0], [3.0, 0.0]]), atol=1e-6, rtol=0)


def test_token_rewards_put_the_score_on_the_last_real_token():
    scores = t([2.0, -1.0])
    kl = t([[0.1, 0.2, 0.3], [0.5, 0.7, 0.9]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    rewards = token_rewards(scores, kl, mask, kl_coef=0.5)
    torch.testing.assert_close(rewards, t([[-0.05, -0.1 + 2.0, 0.0], [-0.25 - 1.0, 0.0, 0.0]]))


def test_policy_loss_clips_both_directions_and_ignores_padding():
    logprobs = t([[math.log(1.5), math.log(0.5), 5.0]])
    old = t([[0.0, 0.0, 0.0]])
    advantages = t([[1.0, -1.0, PAD]])
    mask = t([[1, 1, 0]])
    loss, clip_fraction, approx_kl = policy_loss(logprobs, old, advantages, mask, clip_range=0.2)
    # token 0: max(-1.5, -1.2) = -1.2 (clipped); token 1: max(0.5, 0.8) = 0.8 (clipped)
    assert loss.item() == pytest.approx((-1.2 + 0.8) / 2)
    assert clip_fraction.item() == 1.0
    # k3: (1.5 - 1) - ln 1.5 and (0.5 - 1) - ln 0.5
    assert approx_kl.item() == pytest.approx(((0.5 - math.log(1.5)) + (-0.5 + math.log(2))) / 2)


def test_policy_loss_keeps_the_pessimistic_unclipped_term():
    # ratio 0.5 with A = +1: max(-0.5, -0.8) = -0.5, unclipped; ratio 1.1 inside the range
    logprobs = t([[math.log(0.5), math.log(1.1)]])
    loss, clip_fraction, _ = policy_loss(logprobs, t([[0.0, 0.0]]), t([[1.0, 1.0]]), t([[1, 1]]), clip_range=0.2)
    assert loss.item() == pytest.approx((-0.5 - 1.1) / 2)
    assert clip_fraction.item() == 0.0


def test_policy_loss_gradient_is_zero_where_clipped():
    logprobs = t([[math.log(1.5), math.log(1.1)]]).requires_grad_()
    loss, _, _ = policy_loss(logprobs, t([[0.0, 0.0]]), t([[1.0, 1.0]]), t([[1, 1]]), clip_range=0.2)
    loss.backward()
    # d/dlogp of -A * ratio / 2 = -ratio / 2 on the unclipped token; 0 on the clipped one
    torch.testing.assert_close(logprobs.grad, t([[0.0, -1.1 / 2]]))


def test_value_loss_clipped_by_hand():
    values, old_values = t([[2.0, 0.0, PAD]]), t([[1.0, 0.0, 0.0]])
    returns, mask = t([[3.0, 1.0, 0.0]]), t([[1, 1, 0]])
    loss, clip_fraction = value_loss(values, old_values, returns, mask, clip_range=0.5)
    # token 0: V_clip = 1.5, errors 1 and 2.25 -> 2.25 (clipped); token 1: errors 1 and 1 -> 1
    assert loss.item() == pytest.approx(0.5 * (2.25 + 1.0) / 2)
    assert clip_fraction.item() == 0.5


def test_logprobs_and_entropy_from_logits():
    logits = t([[[0.0, math.log(3.0)], [0.0, 0.0]]])  # probs (0.25, 0.75) and (0.5, 0.5)
    logprobs = logprobs_from_logits(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(logprobs.double(), t([[math.log(0.75), math.log(0.5)]]))
    entropy = entropy_from_logits(logits)
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(entropy.double(), t([[expected, math.log(2)]]))


def test_sampler_logprobs_rule_out_the_excluded_token_and_scale_by_temperature():
    # logits (0, log 2, log 2) at temperature 1, token 2 excluded: probs (1/3, 2/3) over tokens 0 and 1
    logits = t([[[0.0, math.log(2.0), math.log(2.0)]]])
    torch.testing.assert_close(sampler_logprobs(logits, torch.tensor([[1]]), 1.0, excluded=2).double(),
                               t([[math.log(2 / 3)]]))
    # temperature 0.5 doubles the logits: (0, log 4) -> probs (1/5, 4/5)
    torch.testing.assert_close(sampler_logprobs(logits, torch.tensor([[0]]), 0.5, excluded=2).double(),
                               t([[math.log(1 / 5)]]))
    torch.manual_seed(0)  # the same as the plain formula on logits whose excluded column is -inf
    logits, tokens = torch.randn(2, 3, 7, dtype=torch.float64), torch.randint(0, 6, (2, 3))
    plain = logprobs_from_logits((logits / 0.7).index_fill(-1, torch.tensor([6]), -math.inf), tokens)
    torch.testing.assert_close(sampler_logprobs(logits, tokens, 0.7, excluded=6).double(), plain.double())


# probs (0.5, 0.3, 0.15, 0.05) over tokens 0-3 once the pad (token 4, whose logit is the largest) is ruled out
NUCLEUS = torch.tensor([[[math.log(0.5), math.log(0.3), math.log(0.15), math.log(0.05), 5.0]]])


@pytest.mark.parametrize("top_k, top_p, token, expected", [
    (0, 0.7, 0, 0.5 / 0.8),  # top-p 0.7 keeps {0, 1} (mass 0.8): renormalised
    (0, 0.7, 1, 0.3 / 0.8),
    (2, 1.0, 0, 0.5 / 0.8),  # top-k 2 keeps the same two
    (1, 1.0, 0, 1.0),        # top-k 1: the likeliest is certain
    (3, 0.7, 1, 0.3 / 0.8),  # both: the smaller set
    (0, 0.7, 2, 0.15 / 0.95),  # a token out of the set (sampled before an update moved it) is kept beside it
    (1, 1.0, 3, 0.05 / 0.55),
])
def test_sampler_logprobs_under_top_k_and_top_p_renormalise_over_the_kept_set_by_hand(top_k, top_p, token,
                                                                                        expected):
    logprob = sampler_logprobs(NUCLEUS, torch.tensor([[token]]), 1.0, excluded=4, top_k=top_k, top_p=top_p)
    assert logprob.item() == pytest.approx(math.log(expected), abs=1e-6)


def test_the_truncated_distribution_has_the_kept_sets_entropy_and_finite_gradients_only_there():
    logits = NUCLEUS.clone().requires_grad_(True)
    scaled = sampling_logits(logits, 1.0, excluded=4, top_p=0.7, keep=torch.tensor([[0]]))
    entropy = entropy_from_logits(scaled)
    assert entropy.item() == pytest.approx(-(0.625 * math.log(0.625) + 0.375 * math.log(0.375)), abs=1e-6)
    (entropy.sum() + scaled.log_softmax(-1)[0, 0, 0]).backward()
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 0, 2:].abs().max() == 0 and logits.grad[0, 0, :2].abs().max() > 0
    at_two = sampler_logprobs(NUCLEUS.expand(3, 2, 5), torch.full((3, 2), 2), 2.0, excluded=4, top_p=0.7)
    plain = sampler_logprobs(NUCLEUS.expand(3, 2, 5), torch.full((3, 2), 2), 2.0, excluded=4)
    assert torch.all(at_two > plain)  # at temperature 2 as well: renormalised over a smaller set


def test_explained_variance():
    returns, mask = t([[1.0, 2.0], [3.0, PAD]]), t([[1, 1], [1, 0]])
    assert explained_variance(t([[1.0, 2.0], [3.0, 0.0]]), returns, mask).item() == pytest.approx(1.0)
    assert explained_variance(t([[2.0, 2.0], [2.0, 0.0]]), returns, mask).item() == pytest.approx(0.0)
