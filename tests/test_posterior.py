"""The last-layer posterior of the reward model (labeling.queue.posterior) against hand computations: the Laplace
precision, the draws' mean and covariance, the probit predictive and the prior calibrated on validation labels."""

import numpy as np
import pytest

from labeling.queue.posterior import (
    LastLayerPosterior,
    calibrated_prior,
    fisher_weights,
    pair_probabilities,
    predictive_probabilities,
    prior_precision,
    sigmoid,
)


def test_fisher_weights_are_sigma_times_one_minus_sigma_of_the_margin():
    head = np.array([1.0, 0.0])
    diffs = np.array([[0.0, 5.0], [2.0, 0.0]])
    s = 1 / (1 + np.exp(-2.0))
    assert fisher_weights(head, diffs) == pytest.approx([0.25, s * (1 - s)])


def test_laplace_precision_is_the_prior_plus_each_labels_fisher_information():
    head = np.zeros(2)  # untrained: every label weighs 1/4
    diffs = np.array([[2.0, 0.0], [1.0, 1.0]])
    posterior = LastLayerPosterior.laplace(head, diffs, prior=3.0)
    # 3 I + 1/4 [[4, 0], [0, 0]] + 1/4 [[1, 1], [1, 1]]
    assert posterior.precision == pytest.approx(np.array([[4.25, 0.25], [0.25, 3.25]]))
    assert posterior.covariance @ posterior.precision == pytest.approx(np.eye(2))
    empty = LastLayerPosterior.laplace(np.array([1.0, 2.0]), np.zeros((0, 2)), prior=2.0)
    assert empty.precision == pytest.approx(2 * np.eye(2)) and empty.mean == pytest.approx([1.0, 2.0])


def test_draws_are_seeded_and_have_the_posteriors_mean_and_covariance():
    posterior = LastLayerPosterior(np.array([1.0, -2.0]), np.array([[4.0, 1.0], [1.0, 2.0]]))
    draws = posterior.draws(20000, np.random.default_rng(0))
    assert draws.shape == (20000, 2)
    assert draws.mean(axis=0) == pytest.approx([1.0, -2.0], abs=0.02)
    assert np.cov(draws.T) == pytest.approx(np.linalg.inv(posterior.precision), abs=0.02)
    assert (posterior.draws(3, np.random.default_rng(5)) == posterior.draws(3, np.random.default_rng(5))).all()


def test_pair_probabilities_are_sigmoid_of_each_heads_margin():
    heads = np.array([[1.0, 0.0], [0.0, 2.0]])
    diffs = np.array([[1.0, 1.0], [0.0, -1.0]])
    assert pair_probabilities(heads, diffs) == pytest.approx(sigmoid(np.array([[1.0, 0.0], [2.0, -2.0]])))


def test_probit_predictive_is_the_margin_shrunk_by_its_uncertainty():
    assert predictive_probabilities(np.array([2.0]), np.array([0.0])) == pytest.approx(sigmoid(np.array([2.0])))
    four_times = np.array([8 / np.pi * 3])  # 1 + π s² / 8 = 4: the margin halves
    assert predictive_probabilities(np.array([2.0]), four_times) == pytest.approx(sigmoid(np.array([1.0])))
    assert predictive_probabilities(np.array([0.0]), np.array([100.0])) == pytest.approx([0.5])


def test_an_untrained_heads_prior_spreads_reward_differences_by_about_one():
    diffs = np.array([[3.0, 4.0], [0.0, 5.0]])  # |z|² = 25 each
    assert prior_precision(diffs) == 25.0
    assert prior_precision(np.zeros((0, 2))) == 1.0


def test_the_prior_widens_for_a_reward_model_its_validation_labels_contradict():
    head = np.array([4.0])  # a confident margin of 4 on every pair
    train = np.array([[1.0]])
    validation = np.array([[1.0], [1.0]])
    agreeing = calibrated_prior(head, train, validation, np.array([1.0, 1.0]))
    contradicting = calibrated_prior(head, train, validation, np.array([1.0, 0.0]))
    assert contradicting < agreeing  # half the validation labels disagree: a wider posterior predicts them better
    scale = prior_precision(train)
    assert agreeing == pytest.approx(scale * 1e3) and contradicting == pytest.approx(scale * 1e-4)
    assert calibrated_prior(head, train, np.zeros((0, 1)), np.zeros(0)) == scale  # no validation labels
