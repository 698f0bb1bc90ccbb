"""The reward model's loss (trainers/reward/loss.py), preference_loss, against hand computations: ties, strict pairs,
margin, label noise, a mixed batch."""

import math

import pytest
import torch

from trainers.reward.loss import preference_loss

LN2 = 0.6931471805599453


def loss_and_grad(first, second, target, **kwargs):
    r1 = torch.tensor(first, dtype=torch.float64, requires_grad=True)
    r2 = torch.tensor(second, dtype=torch.float64)
    loss = preference_loss(r1, r2, torch.tensor(target, dtype=torch.float64), **kwargs)
    loss.backward()
    return loss.item(), r1.grad.tolist()


def test_tie_at_equal_scores_is_ln2_with_zero_gradient():
    loss, grad = loss_and_grad([0.7], [0.7], [0.5])
    assert loss == pytest.approx(LN2)
    assert grad == pytest.approx([0.0], abs=1e-12)


def test_strict_pair_is_minus_log_sigmoid_of_the_difference():
    # d = 1: -log(sigmoid(1)) = log(1 + e^-1) = 0.3132616875; gradient sigmoid(1) - 1 = -0.2689414214
    loss, grad = loss_and_grad([1.5], [0.5], [1.0])
    assert loss == pytest.approx(0.31326168751822286)
    assert grad == pytest.approx([-0.2689414213699951])
    # the second preferred: -log(sigmoid(-1)) = log(1 + e) = 1.3132616875
    loss, _ = loss_and_grad([1.5], [0.5], [0.0])
    assert loss == pytest.approx(1.3132616875182228)


def test_margin_asks_the_winner_to_lead_by_it_and_leaves_ties_alone():
    # first preferred, d = 1, margin 0.5: log(1 + e^-0.5) = 0.4740769842
    assert loss_and_grad([1.0], [0.0], [1.0], margin=0.5)[0] == pytest.approx(0.4740769841801067)
    # second preferred, d = -1, margin 0.5: -log(sigmoid(-(-1 + 0.5))) = log(1 + e^-0.5)
    assert loss_and_grad([0.0], [1.0], [0.0], margin=0.5)[0] == pytest.approx(0.4740769841801067)
    # a tie ignores the margin: still ln 2 at d = 0
    assert loss_and_grad([0.0], [0.0], [0.5], margin=0.5)[0] == pytest.approx(LN2)
    # per-pair margins as a tensor: d = 2 with margin 0.5 -> log(1 + e^-1.5) = 0.2014132780
    assert loss_and_grad([2.0], [0.0], [1.0], margin=torch.tensor([0.5], dtype=torch.float64))[0] == \
        pytest.approx(0.20141327798275246)


def test_label_noise_mixes_in_a_coin_flip():
    # eps = 0.1, d = 2, first preferred: P = 0.9 * sigmoid(2) + 0.05 = 0.8427173702; loss = -ln P = 0.1711236439
    assert loss_and_grad([2.0], [0.0], [1.0], noise=0.1)[0] == pytest.approx(0.17112364388500304)
    # eps = 0.2, d = -3, second preferred: 1 - P = 0.8 * sigmoid(3) + 0.1 = 0.8620593015; loss = 0.1484312155
    assert loss_and_grad([0.0], [3.0], [0.0], noise=0.2)[0] == pytest.approx(0.14843121548989105)
    # a tie at d = 0 stays ln 2 whatever the noise
    assert loss_and_grad([0.0], [0.0], [0.5], noise=0.3)[0] == pytest.approx(LN2)
    # the noisy loss is bounded: even a hopelessly wrong score costs at most -ln(eps / 2)
    assert loss_and_grad([0.0], [100.0], [1.0], noise=0.1)[0] == pytest.approx(-math.log(0.05), rel=1e-6)


def test_mixed_batch_is_the_mean_of_its_pairs():
    # strict d = 2: 0.1269280110; second preferred at d = -1: 0.3132616875; tie at d = 0: ln 2
    loss, grad = loss_and_grad([2.0, -1.0, 0.3], [0.0, 0.0, 0.3], [1.0, 0.0, 0.5])
    assert loss == pytest.approx((0.1269280110429726 + 0.31326168751822286 + LN2) / 3)
    # dL/dr1 = (sigmoid(d) - p) / B
    assert grad == pytest.approx([-0.0397343073407059, 0.08964714045666504, 0.0], abs=1e-12)


def test_noise_out_of_range_is_refused():
    with pytest.raises(ValueError):
        preference_loss(torch.zeros(1), torch.zeros(1), torch.ones(1), noise=1.0)
