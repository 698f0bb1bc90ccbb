"""The Train tab's words for a newcomer: one plain sentence under each field (what it does, what its default means;
Gradio's `info=`), the heading that folds the advanced fields with its links to the docs (docs/ is served read-only
for them), the legend under a result card, and why a queued job waits. The fields are named as `LoopConfig`'s
(`app.train.train_form.FORM`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"  # served read-only (`gr.set_static_paths` in the build)
# the counts shown outside the advanced heading, beside the preset, the annotator, the optimiser and SFT first (the
# other fields fold under the heading)
COUNTS = ("rounds", "samples_per_prompt", "labels_per_round", "label_budget", "policy_iterations")

INFO = {
    "preset": "The starting values of every field below: `demo` for the bundled tiny model, `real model (LoRA)` for a "
              "pretrained chat model (the line above says which fits this project).",
    "annotator": "Who labels each round's pairs: `human` waits for people in the Label tab, `oracle` is the demo's "
                 "synthetic scorer (instant, for trying things out), `judge` asks a judge model; the default is "
                 "`human` once people have labelled this store.",
    "algorithm": "How the policy learns each round: `ppo` (a reward model and a critic), `grpo` (G answers per prompt "
                 "compared with each other, no critic) or `dpo` (straight from the labels, no reward model needed).",
    "rounds": "How many times the loop runs sample → label → train the reward model → improve the policy; each round "
              "registers a new version.",
    "samples_per_prompt": "Answers the policy writes to each prompt per round; pairs to label are drawn among them "
                          "(at least 2).",
    "labels_per_round": "Labels collected in the first round; each later round collects N × the label decay "
                        "(check pairs included).",
    "label_budget": "The labels of the whole loop, split over the rounds for you; leave it blank to use N instead.",
    "policy_iterations": "Optimisation steps of the policy each round (PPO or GRPO; DPO runs epochs over the labels "
                         "instead).",
    "sft_first": "Before round 1, fine-tune the policy on the demonstrations written in the Label tab (W) and use "
                 "that version as the SFT policy; off: start from the newest version as it is.",
    "selector": "Which two answers go to the labellers: `random` (the default, as good as any on the demo), "
                "`disagreement` (where the reward models of the ensemble disagree most), or a choice from the reward "
                "model's uncertainty: `thompson` (pairs likely to hold the best answer), `info_gain` (the most "
                "informative), `diverse` (informative and spread over prompts), `d_optimal` (covering the most "
                "directions).",
    "ensemble": "How many reward models train side by side, each on a resample of the labels; 1 is one model, "
                "`disagreement` needs 2 or more.",
    "kl_coef": "β: how strongly PPO and GRPO are held close to the SFT policy; higher keeps answers "
               "closer to it, 0 lets them drift freely.",
    "reward_lr": "The reward model's learning rate (the preset's suits its model: about 1e-3 for the demo or a LoRA "
                 "adapter, 1e-5 for a full fine-tune).",
    "policy_lr": "The policy optimiser's learning rate; too high garbles the answers, too low changes nothing.",
    "reward_epochs": "Passes of the reward model over all the labels each round.",
    "group_size": "GRPO only: answers sampled per prompt and compared with each other (at least 2).",
    "dpo_beta": "DPO only: how strongly DPO keeps the policy close to the SFT policy (its own β; higher: closer).",
    "label_decay": "Each later round collects this share of the previous round's labels; 1 collects N every round.",
    "check_share": "The share of each round's labels spent on check pairs, which check that the reward model agrees "
                   "with people; 0 turns the check off.",
    "reward_patience": "Stop training the reward model after this many checks without a better validation loss, "
                       "keeping its best weights; 0 trains every epoch.",
    "reward_warm_start": "Start each round's reward model from the previous round's instead of from scratch "
                         "(faster; off trains afresh each round).",
    "on_warning": "What the loop does when a failure warning fires (e.g. reward hacking): `continue`, or `pause` "
                  "before the next policy phase so you can look; Resume goes on.",
    "advanced": "Any other loop setting as a JSON object (the fields of LoopConfig in trainers/loop/config.py), "
                "applied on top of the fields above, e.g. {\"seed\": 1, \"lora\": true}; {} changes nothing.",
}

ADVANCED_HEADING = "Advanced settings"


def doc_link(page: str) -> str:
    """A page of docs/ as the studio serves it, relative to the page (so it holds under `serve --root-path`)."""
    name, _, anchor = page.partition("#")
    return f"gradio_api/file={quote(str(DOCS_DIR / name))}" + (f"#{anchor}" if anchor else "")


def advanced_line() -> str:
    """The line under the advanced heading: the fields suit most loops; where each is explained."""
    return ("The fields below suit most loops as the preset sets them. Each is explained in "
            f"[the loop's options]({doc_link('commands.md#loop')}); the reward functions in "
            f"[rewards]({doc_link('rewards.md')}), failure warnings and check pairs in "
            f"[warnings]({doc_link('warnings.md')}), what the settings measured in "
            f"[benchmarks]({doc_link('benchmarks.md')}).")

# why a job sits queued: its worker process is starting (issue 52 saw 15-25 s on 2 cores; `python -c "import
# trainers.entry.worker"` took 56-63 s on a busy 2-core machine)
STARTING = "starting the worker: loading torch and the trainers (often 15–25 s, longer on a busy machine)…"

RESULT_LEGEND = ("*vs SFT*: the share of blind pairs in which the version's answer beat the SFT policy's, with its "
                 "95% interval. *Oracle score*: the demo's synthetic scorer's mean score of the version's answers to "
                 "held-out prompts (higher is better; the `oracle` annotator labels by the same score).")
