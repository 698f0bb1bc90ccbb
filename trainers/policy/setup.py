"""Before PPO starts: the checks that refuse a tokenizer or a reward model PPO cannot use (one-line
`PolicySetupError`s), and the setup of the trained policy (LoRA adapters, activation checkpointing).

    check_tokenizer(tokenizer)                 # a pad token distinct from EOS, left padding
    policy = with_lora(policy, config)         # when config.lora: fresh adapters (or the ones it carries)
"""

from __future__ import annotations

from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..models.loading import disable_dropout
from .config import PolicyConfig, PolicySetupError
from .dpo_config import DPOConfig


def check_tokenizer(tokenizer: PreTrainedTokenizerBase) -> None:
    if tokenizer.pad_token_id is None:
        raise PolicySetupError("the tokenizer has no pad token; add one distinct from EOS and save it with the policy")
    if tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise PolicySetupError("the tokenizer's pad token is its EOS token, which would hide the EOS PPO rewards; "
                               "add a distinct pad token and save it with the policy")
    if tokenizer.padding_side != "left":
        raise PolicySetupError("the tokenizer pads on the right; set tokenizer.padding_side = 'left' (generation "
                               "appends to the right of the prompt)")


def check_reward_model(reward) -> None:
    """A reward model (a `RewardScorer`) has exactly one output per member and an embedding for every token of its
    own tokenizer (it reads the decoded responses in its own format); reward functions pass as they are."""
    for model in getattr(reward, "models", ()):
        if model.config.num_labels != 1:
            raise PolicySetupError(f"the reward model has num_labels={model.config.num_labels}; a reward model needs "
                                   "exactly one output (train it with python app.py train-reward)")
        rows, tokens = model.get_input_embeddings().num_embeddings, reward.chat.tokenizer.get_vocab_size()
        if rows < tokens:
            raise PolicySetupError(f"the reward model has {rows} embeddings but its tokenizer {tokens} tokens; train "
                                   "the reward model with python app.py train-reward, which saves them together")


def with_lora(policy: PreTrainedModel, config: PolicyConfig | DPOConfig) -> nn.Module:
    """`policy` with trainable LoRA adapters (`config`'s lora_* settings): new ones, or those of a policy loaded with
    its adapter."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if isinstance(policy, PeftModel):  # adapters carried over from an earlier run
        return policy
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=config.lora_target_modules, task_type="CAUSAL_LM")
    return get_peft_model(policy, lora)


def enable_activation_checkpointing(policy: nn.Module, model: nn.Module) -> None:
    """Recompute the policy's activations in the backward pass. HF checkpoints only in train mode, so dropout is
    switched off in the whole `model` instead (rollout and update must see the same network)."""
    if hasattr(policy, "activation_checkpointing_enable"):  # transformers >= 5.2x names it so
        policy.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    disable_dropout(model)
