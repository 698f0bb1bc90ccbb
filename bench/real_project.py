"""Projects on a real chat model for the real-model benches (bench/real_model*.py, bench/ppo_throughput.py
--model): a project started through the studio's own door (`python app.py init`), the settings that shrink the
loop's real-model preset to fit a CPU, the rule oracle, the process's peak memory, and samples before and after.

The prompts and the oracle are bench/chat_prompts.py's: chat questions, and a rule that prefers answers of about 30
words without markdown lists."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from bench.chat_prompts import chat_prompts
from bench.common import OUT, ROOT

PROJECTS = OUT / "real_model"  # the real-model benches' stores
ROUND_JSON = OUT / "real_model_round.json"  # --part round's wall time, for --part judge
ORACLE = "bench.chat_prompts:concise_score"
HELDOUT = 24  # held-out prompts: the evaluation samples each of them twice, per version
BENCH_SETTINGS = {"prompts_per_round": 16, "samples_per_prompt": 4, "labels_per_round": 64, "queue_reserve": 10,
                  "response_length": 128, "policy_iterations": 8, "policy_batch_size": 8, "policy_mini_batches": 2,
                  "annotator": "oracle", "oracle": ORACLE}

INSTRUCTIONS = [  # varied lengths, so the batch is left-padded as a real one is
    "Write a haiku about autumn.", "What is the capital of Australia?", "Explain photosynthesis to a child.",
    "Give me three tips for a job interview.", "Translate 'good morning' into French and Spanish.",
    "Why is the sky blue?", "Write a short poem about a lighthouse keeper who has not seen a ship in years.",
    "Summarise the plot of Romeo and Juliet in two sentences.", "How do I boil an egg?",
    "List four animals that live in the Arctic and say how each keeps warm.", "What does a compiler do?",
    "Suggest a name for a bakery run by two sisters who love science fiction.", "Is a tomato a fruit?",
    "Describe the smell of rain.", "Write a polite email declining a meeting invitation for next Tuesday.",
    "What are the rules of chess for the knight?", "Give me a recipe idea with rice, beans and spinach.",
    "Tell me a joke about computers.", "Explain what a black hole is in one paragraph.", "How many legs has a spider?",
    "Write the opening line of a mystery novel set on a train crossing Siberia in winter.",
    "What is the difference between weather and climate?", "Name three famous painters and one work by each.",
    "How can I improve my sleep?", "What is 17 times 23?", "Write a limerick about a cat who learned to code.",
    "Why do leaves change colour in autumn?", "Give two arguments for and two against school uniforms.",
    "What is the boiling point of water on Mount Everest, roughly, and why is it lower?", "Define 'ephemeral'.",
    "Write a two-line dialogue between a robot and a gardener.", "What should I pack for a weekend of hiking?",
]


def project_policy(model: Path) -> Path:
    """Policy v0's folder of a project started on `model` with `python app.py init` (once; reused after)."""
    from storage import Store
    from storage.policies import list_policies

    db = PROJECTS / f"{model.name.removesuffix('.gguf')}.db"
    if not db.exists():
        PROJECTS.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, str(ROOT / "app.py"), "init", "--db", str(db), "--model", str(model)],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if done.returncode:
            raise SystemExit(f"python app.py init --policy {model} failed: {done.stderr.strip().splitlines()[-1]}"
                             + ("\n(until init reads GGUF files, give --model a converted folder)"
                                if model.suffix == ".gguf" else ""))
        print(done.stdout.strip(), file=sys.stderr)
    return Path(list_policies(Store(db))[0].path)


def new_project(folder: Path, model: Path, seed: int) -> Path:
    """A fresh store under `folder` started on `model` with the bench's prompts (`python app.py init`)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    train, heldout = chat_prompts(seed=seed)
    for name, rows in (("train.jsonl", train), ("heldout.jsonl", heldout[:HELDOUT])):
        (folder / name).write_text("".join(json.dumps({"prompt": row}) + "\n" for row in rows))
    db = folder / "studio.db"
    subprocess.run([sys.executable, "app.py", "init", "--db", str(db), "--model", str(model), "--prompts",
                    str(folder / "train.jsonl"), "--heldout", str(folder / "heldout.jsonl")], cwd=ROOT, check=True)
    return db


def peak_rss_mb() -> float:
    """Peak resident memory of this process (the benches run the loop in it), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def show_samples(db: Path, count: int = 3, names: tuple[str, str] = ("SFT", "final")) -> None:
    """The first held-out prompts' samples from the first policy and from the newest one, with their oracle scores,
    shown under `names`."""
    from storage import Store
    from storage.generations import eval_samples
    from storage.policies import latest_policy

    store = Store(db)
    first, last = eval_samples(store, 1), eval_samples(store, latest_policy(store).id)
    for before, after in list(zip(first[::2], last[::2], strict=True))[:count]:
        print(f"\nprompt: {before['prompt'][:100]!r}")
        for name, sample in zip(names, (before, after), strict=True):
            print(f"  {name:>6} ({sample.get('oracle', float('nan')):+.2f}): {sample['text'][:300]!r}")
