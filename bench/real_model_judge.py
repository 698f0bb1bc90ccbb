"""SmolLM2 as a judge on the real-model bench: its agreement with the bench's oracle, and what judging costs a round.

In a fresh project started on the model (`python app.py init`: bench/real_project.py's `new_project`), the SFT
policy samples two responses to each of `--pairs` training prompts, and each prompt's two make one queued pair (the
loop's own sampling and queueing: `trainers.loop.sampling`). The model itself then judges every pair through the
studio's judge code, the path `python app.py label --annotator judge --judge MODEL --suggest-only` takes
(`open_judge`, the shipped MT-Bench pairwise template, `judge_queue`: both orders, strict parsing, verdicts stored
apart as suggestions); then the bench's rule oracle (`bench.chat_prompts:concise_score`, through `OracleAnnotator`)
labels the same pairs, and the studio's agreement code (`labeling.judges.judge_agreement`, as `status` and the Data tab
show it) compares them: agreement with its 95% Wilson interval and Cohen's κ with its 95% interval, on the pairs both
judged (a judge's tie, which includes orders that disagree, agrees only with the oracle's tie).

Cost: the seconds per verdict (both orders, one forward pass each with a local judge), the judge's load time (the
loop opens it once per round; the first load converts a GGUF file), and so the judging a round of the bench's loop
would do (its `labels_per_round` pairs and its win-rate pairs), and that time's share of a round when the judge
labels instead of the oracle: the round's wall time comes from `--part round`'s bench/out/real_model_round.json (or
`--round-seconds`). A table is printed and bench/out/real_model_judge.json written.

    python bench/real_model.py --part judge                              # 40 pairs of 128-token responses
    python bench/real_model.py --part judge --pairs 2 --new-tokens 16    # a smoke run
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT, ROOT  # noqa: E402
from bench.real_project import BENCH_SETTINGS, ORACLE, PROJECTS, ROUND_JSON, new_project  # noqa: E402

JSON_OUT = OUT / "real_model_judge.json"


def queue_policy_pairs(db: Path, pairs: int, new_tokens: int, seed: int) -> list[int]:
    """Two samples of the SFT policy on each of the first `pairs` training prompts, queued as one pair each."""
    from storage import Store
    from storage.generations import SAMPLE_SOURCE, list_generations
    from storage.policies import list_policies
    from storage.prompts import list_prompts
    from trainers.loop.sampling import SamplingConfig, queue_random_pairs, sample_policy

    store = Store(db)
    policy = list_policies(store)[0]
    prompts = list_prompts(store, heldout=False)[:pairs]
    if len(prompts) < pairs:
        raise SystemExit(f"--pairs {pairs}: the bench's project has only {len(prompts)} training prompts")
    sample_policy(store, policy, prompts, SamplingConfig(samples_per_prompt=2, max_new_tokens=new_tokens), seed)
    samples = list_generations(store, policy_id=policy.id, source=SAMPLE_SOURCE)
    return queue_random_pairs(store, samples, pairs, seed, round=1)


def judge_pairs(db: Path, model: Path, pairs: int) -> dict:
    """The model judges the queued pairs as `label --annotator judge --suggest-only` does; timings and counts."""
    from labeling.judges.judge import JudgeTemplate, judge_queue
    from storage import Store
    from trainers.models.judges import open_judge

    store = Store(db)
    started = time.perf_counter()
    open_judge(str(model), store.data_dir)  # the first load converts a GGUF file once
    first_load = time.perf_counter() - started
    started = time.perf_counter()
    client = open_judge(str(model), store.data_dir)  # as each round of a loop opens it
    load = time.perf_counter() - started
    stamps = [time.perf_counter()]
    run = judge_queue(store, client, JudgeTemplate.load(), pairs, trains=False,
                      progress=lambda done, total: stamps.append(time.perf_counter()))
    each = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    print(run.line(), file=sys.stderr)
    return {"judge": client.name, "counts": run.counts, "first_load_s": first_load, "load_s": load,
            "s_per_verdict": (stamps[-1] - stamps[0]) / max(1, run.judged),
            "s_per_verdict_median": statistics.median(each) if each else None}


def compare_with_oracle(db: Path, judge: str, pairs: int) -> dict:
    """The oracle labels the pairs; the judge's agreement and κ with it (95% intervals) and both sides' ties."""
    from labeling.judges.judge_agreement import store_agreement
    from labeling.queue.synthetic import ORACLE_NAME, OracleAnnotator
    from storage import Store
    from storage.judge_verdicts import list_verdicts
    from storage.labels import list_labels
    from storage.types import Outcome

    store = Store(db)
    OracleAnnotator.from_spec(ORACLE).label(store, pairs)
    [overall] = [f for f in store_agreement(store, by_round=False) if f.judge == judge] or [None]
    verdicts = [v for v in list_verdicts(store, judge=judge) if v.status == "ok"]
    ties = [v for v in verdicts if v.outcome is Outcome.TIE]
    both_c = sum(all(order.get("verdict") == "C" for order in v.orders) for v in ties)
    figures = {name: getattr(overall, name, None) for name in ("items", "agreement", "agreement_low",
                                                                 "agreement_high", "kappa", "kappa_low", "kappa_high")}
    return {**figures, "items": figures["items"] or 0, "judge_ties": len(ties),
            "judge_ties_orders_disagree": len(ties) - both_c,
            "oracle_ties": sum(label.outcome is Outcome.TIE for label in list_labels(store, annotator=ORACLE_NAME)),
            "mean_confidence": statistics.mean(v.confidence for v in verdicts) if verdicts else None}


def round_cost(db: Path, timing: dict, overrides: dict, round_seconds: float | None) -> dict:
    """The judging one round of the bench's loop would do (its labels and win-rate pairs), and its share of the
    round when the judge labels instead of the oracle (the round's time: `round_seconds`, else --part round's)."""
    from storage import Store
    from trainers.loop.presets import project_preset

    config = project_preset(Store(db)).config.updated({**BENCH_SETTINGS, **overrides})
    verdicts = config.labels_per_round + config.winrate_pairs + config.winrate_previous
    judging = timing["load_s"] + verdicts * timing["s_per_verdict"]
    if round_seconds is None and ROUND_JSON.is_file():
        round_seconds = json.loads(ROUND_JSON.read_text())["round_s"]
    share = None if round_seconds is None else judging / (round_seconds + judging)
    return {"labels_per_round": config.labels_per_round,
            "winrate_pairs": config.winrate_pairs + config.winrate_previous, "verdicts_per_round": verdicts,
            "judging_s_per_round": judging, "round_s_with_oracle": round_seconds, "judging_share": share}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def print_table(result: dict) -> None:
    a, t, c, counts = result["agreement"], result["timing"], result["round"], result["timing"]["counts"]
    mixed = a["judge_ties_orders_disagree"]
    print(f"\nJudge {t['judge']} on {result['pairs']} pairs of its own responses ({result['new_tokens']} new tokens at "
          f"most), against the rule oracle {ORACLE}\n")
    print("| measure | value |\n|---|---|")
    rows = [
        ("pairs compared (both judged)", a["items"]),
        ("agreement [95% Wilson]", f"{_num(a['agreement'])} [{_num(a['agreement_low'])}, {_num(a['agreement_high'])}]"),
        ("Cohen's κ [95%]", f"{_num(a['kappa'])} [{_num(a['kappa_low'])}, {_num(a['kappa_high'])}]"),
        ("judge ties (the orders disagreed / both said C)", f"{a['judge_ties']} ({mixed} / {a['judge_ties'] - mixed})"),
        ("oracle ties", a["oracle_ties"]),
        ("verdicts / timeouts / refusals / unparseable / errors",
         " / ".join(str(counts[s]) for s in ("ok", "timeout", "refusal", "unparseable", "error"))),
        ("mean confidence of a verdict", _num(a["mean_confidence"])),
        ("s per verdict (both orders; mean, median)", f"{_num(t['s_per_verdict'])}, {_num(t['s_per_verdict_median'])}"),
        ("judge load s (first: GGUF converted; again, as a round opens it)",
         f"{_num(t['first_load_s'], 1)}; {_num(t['load_s'], 1)}"),
        (f"judging per round ({c['labels_per_round']} labels + {c['winrate_pairs']} win-rate pairs), s",
         _num(c["judging_s_per_round"], 0)),
        ("round with the oracle, s (--part round)", _num(c["round_s_with_oracle"], 0)),
        ("judging's share of a round the judge labels", _pct(c["judging_share"])),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")


def part_judge(model: Path, pairs: int, new_tokens: int | None, overrides: dict, round_seconds: float | None = None,
               seed: int = 0) -> dict:
    if pairs < 1:
        raise SystemExit(f"--pairs must be 1 or more, got {pairs}")
    new_tokens = new_tokens or {**BENCH_SETTINGS, **overrides}["response_length"]
    db = new_project(PROJECTS / "judge", model, seed=seed)
    queued = queue_policy_pairs(db, pairs, new_tokens, seed)
    timing = judge_pairs(db, model, len(queued))
    result = {"model": str(model), "pairs": len(queued), "new_tokens": new_tokens, "oracle": ORACLE,
              "timing": timing, "agreement": compare_with_oracle(db, timing["judge"], len(queued)),
              "round": round_cost(db, timing, overrides, round_seconds)}
    print_table(result)
    JSON_OUT.parent.mkdir(parents=True, exist_ok=True)
    JSON_OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {JSON_OUT.relative_to(ROOT)}")
    return result
