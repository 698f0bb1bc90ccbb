"""PPO runs on a store: `python app.py ppo`, the worker's `ppo` jobs, and the loop's PPO phase all start here.

A run (`PPORun`, saved as the job's config so a resumed job repeats it) trains a policy version of the store
(default: the newest) against the newest reward model ("rm", its ensemble averaged, normalised) or an oracle
scoring function ("oracle", for benchmarks), then registers the new version with the start policy as parent.

Models: the reference is the lineage's root (the SFT policy). With LoRA, a start policy saved by an earlier LoRA
run carries its adapter in `adapter/`; training continues that adapter on its base, which is then the reference.
Otherwise fresh adapters go on the start policy, which is then the reference. A saved value head is reused.

    python app.py ppo --db studio.db --iterations 20 --reward oracle --batch-size 32 --learning-rate 3e-4
    python app.py ppo --db studio.db --resume 7        # continue job 7 after a stop or a crash
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

from storage import Store
from storage import jobs as job_rows
from storage.errors import InvalidInput, NotFound
from storage.types import Job, JobStatus, Policy

DEFAULT_ORACLE = "assets.lexicon:sentiment_score"
REWARDS = ("rm", "oracle")


@dataclass
class PPORun:
    """What a PPO job does; `ppo` holds `trainers.ppo.PPOConfig` fields (defaults for those left out)."""

    iterations: int = field(default=10, metadata={"help": "PPO iterations to run."})
    reward: str = field(default="rm", metadata={"help": "rm (newest reward model) or oracle (scoring function)."})
    oracle: str = field(default=DEFAULT_ORACLE, metadata={"help": "module:function scoring a response text."})
    policy_id: int | None = field(default=None, metadata={"help": "Policy version to train (None: the newest)."})
    round: int | None = field(default=None, metadata={"help": "Round of the new policy (None: the start's + 1)."})
    ppo: dict = field(default_factory=dict, metadata={"help": "PPOConfig settings."})

    def check(self) -> None:
        if self.iterations < 1:
            raise InvalidInput(f"--iterations must be at least 1, got {self.iterations}")
        if self.reward not in REWARDS:
            raise InvalidInput(f"unknown reward {self.reward!r}; use rm or oracle")

    @classmethod
    def from_dict(cls, values: dict) -> PPORun:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


@dataclass
class PPOOutcome:
    iterations: int = field(metadata={"help": "Iterations done in total."})
    cancelled: bool = field(metadata={"help": "The cancel flag stopped the run; nothing was registered."})
    policy_id: int | None = field(metadata={"help": "The registered policy version (None when cancelled)."})
    metrics: dict = field(metadata={"help": "The last iteration's metrics."})


def make_oracle_reward(spec: str = DEFAULT_ORACLE) -> Callable:
    """`score(prompts, responses)` from a `module:function` that scores one response text."""
    import torch

    from labeling.synthetic import load_scorer

    scorer = load_scorer(spec)
    return lambda prompts, responses: torch.tensor([float(scorer(r)) for r in responses])


def oracle_reward(prompts: list[str], responses: list[str]):
    """The demo's oracle (the sentiment lexicon) as a PPO reward."""
    return make_oracle_reward()(prompts, responses)


def state_dir(store: Store, job_id: int, name: str = "") -> Path:
    """Where a job's resumable PPO state lives (`name` tells apart several PPO phases of one job)."""
    return store.data_dir / "ppo" / f"job-{job_id}{'-' + name if name else ''}"


def start_policy(store: Store, policy_id: int | None) -> Policy:
    from storage.policies import get_policy, latest_policy

    policy = get_policy(store, policy_id) if policy_id is not None else latest_policy(store)
    if policy is None:
        raise NotFound("the store has no policy to train; start the studio once to seed the demo, or register one")
    return policy


def load_models(store: Store, start: Policy, lora: bool):
    """(policy, reference or None, tokenizer, value head or None) for a run starting from `start`."""
    from storage.policies import root_policy

    from .models import load_policy, load_tokenizer
    from .ppo import load_value_head

    tokenizer = load_tokenizer(start.path)
    value_head = load_value_head(start.path)
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


def build_trainer(store: Store, run: PPORun):
    """The trainer for `run`, after every check (models, reward model, prompts, settings); writes nothing."""
    import torch

    from storage.prompts import list_prompts

    from .ppo import PPOTrainer
    from .ppo_config import PPOConfig
    from .reward import RewardScorer

    run.check()
    unknown = sorted(set(run.ppo) - {f.name for f in fields(PPOConfig)})
    if unknown:
        raise InvalidInput(f"unknown PPO setting {unknown[0]!r}; see python app.py ppo --help for the settings")
    config = PPOConfig(**run.ppo)
    config.check()
    start = start_policy(store, run.policy_id)
    if run.reward == "rm":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else "cpu"
        reward = RewardScorer.from_store(store, device=device)
    else:
        reward = make_oracle_reward(run.oracle)
    policy, reference, tokenizer, value_head = load_models(store, start, config.lora)
    prompts = [p.text for p in list_prompts(store, heldout=False)]
    trainer = PPOTrainer(config, policy, tokenizer, prompts, reward, reference=reference, value_head=value_head)
    return trainer, start


def train_ppo(store: Store, run: PPORun, job_id: int | None = None, state_name: str = "", step_offset: int = 0,
              on_iteration: Callable[[int, dict], None] | None = None, report_progress: bool = True,
              trainer=None) -> PPOOutcome:
    """Run (or resume) `run` reporting to `job_id`, register the new policy, and drop the resumable state.

    The state lives in `state_dir(store, job_id, state_name)`; metrics are logged at `step_offset + iteration`.
    The loop calls it once per round, e.g. `train_ppo(store, PPORun(M, "rm", policy_id=p.id, round=g, ppo=...),
    job.id, state_name=f"round-{g}", step_offset=(g - 1) * M, report_progress=False)`.
    """
    if trainer is None:
        trainer, start = build_trainer(store, run)
    else:
        start = start_policy(store, run.policy_id)
    folder = state_dir(store, job_id, state_name) if job_id is not None else None
    trainer.attach(store, job_id, folder)
    result = trainer.train(run.iterations, step_offset=step_offset, on_iteration=on_iteration,
                           report_progress=report_progress)
    if result.cancelled:
        return PPOOutcome(result.iterations, True, None, result.metrics)
    round = run.round if run.round is not None else start.round + 1
    policy_id = trainer.register_policy(store, parent_id=start.id, round=round)
    if folder is not None and trainer.accelerator.is_main_process:
        shutil.rmtree(folder, ignore_errors=True)
    return PPOOutcome(result.iterations, False, policy_id, result.metrics)


def run_job(store: Store, job: Job) -> None:
    """Worker entry point for `ppo` jobs (every process under accelerate)."""
    train_ppo(store, PPORun.from_dict(job.config), job.id)


# ----- the command line -------------------------------------------------------------------------------------------

def _option_type(annotation: str):
    return {"int": int, "float": float, "str": str}.get(annotation.replace(" | None", ""))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--iterations`, `--reward`, `--policy`, `--resume`, and one option per PPOConfig field (`--batch-size`...)."""
    from .ppo_config import PPOConfig

    parser.add_argument("--iterations", type=int, default=10, help="PPO iterations to run")
    parser.add_argument("--reward", choices=REWARDS, default="rm",
                        help="rm: the newest reward model; oracle: the demo's lexicon score (benchmarks)")
    parser.add_argument("--oracle", default=DEFAULT_ORACLE, help="module:function scoring a text, for --reward oracle")
    parser.add_argument("--policy", type=int, default=None, metavar="ID", help="policy version to train (default: newest)")
    parser.add_argument("--resume", type=int, default=None, metavar="JOB", help="continue a stopped or failed PPO job")
    group = parser.add_argument_group("PPO settings")
    for f in fields(PPOConfig):
        flag = "--" + f.name.replace("_", "-")
        help = f"{f.metadata['help']} (default: {f.default})"
        if f.type == "bool":
            group.add_argument(flag, action="store_true", default=None, help=help)
        elif f.type == "list[str] | None":
            group.add_argument(flag, nargs="+", default=None, help=help)
        else:
            group.add_argument(flag, type=_option_type(f.type), default=None, help=help)


def run_from_args(args: argparse.Namespace) -> PPORun:
    from .ppo_config import PPOConfig

    settings = {f.name: getattr(args, f.name) for f in fields(PPOConfig) if getattr(args, f.name, None) is not None}
    return PPORun(iterations=args.iterations, reward=args.reward, oracle=args.oracle, policy_id=args.policy,
                  ppo=settings)


def run(args: argparse.Namespace, store: Store) -> int:
    """Train in this process with a progress bar; every check runs before the job row is written."""
    from tqdm import tqdm

    from .worker import run_job as run_claimed_job

    if args.resume is not None:
        job = job_rows.get_job(store, args.resume)
        if job.kind != "ppo":
            raise InvalidInput(f"job {job.id} is a {job.kind} job, not a PPO job; give the id of a PPO job")
        run = PPORun.from_dict(job.config)
        trainer, _ = build_trainer(store, run)
        job_id = job_rows.requeue_job(store, job.id).id
    else:
        run = run_from_args(args)
        run.policy_id = start_policy(store, run.policy_id).id  # fixed now, so a resume trains the same version
        trainer, _ = build_trainer(store, run)
        job_id = job_rows.create_job(store, "ppo", asdict(run))
    job = job_rows.claim_job(store, job_id, os.getpid())
    bar = tqdm(total=run.iterations, desc=f"ppo job {job_id}", unit="it", file=sys.stderr)
    outcome: list[PPOOutcome] = []

    def progress(iteration: int, metrics: dict) -> None:
        bar.update(iteration - bar.n)
        bar.set_postfix(score=f"{metrics['ppo/score']:.3f}", kl=f"{metrics['ppo/kl']:.2f}")

    status = run_claimed_job(store, job, runner=lambda s, j: outcome.append(
        train_ppo(s, run, j.id, on_iteration=progress, trainer=trainer)))
    bar.close()
    if status is JobStatus.COMPLETED:
        print(f"ppo job {job_id}: completed; registered policy version {outcome[0].policy_id}")
        return 0
    if status is JobStatus.CANCELLED:
        print(f"ppo job {job_id}: cancelled after {trainer.iteration} iterations; resume with --resume {job_id}")
        return 0
    print(f"ppo job {job_id}: failed: {job_rows.get_job(store, job_id).error.splitlines()[-1]}", file=sys.stderr)
    return 1
