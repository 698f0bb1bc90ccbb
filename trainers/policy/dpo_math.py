"""DPO's preference losses with a per-example target p = P(chosen preferred), as pure functions: what lets a tie
(p = 0.5) train, which TRL's losses cannot (their one `label_smoothing` applies to every pair at once).

With the log-ratios u = log π(y_c|x) - log π_ref(y_c|x) and v = log π(y_r|x) - log π_ref(y_r|x) of each pair (B,):

- sigmoid (DPO, Rafailov et al. 2023, eq. 7, on the seeds' Bradley-Terry with ties): with d = β(u - v),
  loss = -(p·logσ(d) + (1 - p)·logσ(-d)). At p = 1 it is TRL's `sigmoid` loss; at p = 0.5 it is least at d = 0: the
  tied responses made equally likely relative to the reference.
- ipo (Azar et al. 2023, eq. 17, with TRL's length normalisation): with h = u/|y_c| - v/|y_r|,
  loss = (h - (p - 1/2)/β)². At p = 1 it is TRL's `ipo` loss, (h - 1/(2β))²; at p = 0.5 its target is h = 0.

    loss = soft_preference_loss(u, v, target, beta=0.1, loss_type="sigmoid")                          # (B,)
    loss = soft_preference_loss(u, v, target, beta=0.1, loss_type="ipo", lengths=(chosen_len, rejected_len))
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .dpo_config import TIE_LOSS_TYPES


def soft_preference_loss(chosen_logratios: torch.Tensor, rejected_logratios: torch.Tensor, target: torch.Tensor,
                         beta: float, loss_type: str,
                         lengths: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Per-pair loss (B,) of the `loss_type` (sigmoid or ipo) at targets p (B,); ipo needs each side's `lengths`
    (completion tokens, (B,) each)."""
    if loss_type == "sigmoid":
        d = beta * (chosen_logratios - rejected_logratios)
        return -(target * F.logsigmoid(d) + (1 - target) * F.logsigmoid(-d))
    if loss_type == "ipo":
        assert lengths is not None, "the ipo loss normalises by each response's length: pass lengths"
        chosen_length, rejected_length = (n.clamp(min=1) for n in lengths)
        h = chosen_logratios / chosen_length - rejected_logratios / rejected_length
        return (h - (target - 0.5) / beta) ** 2
    raise ValueError(f"a soft target is defined for the {' and '.join(TIE_LOSS_TYPES)} losses, not {loss_type!r}")
