"""A reward model as a LoRA adapter and a `score` head (`reward_lora`), and scoring with it on the policy's own frozen
base, so that with a LoRA policy one copy of the base weights serves the policy, the reference (adapters disabled),
the critic and the reward model.

A reward member trained with LoRA is saved as a plain Hugging Face directory with the adapter merged in (it loads with
`AutoModelForSequenceClassification`, as every reward model does) and, beside it, the adapter itself under
`adapter/` (peft's files: the LoRA weights, and the `score` head as a module to save). `attach_reward_adapters` loads
member k's adapter onto the policy's `PeftModel` as the named adapter `reward<k>` and returns one `AdapterRewardModel`
per member: a module that scores as the merged model does (the backbone's last hidden state at the last non-pad token
through the `score` head), switching the active adapter for its forward and back. peft keeps one adapter active at a
time, and `disable_adapter()` (the reference) turns every adapter off, the reward's included.

    scorer = RewardScorer.on_shared_base(policy, member_dirs, norms)     # policy: the PPO policy's PeftModel
"""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import Cache
from transformers.modeling_outputs import SequenceClassifierOutput

from ..models.sampling import cache_keyword

ADAPTER_FOLDER = "adapter"  # inside a reward member trained with LoRA
ADAPTER_PREFIX = "reward"  # member k's adapter on the policy: reward<k>


def adapter_dir(member_dir: str | Path) -> Path | None:
    """The member's LoRA adapter folder, or None for a reward model trained in full."""
    path = Path(member_dir) / ADAPTER_FOLDER
    return path if (path / "adapter_config.json").is_file() else None


def adapter_base(adapter: str | Path) -> Path:
    """The base model directory an adapter was trained on."""
    return Path(json.loads((Path(adapter) / "adapter_config.json").read_text())["base_model_name_or_path"])


def same_dir(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def shares_base(member_dirs: Sequence[str | Path], policy_base: str | Path) -> bool:
    """Can every member score on the policy's base: each trained as an adapter on that very base directory?"""
    adapters = [adapter_dir(d) for d in member_dirs]
    return bool(adapters) and all(a is not None and same_dir(adapter_base(a), policy_base) for a in adapters)


@dataclass(frozen=True)
class SharedBaseReward:
    """A reward model whose members score on the policy's base, attached once the policy has its adapters
    (`RewardScorer.on_shared_base`): its members' directories and normalisations."""

    member_dirs: tuple[str, ...]
    norms: tuple[tuple[float, float], ...]


@contextlib.contextmanager
def active_adapter(peft_model, name: str) -> Iterator[None]:
    """`name` active (frozen) for the duration, then the adapter that was active, as trainable as it was."""
    previous = peft_model.active_adapter
    trainable = any(p.requires_grad for n, p in peft_model.named_parameters() if f".{previous}." in n)
    peft_model.set_adapter(name, inference_mode=True)
    try:
        yield
    finally:
        peft_model.set_adapter(previous, inference_mode=not trainable)


class AdapterRewardModel(nn.Module):
    """One reward member on a shared base: the named adapter on the policy's `PeftModel` and its own `score` head.
    Called as a sequence classifier (`model(input_ids=..., attention_mask=...).logits`, (N, 1)), so `RewardScorer`,
    `sequence_scores` and `sequence_features` read it as they read a merged model."""

    def __init__(self, peft_model, adapter_name: str, score: nn.Linear, pad_token_id: int):
        super().__init__()
        self._shared = (peft_model,)  # not a submodule: the policy's weights are the policy's to move and train
        self.adapter_name, self.score = adapter_name, score
        self.config = copy.deepcopy(peft_model.get_base_model().config)
        self.config.num_labels, self.config.pad_token_id = 1, pad_token_id

    @property
    def device(self) -> torch.device:
        return self.score.weight.device

    def get_input_embeddings(self) -> nn.Module:
        return self._shared[0].get_input_embeddings()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None,
                use_cache: bool = False, cache: Cache | None = None, **_) -> SequenceClassifierOutput:
        """Scores (N, 1) of each row's last real token; `cache` (with `use_cache`): the keys and values of what
        came before these rows (`prompted_scores`' prompts), which this pass extends."""
        peft_model = self._shared[0]
        causal_lm = peft_model.get_base_model()
        backbone = getattr(causal_lm, causal_lm.base_model_prefix)  # the transformer without the LM head
        with active_adapter(peft_model, self.adapter_name):
            hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              use_cache=use_cache, **({cache_keyword(causal_lm): cache} if use_cache else {})
                              ).last_hidden_state  # (N, T, d)
        logits = self.score(hidden.to(self.score.weight.dtype))  # (N, T, 1)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        last = (positions * (input_ids != self.config.pad_token_id).long()).argmax(-1)  # (N,): the last real token
        return SequenceClassifierOutput(logits=logits[torch.arange(len(input_ids), device=logits.device), last])


def attach_reward_adapters(peft_model, member_dirs: Sequence[str | Path], pad_token_id: int
                           ) -> list[AdapterRewardModel]:
    """Load each member's adapter onto `peft_model` (the policy, a peft `PeftModel` on the members' base) as
    `reward<k>`, frozen, leaving the policy's adapter active; one `AdapterRewardModel` per member."""
    models = []
    active = peft_model.active_adapter
    device = next(peft_model.parameters()).device
    for k, member in enumerate(member_dirs):
        adapter, name = adapter_dir(member), f"{ADAPTER_PREFIX}{k}"
        result = peft_model.load_adapter(str(adapter), adapter_name=name, is_trainable=False)
        assert not [key for key in result.missing_keys if name in key], f"{adapter}: adapter weights missing"
        weights = load_file(str(adapter / "adapter_model.safetensors"))
        [key] = [key for key in weights if key.endswith("score.weight")]
        head = nn.Linear(weights[key].shape[1], 1, bias=key.replace("weight", "bias") in weights)
        head.load_state_dict({"weight": weights[key], **({"bias": weights[key.replace("weight", "bias")]}
                                                          if head.bias is not None else {})})
        models.append(AdapterRewardModel(peft_model, name, head.requires_grad_(False).to(device), pad_token_id))
    assert peft_model.active_adapter == active, "loading a reward adapter changed the policy's active adapter"
    return models
