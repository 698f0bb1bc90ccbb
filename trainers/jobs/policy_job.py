"""PPO and GRPO runs on a store: the worker's `ppo` jobs, `python app.py ppo` and the loop's policy-optimisation
phase all run here.

A run (`trainers.policy.config.PolicyRun`, saved as the job's config so a resumed job repeats it) trains a policy
version of the store (default: the newest) with the algorithm its settings name (`ppo`, or `grpo`) against the newest
reward model ("rm", its ensemble averaged, normalised), an oracle scoring function ("oracle", for benchmarks), the
reward functions alone ("functions", each prompt's reference passed by field: `trainers.reward.functions`) or the
reward model's score weighted beside them ("rm+functions"), then
registers the new version with the start policy as parent. This is the job layer: it reads the store, builds the
trainer's reporter and registers what the trainer saved.

Models: the reference is the lineage's root (the SFT policy). With LoRA, a start policy saved by an earlier LoRA
run carries its adapter in `adapter/`; training continues that adapter on its base, which is then the reference.
Otherwise fresh adapters go on the start policy, which is then the reference. PPO reuses a saved value head; GRPO
has no critic and loads none.

    outcome = train_policy(store, PolicyRun(iterations=20, reward="oracle"), job_id=job.id)  # JobCancelled: stopped
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

import torch

from labeling.queue.synthetic import DEFAULT_ORACLE, load_scorer
from storage import Store
from storage.errors import InvalidInput, NotFound
from storage.policies import get_policy, latest_policy, root_policy
from storage.prompts import list_prompts
from storage.reward_models import latest_reward_models
from storage.types import Job, Policy

from ..models.chat_format import PromptBudget, model_context
from ..models.loading import default_device, load_chat_format, load_policy, load_tokenizer
from ..policy.checkpoint import load_value_head
from ..policy.config import Algorithm, PolicyConfig, PolicyRun, RewardSource
from ..policy.grpo import GRPOTrainer
from ..policy.optimizer import PolicyOptimizer, TrainResult
from ..policy.ppo import PPOTrainer
from ..reporting import Reporter
from ..reward.function_specs import RewardFunctionSpec, parse_reward_functions
from ..reward.functions import CombinedReward, RewardFunctions, prompt_key
from ..reward.scorer import RewardScorer
from ..reward.shared_base import SharedBaseReward, adapter_base, shares_base
from .layer import is_main_process, job_reporter, register_policy, staging_path, start_a_project
from .phase_launch import job_launch, launch_phase, weights_digest, with_launch_precision

Example = TypeVar("Example")  # what a run trains on: an SFTExample, a PreferenceExample


@dataclass
class PolicyOutcome:
    iterations: int = field(metadata={"help": "Iterations done in total."})
    policy_id: int = field(metadata={"help": "The registered policy version."})
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


def pinned_examples(examples: list[Example], path: Path, example_id: Callable[[Example], int], noun: str,
                    run_name: str) -> list[Example]:
    """The examples a run trains on, the same when it resumes: the first start writes their ids (`example_id`) into
    `path` in its state folder; a resumed run keeps to them (`noun`s added since train in the next run; undone ones
    drop out), so its checkpoint's place in the data stays right. Every one undone: InvalidInput, one line."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([example_id(e) for e in examples]))
        return examples
    pinned = set(json.loads(path.read_text()))
    kept = [e for e in examples if example_id(e) in pinned]
    if not kept:
        raise InvalidInput(f"every {noun} this {run_name} run started on was undone since; delete {path.parent} to "
                           "start it anew")
    return kept


def start_policy(store: Store, policy_id: int | None) -> Policy:
    policy = get_policy(store, policy_id) if policy_id is not None else latest_policy(store)
    if policy is None:
        raise NotFound(f"the store has no policy to train; {start_a_project(store)}")
    return policy


def load_models(store: Store, start: Policy, lora: bool, with_value_head: bool = True):
    """(policy, reference or None, tokenizer, value head or None) for a run starting from `start`; no value head is
    read unless `with_value_head` (GRPO has no critic)."""
    return load_plan_models(start.path, reference_path(store, start, lora), lora, with_value_head)


def reference_path(store: Store, start: Policy, lora: bool) -> str | None:
    """The frozen reference's directory: the lineage's root when it is not `start` (None: a copy of the start, or,
    with LoRA, the base with adapters disabled)."""
    if lora:
        return None
    root = root_policy(store, start)
    return root.path if root.id != start.id else None


def policy_base(start_path: str) -> str:
    """The base model directory of a policy: its LoRA adapter's base, or the policy itself."""
    adapter = Path(start_path) / "adapter"
    return str(adapter_base(adapter)) if (adapter / "adapter_config.json").is_file() else start_path


def load_plan_models(start_path: str, reference: str | None, lora: bool, with_value_head: bool = True):
    """`load_models` from directories alone (every process of a launched phase loads its own copy)."""
    tokenizer = load_tokenizer(start_path)
    value_head = load_value_head(start_path) if with_value_head else None
    adapter = Path(start_path) / "adapter"
    if lora and adapter.is_dir():
        from peft import PeftModel

        policy = PeftModel.from_pretrained(load_policy(policy_base(start_path)), adapter, is_trainable=True)
        return policy, None, tokenizer, value_head
    return load_policy(start_path), load_policy(reference) if reference else None, tokenizer, value_head


def make_trainer(config: PolicyConfig, policy, tokenizer, prompts: list, reward, *, value_head: dict | None = None,
                 **options) -> PolicyOptimizer:
    """The trainer of `config.algorithm`: PPO (its critic warmed by `value_head` when given) or GRPO (no critic);
    `options` (reference, state_dir, ...) go to either."""
    if config.algorithm == Algorithm.GRPO:
        return GRPOTrainer(config, policy, tokenizer, prompts, reward, **options)
    return PPOTrainer(config, policy, tokenizer, prompts, reward, value_head=value_head, **options)


@dataclass
class PolicyPlan:
    """Everything a PPO or GRPO run needs, resolved from the store and checked: JSON-able, so every process of a
    launched phase builds the same trainer from it without the store."""

    config: dict = field(metadata={"help": "PolicyConfig settings."})
    iterations: int = field(metadata={"help": "Iterations the run ends at (counting those before a resume)."})
    policy_path: str = field(metadata={"help": "The start policy's directory."})
    reference_path: str | None = field(metadata={"help": "The reference's directory (None: see reference_path)."})
    reward_members: list = field(metadata={"help": "[path, norm mean, norm std] per reward-model member, or []."})
    oracle: str | None = field(metadata={"help": "module:function scoring responses, when no reward model."})
    prompts: list = field(metadata={"help": "The training prompts (text or conversations): not excluded, fitting."})
    reward_functions: list = field(default_factory=list, metadata={
        "help": "Reward-function entries ({name, weight, options}), summed into the reward; [] for none."})
    rm_weight: float = field(default=1.0, metadata={"help": "The reward model's weight beside reward functions."})
    references: list = field(default_factory=list, metadata={
        "help": "Each training prompt's reference fields (None: none), in the order of `prompts`."})
    left_out: list = field(default_factory=list, metadata={
        "help": "Ids of the training prompts left out: too long for the policy's context with the response length."})
    state_dir: str | None = field(default=None, metadata={"help": "Where the resumable state is saved and read."})
    staged: str | None = field(default=None, metadata={"help": "Where rank 0 saves the trained policy."})


def plan_policy(store: Store, run: PolicyRun) -> tuple[PolicyPlan, Policy]:
    """The plan of `run` and its start policy, after every check that loads no model (settings, policies, reward
    model); the training prompts are those not excluded that fit the context with the response length. Writes
    nothing."""
    run.check()
    config = run.config
    config.check()
    start = start_policy(store, run.policy_id)
    members = []
    if RewardSource(run.reward).uses_reward_model:
        members = [[m.path, m.norm_mean, m.norm_std] for m in latest_reward_models(store)]
        if not members:
            raise NotFound("no reward model is registered; train one first (python app.py train-reward)")
    prompts = list_prompts(store, heldout=False, excluded=False)
    context = model_context(start.path)
    too_long = []
    if context is not None:  # nothing is truncated: a prompt that does not fit is left out, counted
        fit = PromptBudget(load_chat_format(start.path), context, config.response_length).fit(prompts)
        prompts, too_long = fit.fitting, [prompt.id for prompt, _ in fit.too_long]
    if len(prompts) < config.batch_size:
        why = f" ({fit.too_long_line()} left out)" if too_long else ""
        raise InvalidInput(f"{len(prompts)} training prompts can be used{why}, fewer than a batch of "
                           f"{config.batch_size}; lower the batch size, include or import more prompts, or lower "
                           "response_length")
    plan = PolicyPlan(asdict(config), run.iterations, start.path, reference_path(store, start, config.lora), members,
                      run.oracle if run.reward == RewardSource.ORACLE else None, [p.content for p in prompts],
                      left_out=too_long, reward_functions=[asdict(spec) for spec in reward_function_specs(run)],
                      rm_weight=run.rm_weight, references=[p.reference for p in prompts])
    return plan, start


def build_trainer(plan: PolicyPlan) -> PolicyOptimizer:
    """The trainer of `plan` (models loaded from its directories, the reward model on this process's device)."""
    config = PolicyConfig(**plan.config)
    member_dirs = [path for path, _, _ in plan.reward_members]
    if plan.reward_members and config.lora and shares_base(member_dirs, policy_base(plan.policy_path)):
        reward = SharedBaseReward(tuple(member_dirs), tuple((mean, std) for _, mean, std in plan.reward_members))
    elif plan.reward_members:
        reward = RewardScorer.from_dirs([path for path, _, _ in plan.reward_members],
                                        [(mean, std) for _, mean, std in plan.reward_members], device=default_device())
    else:
        reward = make_oracle_reward(plan.oracle) if plan.oracle else None
    policy, reference, tokenizer, value_head = load_plan_models(plan.policy_path, plan.reference_path, config.lora,
                                                                with_value_head=config.algorithm == Algorithm.PPO)
    if plan.reward_functions:
        reward = CombinedReward(reward, plan.rm_weight, plan_reward_functions(plan, tokenizer))
    return make_trainer(config, policy, tokenizer, plan.prompts, reward, reference=reference, value_head=value_head,
                        chat=load_chat_format(plan.policy_path, tokenizer))


def reward_function_specs(run: PolicyRun) -> list[RewardFunctionSpec]:
    """The run's reward functions, checked (custom ones allowed: a run's settings come from the command line or from
    a loop whose settings were checked where they came from)."""
    return parse_reward_functions(run.reward_functions, allow_custom=True)


def plan_reward_functions(plan: PolicyPlan, tokenizer) -> RewardFunctions:
    """The plan's reward functions, reading each training prompt's reference; a response's `completion_ids` are its
    tokens under the policy's tokenizer."""
    references = {prompt_key(prompt): reference for prompt, reference in zip(plan.prompts, plan.references,
                                                                             strict=True) if reference}
    entries = [{"name": e["name"], "weight": e["weight"], "label": e["label"], **e["options"]}
               for e in plan.reward_functions]
    return RewardFunctions.build(entries, references,
                                 encode=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"])


def train_plan(plan: PolicyPlan, reporter: Reporter,
               trainer: PolicyOptimizer | None = None) -> tuple[PolicyOptimizer, TrainResult]:
    """Run (or resume, from `plan.state_dir`) the plan on this process; the main process saves the policy into
    `plan.staged`. Raises JobCancelled after saving the state."""
    trainer = trainer or build_trainer(plan)
    trainer.use_state_dir(plan.state_dir)
    result = trainer.train(plan.iterations, reporter)
    if is_main_process() and plan.staged is not None:
        trainer.save_pretrained(plan.staged)
    trainer.accelerator.wait_for_everyone()
    return trainer, result


def run_phase(spec: dict, reporter: Reporter) -> dict:
    """One process of a launched PPO/GRPO phase (`trainers.entry.phase_worker`): the plan in `spec["plan"]`."""
    trainer, result = train_plan(PolicyPlan(**spec["plan"]), reporter)
    return {"iterations": result.iterations, "metrics": result.metrics, "digest": weights_digest(trainer.policy_model)}


def train_policy(store: Store, run: PolicyRun, job_id: int | None = None, state_name: str = "", step_offset: int = 0,
                 phase: str | None = "", listener: Reporter | None = None, trainer=None) -> PolicyOutcome:
    """Run (or resume) `run` reporting to `job_id`, register the new policy, and drop the resumable state.

    The state lives in `state_dir(store, job_id, state_name)`; metrics are logged at `step_offset + iteration`; the
    job's phase reads `"{phase} i/N"` ("": the algorithm, `ppo` or `grpo`; None: the caller keeps its own);
    `listener` hears every iteration. Raises JobCancelled (after saving the state) when the job's cancel flag is
    set. A job with an accelerate config trains in a launched phase (`trainers.jobs.phase_launch`), here otherwise.
    The loop calls it once per round, e.g.
    `train_policy(store, PolicyRun(M, "rm", round=g, settings=...), job.id, f"round-{g}", (g - 1) * M, phase=None)`.
    """
    plan, start = plan_policy(store, run)
    algorithm = Algorithm(plan.config["algorithm"])
    folder = state_dir(store, job_id, state_name) if job_id is not None else None
    plan.state_dir = str(folder) if folder is not None else None
    phase = algorithm.value if phase == "" else phase
    plan.staged = str(staging_path(store))
    launch = job_launch(store, job_id)
    try:
        if launch is not None:
            plan.config = with_launch_precision(plan.config, launch)
            done = launch_phase(store, job_id, launch, f"{algorithm.value}-{state_name or 'run'}",
                                {"kind": "policy", "plan": asdict(plan)}, {"step_offset": step_offset, "phase": phase},
                                listener)
            iterations, metrics = done["iterations"], done["metrics"]
        else:
            _, result = train_plan(plan, job_reporter(store, job_id, step_offset, phase, listener), trainer)
            iterations, metrics = result.iterations, result.metrics
    except BaseException:
        shutil.rmtree(plan.staged, ignore_errors=True)
        raise
    policy_id = register_trained(store, plan, start, run.round, iterations)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return PolicyOutcome(iterations, policy_id, metrics)


def register_trained(store: Store, plan: PolicyPlan, start: Policy, round: int | None, iterations: int) -> int:
    """Register the policy the plan staged as a child of `start`, in `round` (None: the start's + 1)."""
    algorithm = Algorithm(plan.config["algorithm"])
    return register_policy(store, Path(plan.staged), parent_id=start.id,
                           round=round if round is not None else start.round + 1,
                           note=f"{algorithm.value.upper()}, {iterations} iterations", made_by=algorithm.value)


def run_job(store: Store, job: Job) -> None:
    """The worker's runner for `ppo` jobs (every process under accelerate)."""
    train_policy(store, PolicyRun.from_dict(job.config), job.id)
