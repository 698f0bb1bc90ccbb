"""`python app.py ppo`: train a policy version with PPO (or GRPO: `--algorithm grpo`) in the terminal, as a `ppo`
job with a progress bar.

Options are generated from `PolicyRun` (`--iterations`, `--reward`, `--oracle`; `--policy vK` the version to train) and
`PolicyConfig` (every setting: `--algorithm`, `--group-size`, `--batch-size`, `--learning-rate`, ...), so their help and
defaults are the fields'. Imports nothing heavy at module level (app.py builds its parser from here); the run itself is
`trainers.jobs.policy_job`.

    python app.py ppo --db studio.db --iterations 20 --reward oracle --batch-size 32 --learning-rate 3e-4
    python app.py ppo --db studio.db --iterations 20 --algorithm grpo --group-size 8 --batch-size 8
    python app.py ppo --db studio.db --resume 7        # continue job 7 after a stop or a crash
    python app.py ppo --db studio.db --iterations 20 --accelerate-config accelerate/cpu-2proc.yaml   # 2 processes
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from storage import Store
from storage.types import JobStatus
from trainers.entry.options import add_options, given_options
from trainers.entry.terminal_job import POLICY_OPTION, new_run, report_unfinished, resumed_run, run_in_terminal
from trainers.entry.version_option import add_version_option
from trainers.jobs.follow import add_accelerate_option, launch_and_follow
from trainers.jobs.layer import JobKind
from trainers.loop.config import LoopConfig
from trainers.policy.config import Algorithm, PolicyConfig, PolicyRun
from trainers.reporting import Reporter

RUN_SKIPPED = ("round", "settings", "policy_id")  # set by the loop, not on the command line; --policy vK (below)
# the settings taken from the project's loop preset where the options leave them out (see command_defaults)
LOOP_DEFAULTS = ("batch_size", "num_mini_batches", "epochs", "learning_rate", "init_kl_coef", "lora",
                 "response_length", "temperature", "top_p", "top_k")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `PolicyRun` options, `--resume`, and one option per PolicyConfig field (`--batch-size`...)."""
    add_options(parser, PolicyRun, skip=RUN_SKIPPED)
    add_version_option(parser, POLICY_OPTION)
    parser.add_argument("--resume", type=int, default=None, metavar="JOB", help="continue a stopped or failed PPO job")
    add_accelerate_option(parser)
    add_options(parser.add_argument_group("PPO and GRPO settings (left out: the project's loop preset gives the batch "
                                          "size, mini-batches, epochs, learning rate, β, LoRA, response length and "
                                          "sampling; the others' defaults as shown)"), PolicyConfig)


def command_defaults(given: dict, preset: LoopConfig | None = None) -> dict:
    """The settings this command takes from the project's loop preset (`preset`; the demo's when None) where its
    options are left out (`LOOP_DEFAULTS`); the mini-batch count only when it divides the batch."""
    from trainers.loop.config import policy_settings

    loop = policy_settings(preset or LoopConfig())
    defaults = {name: loop[name] for name in LOOP_DEFAULTS if name not in given}
    if given.get("batch_size", loop["batch_size"]) % defaults.get("num_mini_batches", 1):
        del defaults["num_mini_batches"]
    return defaults


def run_from_args(args: argparse.Namespace, preset: LoopConfig | None = None) -> PolicyRun:
    given = given_options(args, PolicyConfig)
    return PolicyRun(**given_options(args, PolicyRun, skip=RUN_SKIPPED),
                     settings={**command_defaults(given, preset), **given})


class ProgressBar(Reporter):
    """A terminal bar over the iterations, with the last score and KL."""

    def __init__(self, job_id: int, iterations: int, algorithm: Algorithm = Algorithm.PPO):
        from tqdm import tqdm

        self.prefix = algorithm.value
        self.bar = tqdm(total=iterations, desc=f"{self.prefix} job {job_id}", unit="it", file=sys.stderr)

    def on_step(self, step: int, metrics) -> None:
        self.bar.update(step - self.bar.n)
        self.bar.set_postfix(score=f"{metrics[f'{self.prefix}/score']:.3f}", kl=f"{metrics[f'{self.prefix}/kl']:.2f}")


def checked_run(args: argparse.Namespace, store: Store) -> PolicyRun:
    """The run to start (its start policy fixed now, so a resume trains the same version) or to resume."""
    if args.resume is not None:
        return resumed_run(store, args.resume, JobKind.POLICY, PolicyRun, "a PPO")
    PolicyConfig.check_algorithm(args.algorithm or Algorithm.PPO)  # `--algorithm dpo`: one line, before anything
    run, settings_line = new_run(args, store, run_from_args)
    print(settings_line)  # stdout: a bad input stays one line on stderr
    return run


def run(args: argparse.Namespace, store: Store) -> int:
    """Train in this process with a progress bar, or (--accelerate-config) through the launcher, followed here;
    every check runs before the job row is written."""
    from trainers.jobs.policy_job import plan_policy

    run = checked_run(args, store)
    if args.accelerate_config is None:
        return run_here(args, store, run)
    plan_policy(store, run)  # every check that loads no model; the phase's processes load them
    job = launch_and_follow(store, JobKind.POLICY, asdict(run), args.accelerate_config, resume=args.resume)
    name = run.config.algorithm
    if job.status is JobStatus.COMPLETED:
        from labeling.versions.winrate import registered_version
        from storage.policies import latest_policy, list_policies

        print(f"{name} job {job.id}: completed; registered policy "
              f"{registered_version(list_policies(store), latest_policy(store).id)}")
        return 0
    return report_unfinished(name, job)


def run_here(args: argparse.Namespace, store: Store, run: PolicyRun) -> int:
    """Train in this process with a progress bar."""
    from labeling.versions.winrate import registered_version
    from storage.policies import list_policies
    from trainers.jobs.policy_job import build_trainer, plan_policy, train_policy

    plan = plan_policy(store, run)[0]
    if plan.left_out:
        print(f"{len(plan.left_out)} training prompts are left out, too long for the policy's context with "
              f"{run.config.response_length} response tokens (python app.py prompts --db {store.path} lists them)")
    trainer = build_trainer(plan)  # every check, models loaded, before the job row
    name = trainer.algorithm.value
    return run_in_terminal(
        store, JobKind.POLICY, run, args.resume, name,
        bar=lambda job_id: ProgressBar(job_id, run.iterations, trainer.algorithm),
        train=lambda job_id, bar: train_policy(store, run, job_id, listener=bar, trainer=trainer),
        done_line=lambda job_id, outcome: f"{name} job {job_id}: completed; registered policy "
                                          f"{registered_version(list_policies(store), outcome.policy_id)}")
