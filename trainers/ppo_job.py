"""PPO and GRPO runs on a store: the worker's `ppo` jobs, `python app.py ppo` and the loop's policy-optimisation
phase all run here.

A run (`trainers.ppo_config.PPORun`, saved as the job's config so a resumed job repeats it) trains a policy version
of the store (default: the newest) with the algorithm its settings name (`ppo`, or `grpo`) against the newest reward
model ("rm", its ensemble averaged, normalised) or an oracle scoring function ("oracle", for benchmarks), then
registers the new version with the start policy as parent. This is the job layer: it reads the store, builds the
trainer's reporter and registers what the trainer saved.

Models: the reference is the lineage's root (the SFT policy). With LoRA, a start policy saved by an earlier LoRA
run carries its adapter in `adapter/`; training continues that adapter on its base, which is then the reference.
Otherwise fresh adapters go on the start policy, which is then the reference. PPO reuses a saved value head; GRPO
has no critic and loads none.

    outcome = train_ppo(store, PPORun(iterations=20, reward="oracle"), job_id=job.id)   # JobCancelled when stopped
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

import torch

from labeling.synthetic import DEFAULT_ORACLE, load_scorer
from storage import Store
from storage.errors import InvalidInput, NotFound
from storage.policies import get_policy, latest_policy, root_policy
from storage.prompts import list_prompts
from storage.types import Job, Policy

from .chat_format import PromptBudget, model_context
from .grpo import GRPOTrainer
from .job_layer import is_main_process, job_reporter, new_staging_dir, register_policy
from .models import default_device, load_chat_format, load_policy, load_tokenizer
from .policy_optimizer import PolicyOptimizer
from .ppo import PPOTrainer
from .ppo_checkpoint import load_value_head
from .ppo_config import Algorithm, PPOConfig, PPORun, RewardSource
from .reporting import Reporter
from .reward_scorer import RewardScorer


@dataclass
class PPOOutcome:
    iterations: int = field(metadata={"help": "Iterations done in total."})
    policy_id: int | None = field(metadata={"help": "The registered policy version (None on non-main processes)."})
    metrics: dict = field(metadata={"help": "The last iteration's metrics."})


def make_oracle_reward(spec: str = DEFAULT_ORACLE) -> Callable:
    """`score(prompts, responses)` from a `module:function` that scores one response text."""
    scorer = load_scorer(spec)
    return lambda prompts, responses: torch.tensor([float(scorer(r)) for r in responses])


def oracle_reward(prompts: list[str], responses: list[str]):
    """The demo's oracle (the sentiment lexicon) as a PPO reward."""
    return make_oracle_reward()(prompts, responses)


def state_dir(store: Store, job_id: int, name: str = "") -> Path:
    """Where a job's resumable PPO state lives (`name` tells apart several PPO phases of one job)."""
    return store.data_dir / "ppo" / f"job-{job_id}{'-' + name if name else ''}"


def start_policy(store: Store, policy_id: int | None) -> Policy:
    policy = get_policy(store, policy_id) if policy_id is not None else latest_policy(store)
    if policy is None:
        raise NotFound("the store has no policy to train; start the studio once to seed the demo, or register one")
    return policy


def load_models(store: Store, start: Policy, lora: bool, with_value_head: bool = True):
    """(policy, reference or None, tokenizer, value head or None) for a run starting from `start`; no value head is
    read unless `with_value_head` (GRPO has no critic)."""
    tokenizer = load_tokenizer(start.path)
    value_head = load_value_head(start.path) if with_value_head else None
    if lora:
        adapter = Path(start.path) / "adapter"
        if adapter.is_dir():
            from peft import PeftModel

            base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
            return PeftModel.from_pretrained(load_policy(base), adapter, is_trainable=True), None, tokenizer, value_head
        return load_policy(start.path), None, tokenizer, value_head
    root = root_policy(store, start)
    reference = load_policy(root.path) if root.id != start.id else None
    return load_policy(start.path), reference, tokenizer, value_head


def make_trainer(config: PPOConfig, policy, tokenizer, prompts: list, reward, *, value_head: dict | None = None,
                 **options) -> PolicyOptimizer:
    """The trainer of `config.algorithm`: PPO (its critic warmed by `value_head` when given) or GRPO (no critic);
    `options` (reference, state_dir, ...) go to either."""
    if config.algorithm == Algorithm.GRPO:
        return GRPOTrainer(config, policy, tokenizer, prompts, reward, **options)
    return PPOTrainer(config, policy, tokenizer, prompts, reward, value_head=value_head, **options)


def build_trainer(store: Store, run: PPORun) -> tuple[PolicyOptimizer, Policy]:
    """The trainer for `run` and its start policy, after every check (models, reward model, prompts, settings);
    writes nothing."""
    run.check()
    unknown = sorted(set(run.ppo) - {f.name for f in fields(PPOConfig)})
    if unknown:
        raise InvalidInput(f"unknown PPO setting {unknown[0]!r}; see python app.py ppo --help for the settings")
    config = PPOConfig(**run.ppo)
    config.check()
    start = start_policy(store, run.policy_id)
    if run.reward == RewardSource.RM:
        reward = RewardScorer.from_store(store, device=default_device())
    else:
        reward = make_oracle_reward(run.oracle)
    policy, reference, tokenizer, value_head = load_models(store, start, config.lora,
                                                           with_value_head=config.algorithm == Algorithm.PPO)
    chat = load_chat_format(start.path, tokenizer)
    prompts = list_prompts(store, heldout=False)
    context = model_context(start.path)
    if context is not None:  # nothing is truncated: a prompt that does not fit is refused by its id
        PromptBudget(chat, context, config.response_length).check_prompts(prompts)
    trainer = make_trainer(config, policy, tokenizer, [p.content for p in prompts], reward, reference=reference,
                           value_head=value_head, chat=chat)
    return trainer, start


def train_ppo(store: Store, run: PPORun, job_id: int | None = None, state_name: str = "", step_offset: int = 0,
              phase: str | None = "", listener: Reporter | None = None, trainer=None) -> PPOOutcome:
    """Run (or resume) `run` reporting to `job_id`, register the new policy, and drop the resumable state.

    The state lives in `state_dir(store, job_id, state_name)`; metrics are logged at `step_offset + iteration`; the
    job's phase reads `"{phase} i/N"` ("": the algorithm, `ppo` or `grpo`; None: the caller keeps its own);
    `listener` hears every iteration. Raises JobCancelled (after saving the state) when the job's cancel flag is
    set. The loop calls it once per round, e.g.
    `train_ppo(store, PPORun(M, "rm", round=g, ppo=...), job.id, f"round-{g}", (g - 1) * M, phase=None)`.
    """
    if trainer is None:
        trainer, start = build_trainer(store, run)
    else:
        start = start_policy(store, run.policy_id)
    folder = state_dir(store, job_id, state_name) if job_id is not None else None
    trainer.use_state_dir(folder)
    phase = trainer.algorithm.value if phase == "" else phase
    result = trainer.train(run.iterations, job_reporter(store, job_id, step_offset, phase, listener))
    round = run.round if run.round is not None else start.round + 1
    policy_id = None
    if is_main_process():
        staged = new_staging_dir(store)
        trainer.save_pretrained(staged)
        policy_id = register_policy(store, staged, parent_id=start.id, round=round,
                                    note=f"{trainer.algorithm.value.upper()}, {result.iterations} iterations")
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    return PPOOutcome(result.iterations, policy_id, result.metrics)


def run_job(store: Store, job: Job) -> None:
    """The worker's runner for `ppo` jobs (every process under accelerate)."""
    train_ppo(store, PPORun.from_dict(job.config), job.id)
