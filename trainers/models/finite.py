"""Finite numbers or a stop. A version is a promise: training stops at the first non-finite loss or gradient, a reward
is checked in the precision it is used in (float32: 1e39 is inf there), and no job registers a policy folder whose
weights hold a NaN or an inf (`check_finite_weights`, called by `trainers.jobs.layer.register_policy`, the one path
every SFT, PPO, GRPO, DPO and loop version takes into the store).

    fits_float32(1e39)                                   # False: a reward of 1e39 is inf in float32
    check_finite_step(loss, grad_norm, "GRPO iteration 3")   # NonFiniteTraining naming what and where
    check_finite_weights(staged)                         # NonFiniteWeights naming the first bad tensor
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors import safe_open

from storage.errors import StudioError

FLOAT32_MAX = float(torch.finfo(torch.float32).max)  # ≈ 3.4e38


class NonFiniteTraining(StudioError):
    """A loss, gradient or reward left float32's range during training: the run stops before it writes a version."""


class NonFiniteWeights(StudioError):
    """A trained policy's saved weights hold NaN or inf: it is not registered."""


def fits_float32(value: float) -> bool:
    """Whether `value` is finite in float32 (the precision rewards, losses and weights are used in)."""
    return math.isfinite(value) and abs(value) <= FLOAT32_MAX


def check_finite_step(loss: torch.Tensor, grad_norm: torch.Tensor | float | None, where: str) -> None:
    """NonFiniteTraining, before the optimizer steps, when the loss or the gradient norm (None: not measured) is NaN
    or inf; `where` names the run and its step."""
    if not torch.isfinite(loss.detach()).all():
        raise NonFiniteTraining(f"{where}: the loss is {loss.detach().float().mean().item()}; nothing was registered "
                                "(lower the learning rate or check the rewards)")
    if grad_norm is not None and not math.isfinite(float(grad_norm)):
        raise NonFiniteTraining(f"{where}: the gradient norm is {float(grad_norm)}; nothing was registered (lower the "
                                "learning rate or check the rewards)")


def check_finite_scores(scores: torch.Tensor, where: str) -> None:
    """NonFiniteTraining when a rollout's rewards (float32, as the loss reads them) hold a NaN or an inf."""
    if not torch.isfinite(scores).all():
        raise NonFiniteTraining(f"{where}: the reward gave non-finite scores ({scores.min().item()} to "
                                f"{scores.max().item()}) in float32; nothing was registered (check the reward model or "
                                "the reward functions' range)")


def non_finite_gradient(model: torch.nn.Module) -> str | None:
    """The name of the first trainable parameter whose gradient holds a NaN or inf, or None."""
    for name, parameter in model.named_parameters():
        if parameter.grad is not None and not torch.isfinite(parameter.grad).all():
            return name
    return None


def non_finite_tensors(folder: str | Path) -> tuple[int, list[str]]:
    """(how many non-finite values, the names of the tensors holding them) over the safetensors files of a saved
    model folder (floating-point tensors only)."""
    count, names = 0, []
    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as weights:
            for name in weights.keys():
                tensor = weights.get_tensor(name)
                if tensor.is_floating_point():
                    bad = int((~torch.isfinite(tensor)).sum())
                    if bad:
                        count, names = count + bad, names + [name]
    return count, names


def check_finite_weights(folder: str | Path) -> None:
    """NonFiniteWeights, in one line, when the model saved in `folder` (its safetensors, LoRA adapter included) holds
    a NaN or an inf."""
    folder = Path(folder)
    count = 0
    names: list[str] = []
    for part in (folder, folder / "adapter"):
        part_count, part_names = non_finite_tensors(part)
        count, names = count + part_count, names + part_names
    if count:
        raise NonFiniteWeights(f"the trained policy holds {count:,} non-finite weights ({len(names)} tensors, first "
                               f"{names[0]}); nothing was registered: lower the learning rate or check the rewards")
