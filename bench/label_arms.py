"""The arms of bench/label_efficiency.py: each arm's loop settings and name, and one run of an arm at one label
budget and seed on its own copy of the demo (the oracle's own PPO, SFT alone, the loop with demonstrations written
before or during the rounds, a judge of set accuracy, graded votes), scored on the held-out prompts."""

from __future__ import annotations

import random
import shutil
import statistics
import time

from bench.common import smollm2_gguf
from bench.demo_runs import WORK, fresh_store, heldout_scores, oracle_win_rate, run_loop

SELECTORS = ("thompson", "info_gain", "diverse", "d_optimal")
ARMS = ("oracle", "random", *SELECTORS, "disagreement", "versions", "noisy", "noisy_random", "grpo", "dpo", "dpo_ties",
        "judge", "hybrid", "sft", "sft_prefs", "sft_each_round", "sft_only", "rank4", "rank4_noisy", "graded",
        "graded_noisy")
NOISY_JUDGE = "bench:noisy-oracle"  # the hybrid arm's judge, made in-process (`NoisyOracleJudge`)
JUDGE_ACCURACY = 0.8  # its accuracy per order (--judge-accuracy's default)
GRADED = ("graded", "graded_noisy")  # the loop's oracle grades its votes (graded_oracle_class)
ARM_SETTINGS = {"oracle": {}, "random": {"selector": "random"}, **{s: {"selector": s} for s in SELECTORS},
                "disagreement": {"selector": "disagreement", "ensemble": 2},
                "versions": {"selector": "random", "pair_with_previous": True},
                "noisy": {"oracle_noise": 0.1}, "noisy_random": {"oracle_noise": 0.1, "selector": "random"},
                "grpo": {"algorithm": "grpo", "group_size": 4, "policy_batch_size": 8},  # 8 prompts x G=4: PPO's 32
                # iterative DPO needs no reward model: no check pairs (they need one), every label on a random pair
                "dpo": {"algorithm": "dpo", "check_share": 0.0, "selector": "random"},
                "dpo_ties": {"algorithm": "dpo", "check_share": 0.0, "selector": "random", "dpo_train_ties": True},
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


class NoisyOracleJudge:
    """A judge client of set accuracy: each order answered as the oracle prefers (a tie when it scores both alike)
    with probability `accuracy`, else the other way (a random side for a tie); no probabilities, so a verdict's
    confidence is its two orders' agreement."""

    name = "noisy-oracle"

    def __init__(self, oracle, accuracy: float, seed: int):
        self.oracle, self.accuracy, self.rng = oracle, accuracy, random.Random(seed)

    def complete(self, messages):
        from labeling.judges.judge import Reply

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
    from labeling.queue.synthetic import load_scorer
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



def run_oracle_ppo(store, config) -> dict:
    """R rounds of M PPO iterations on the normalised oracle, with the loop's PPO settings."""
    import torch

    from labeling.queue.synthetic import load_scorer
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
    from labeling.queue.synthetic import load_scorer
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

    from labeling.queue.synthetic import OracleAnnotator

    @dataclass
    class GradedOracleAnnotator(OracleAnnotator):
        graded: bool = True

    return GradedOracleAnnotator


def one_run(arm: str, labels: int, seed: int, settings: dict, eval_samples: int, threads: int,
            name: str, demonstrations: int = 0, demonstration_m: int = 8,
            judge_accuracy: float = JUDGE_ACCURACY) -> dict:
    """One arm at one label budget and seed: {arm, labels, seed, sft, final, gain, win_rate, loop_win_rate,
    labels_used, seconds, reward_seconds, policy_seconds, select_seconds (per round)} (win_rate: oracle-judged on the
    bench's held-out samples; loop_win_rate: the loop's own blind win-rate pairs, judged by its oracle annotator; None
    for the oracle arm); its store is a folder named after the bench run `name` too, so two benches with other names
    can run side by side."""
    import torch

    from labeling.versions.winrate import winrate_report
    from storage.demonstrations import count_demonstrations
    from storage.labels import count_labels
    from storage.policies import latest_policy, list_policies
    from storage.rankings import ranking_verdicts
    from trainers.loop.config import LoopConfig

    torch.set_num_threads(threads)
    if arm in GRADED:  # the loop builds its oracle from labeling.queue.synthetic.OracleAnnotator: a grading one here
        import labeling.queue.synthetic

        labeling.queue.synthetic.OracleAnnotator = graded_oracle_class()
    started = time.perf_counter()
    config = LoopConfig.from_dict({**settings, "seed": seed, **ARM_SETTINGS[arm],
                                   **({"judge": str(smollm2_gguf())} if arm == "judge" else {})})
    if arm == "hybrid":  # the loop opens this judge instead of a model (judging runs in this process)
        from labeling.queue.synthetic import load_scorer
        from trainers.loop import judging

        judging.open_judge = lambda *args, **kwargs: NoisyOracleJudge(load_scorer(config.oracle), judge_accuracy,
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

