"""What the reward model does not know, in closed form: a Gaussian posterior over its last layer (its score head).

The reward model scores r(x) = w·φ(x), φ(x) its last-layer features of prompt + response (the input of the head) and
w the head's weights; a pair's Bradley-Terry probability is σ(w·z), z = φ(first) − φ(second). With the features
frozen, the posterior over w is approximated around the trained head (Laplace): mean w, precision
Λ = λI + Σ σ'(w·zᵢ) zᵢzᵢᵀ over the labelled pairs (σ' = σ(1 − σ), the Fisher information of one Bradley-Terry label;
ties train like any pair). The prior's λ is the one whose posterior predicts the reward model's validation labels best
(a network fitted on its labels is overconfident; this widens the posterior until its predictions are calibrated).
Before any reward model (a first round) the mean is 0 and only the prior remains. Draws of w are
reward functions the labels cannot tell apart: an ensemble of heads on one shared body, for the price of one forward.
Pure numpy (no torch): `trainers.loop.selecting` computes the features.

    prior = calibrated_prior(head, train_diffs, val_diffs, val_targets)   # or prior_precision(diffs) untrained
    posterior = LastLayerPosterior.laplace(head, labelled_diffs, prior)
    draws = posterior.draws(64, np.random.default_rng(seed))       # (64, d) heads
    probs = pair_probabilities(draws, candidate_diffs)             # (64, P) P(first preferred) per draw
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=float)))  # overflow-free σ


def fisher_weights(head: np.ndarray, diffs: np.ndarray) -> np.ndarray:
    """σ'(w·z) = σ(1 − σ) of each pair, (P,): how much one label of that pair tells about w along z (1/4 at most)."""
    p = sigmoid(np.asarray(diffs, dtype=float) @ np.asarray(head, dtype=float))
    return p * (1.0 - p)


def prior_precision(diffs: np.ndarray) -> float:
    """λ of the prior N(0, I/λ) on an untrained head: the prior spread of a pair's reward difference w·z is about 1
    (λ = mean |z|² over the pairs `diffs`, (P, d))."""
    diffs = np.asarray(diffs, dtype=float)
    mean_square = float((diffs**2).sum(axis=1).mean()) if len(diffs) else 0.0
    return mean_square if mean_square > 0 else 1.0


def predictive_probabilities(mean: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """P(first preferred) with the head's uncertainty integrated out (the probit approximation of E σ(w·z)):
    σ(m / sqrt(1 + π s² / 8)), m and s² the mean and variance of w·z."""
    return sigmoid(np.asarray(mean) / np.sqrt(1.0 + np.pi * np.asarray(variance) / 8.0))


CALIBRATION_GRID = 10.0 ** np.linspace(-4, 3, 29)  # λ as multiples of mean |z|²


def calibrated_prior(head: np.ndarray, train_diffs: np.ndarray, val_diffs: np.ndarray,
                     val_targets: np.ndarray) -> float:
    """The prior λ whose posterior from the training pairs predicts the held-out validation labels best (log-loss of
    `predictive_probabilities`, targets 1, 0 or 0.5), over `CALIBRATION_GRID`: a reward model that is right less
    often than its margins say gets a wider posterior. Without validation pairs, `prior_precision`."""
    head, train_diffs = np.asarray(head, dtype=float), np.asarray(train_diffs, dtype=float).reshape(-1, head.size)
    val_diffs, val_targets = np.asarray(val_diffs, dtype=float).reshape(-1, head.size), np.asarray(val_targets, float)
    scale = prior_precision(train_diffs if len(train_diffs) else val_diffs)
    if not len(val_diffs):
        return scale
    fisher = (train_diffs * fisher_weights(head, train_diffs)[:, None]).T @ train_diffs  # (d, d)
    eigenvalues, eigenvectors = np.linalg.eigh(fisher)
    along = (val_diffs @ eigenvectors) ** 2  # (V, d): each validation pair's spread along the Fisher's axes
    mean = val_diffs @ head  # (V,)
    eps = 1e-9

    def log_loss(prior: float) -> float:
        p = np.clip(predictive_probabilities(mean, along @ (1.0 / (prior + eigenvalues))), eps, 1 - eps)
        return float(-(val_targets * np.log(p) + (1 - val_targets) * np.log(1 - p)).mean())

    return min((scale * factor for factor in CALIBRATION_GRID), key=log_loss)


@dataclass(frozen=True)
class LastLayerPosterior:
    """N(mean, precision⁻¹) over the reward model's head, d = the feature size."""

    mean: np.ndarray  # (d,)
    precision: np.ndarray  # (d, d)

    @classmethod
    def laplace(cls, head: np.ndarray, labelled_diffs: np.ndarray, prior: float) -> "LastLayerPosterior":
        """Around the trained `head` (d,), from the labelled pairs' feature differences (n, d) and the prior's λ."""
        head = np.asarray(head, dtype=float)
        diffs = np.asarray(labelled_diffs, dtype=float).reshape(-1, head.size)
        weights = fisher_weights(head, diffs)  # (n,)
        precision = prior * np.eye(head.size) + (diffs * weights[:, None]).T @ diffs  # (d, d)
        return cls(head, precision)

    @property
    def covariance(self) -> np.ndarray:
        return np.linalg.inv(self.precision)

    def draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` heads drawn from the posterior, (n, d): mean + L⁻ᵀε with LLᵀ = precision, ε ~ N(0, I)."""
        cholesky = np.linalg.cholesky(self.precision)  # (d, d) lower
        noise = rng.standard_normal((self.mean.size, n))  # (d, n)
        return self.mean[None, :] + np.linalg.solve(cholesky.T, noise).T  # (n, d)


def pair_probabilities(heads: np.ndarray, diffs: np.ndarray) -> np.ndarray:
    """P(first preferred) = σ(w·z) for each head (S, d) and pair difference (P, d): (S, P)."""
    return sigmoid(np.asarray(heads, dtype=float) @ np.asarray(diffs, dtype=float).T)
