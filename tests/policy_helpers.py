"""Builders shared by the policy-optimiser tests (PPO and GRPO, their job and command) and by the distributed run:
a word-level tokenizer and tiny GPT-2 policy and reward model built from a config, the prompts they train on, a
reward function, small settings for either algorithm, a trainer of either algorithm, and reporters that stop a run
or record what it logged. The fixtures (`one_thread`, `seeded_store`) are in tests/trainer_fixtures.py."""

from __future__ import annotations

import math

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, PreTrainedTokenizerFast

from storage.jobs import request_cancel
from trainers.jobs.layer import register_policy, staging_path
from trainers.policy.config import PolicyConfig
from trainers.policy.grpo import GRPOTrainer
from trainers.policy.optimizer import PolicyOptimizer
from trainers.policy.ppo import PPOTrainer
from trainers.reporting import Reporter

WORDS = "the movie plot acting was is great good bad awful fine and but .".split()
PROMPTS = ["the movie was", "the plot was", "the acting was", "the movie is", "the plot is", "the acting is",
           "the movie and the plot", "the acting and the plot"]
ALGORITHMS = ["ppo", "grpo"]
TRAINERS = {"ppo": PPOTrainer, "grpo": GRPOTrainer}
GROUP_SIZE = 3  # GRPO's responses per prompt in these tests
CLI_SETTINGS = ["--batch-size", "4", "--num-mini-batches", "2", "--epochs", "1", "--response-length", "6",
                "--learning-rate", "1e-3"]
GRPO_CLI = ["--algorithm", "grpo", "--group-size", str(GROUP_SIZE)]


def make_tokenizer(pad: str | None = "<pad>", padding_side: str = "left") -> PreTrainedTokenizerFast:
    """A word-level tokenizer: <eos> = 0, <pad> = 1, <unk> = 2, then WORDS."""
    vocab = {w: i for i, w in enumerate(["<eos>", "<pad>", "<unk>", *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    kwargs = {"pad_token": pad} if pad else {}
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", unk_token="<unk>",
                                   padding_side=padding_side, **kwargs)


def make_policy(seed: int = 0, width: int = 32) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(WORDS) + 3, n_positions=32, n_embd=width, n_layer=2, n_head=2,
                        eos_token_id=0, bos_token_id=0, pad_token_id=1)
    return GPT2LMHeadModel(config).eval()


def make_reward_model(vocab_size: int = len(WORDS) + 3, num_labels: int = 1) -> GPT2ForSequenceClassification:
    torch.manual_seed(1)
    config = GPT2Config(vocab_size=vocab_size, n_positions=32, n_embd=16, n_layer=1, n_head=2, num_labels=num_labels,
                        pad_token_id=1)
    return GPT2ForSequenceClassification(config).eval()


def count_great(prompts: list[str], responses: list[str]) -> torch.Tensor:
    return torch.tensor([float(r.split().count("great")) for r in responses])


def small_config(**overrides) -> PolicyConfig:
    settings = dict(batch_size=4, num_mini_batches=2, epochs=2, learning_rate=1e-3, response_length=6)
    return PolicyConfig(**{**settings, **overrides})


def grpo_config(**overrides) -> PolicyConfig:
    return small_config(**{"algorithm": "grpo", "group_size": GROUP_SIZE, **overrides})


def algorithm_config(algorithm: str, **overrides) -> PolicyConfig:
    """`small_config` for PPO, `grpo_config` for GRPO."""
    return grpo_config(**overrides) if algorithm == "grpo" else small_config(**overrides)


def make_trainer(algorithm: str, config: PolicyConfig | None = None, reward=count_great, policy=None,
                 **kwargs) -> PolicyOptimizer:
    """A trainer of `algorithm` on the tiny policy (or `policy`), the word tokenizer and PROMPTS."""
    return TRAINERS[algorithm](config or algorithm_config(algorithm), policy if policy is not None else make_policy(),
                               make_tokenizer(), PROMPTS, reward, **kwargs)


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every parameter of `model`, by name."""
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def changed(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> list[str]:
    """The names of `model`'s parameters that differ from `before` (a `parameters` copy)."""
    return [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]


class CancelAt(Reporter):
    """Requests the job's cancel once step `step` is reported (a person pressing Stop mid-run)."""

    def __init__(self, store, job_id: int, step: int):
        self.store, self.job_id, self.step = store, job_id, step

    def on_step(self, step, metrics):
        if step == self.step:
            request_cancel(self.store, self.job_id)


class Logged(Reporter):
    """Keeps every step's metrics, as a store would log them."""

    def __init__(self):
        self.steps: list[dict[str, float]] = []

    def on_step(self, step, metrics):
        self.steps.append(dict(metrics))

    def not_finite(self) -> list[tuple[int, str, float]]:
        """(step, name, value) of each logged metric that is NaN or infinite."""
        return [(step, name, value) for step, metrics in enumerate(self.steps, start=1)
                for name, value in metrics.items() if not math.isfinite(value)]


def register(store, trainer, round: int = 0) -> int:
    """What the job layer does with a trained policy: save it into a staging folder, then register it."""
    staged = staging_path(store)
    trainer.save_pretrained(staged)
    return register_policy(store, staged, parent_id=None, round=round, note="PPO", made_by="ppo")


def cli(*arguments: str) -> int:
    """`python app.py ARGS` in this process."""
    from app.commands.cli import main

    return main(list(arguments))


def ppo_command(store, *arguments: str) -> int:
    """`python app.py ppo --db STORE ARGUMENTS` in this process, on a store the test seeded itself."""
    return cli("ppo", "--db", str(store.path), *arguments)
