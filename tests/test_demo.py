"""The embedded demo: lexicon oracle, corpus and prompts, the deterministic build, and the shipped SFT policy."""

import functools

import pytest
import torch
from safetensors.torch import load_file

import assets.build_demo as build_module
from assets.build_demo import DEMO_POLICY_DIR, DemoConfig, build_demo, ensure_demo_policy
from assets.corpus import build_corpus, demo_prompts
from assets.lexicon import NEGATIVE, POSITIVE, sentiment_score, words
from trainers.models.generation import HFGenerator
from trainers.models.loading import load_policy, load_tokenizer


@pytest.mark.parametrize("text, expected", [
    ("The acting was brilliant, but the plot was boring and dull.", -1.0),
    ("", 0.0),
    ("the movie was", 0.0),
    ("BRILLIANT!!! brilliant... Brilliant", 3.0),
    ("a waste of time , i hated it .", -2.0),
    ("unboring and brilliantly done", 0.0),  # whole words only
    ("moving,funny;awful", 1.0),  # punctuation separates words
    ("i loved it and i would recommend it , the best film", 3.0),
])
def test_sentiment_score_hand_cases(text, expected):
    assert sentiment_score(text) == expected


def test_lexicon_sets_are_disjoint_lower_case_words():
    assert len(POSITIVE) == 40 and len(NEGATIVE) == 40
    assert not POSITIVE & NEGATIVE
    assert all(words(w) == [w] for w in POSITIVE | NEGATIVE)


def test_demo_prompts_split_100_train_20_heldout():
    train, heldout = demo_prompts()
    assert (len(train), len(heldout)) == (100, 20)
    assert len(set(train) | set(heldout)) == 120
    assert demo_prompts() == (train, heldout)
    assert "the movie was" in train and "i thought the acting" in train


def test_corpus_is_deterministic_and_seed_dependent():
    assert build_corpus(50, seed=3) == build_corpus(50, seed=3)
    assert build_corpus(50, seed=3) != build_corpus(50, seed=4)


def test_corpus_sentences_continue_prompts_with_balanced_sentiment():
    train, heldout = demo_prompts()
    openings = set(train + heldout)
    corpus = build_corpus(4000, seed=0)
    assert all(any(s.startswith(o + " ") for o in openings) for s in corpus)
    assert all(s.endswith(" .") and len(s.split()) <= 20 for s in corpus)
    scores = [sentiment_score(s) for s in corpus]
    assert abs(sum(scores) / len(scores)) < 0.1
    assert sum(x > 0 for x in scores) > 1000 and sum(x < 0 for x in scores) > 1000


def _greedy_ids(path, prompts):
    generator = HFGenerator(load_policy(path), load_tokenizer(path))
    return [s[0].token_ids for s in generator.generate(prompts, 1, 6, temperature=0.0, top_p=1.0, seed=0)]


def test_build_is_deterministic_for_a_seed(tmp_path):
    small = DemoConfig(num_sentences=500, n_embd=32, n_layer=2, n_head=2, batch_size=16)
    first, second, other = (build_demo(tmp_path / name, seed=seed, steps=3, config=small, log=lambda _: None)
                            for name, seed in [("a", 0), ("b", 0), ("c", 1)])
    assert load_tokenizer(first).get_vocab() == load_tokenizer(second).get_vocab()
    weights_a, weights_b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    weights_other = load_file(other / "model.safetensors")
    assert not torch.equal(weights_a["transformer.wte.weight"], weights_other["transformer.wte.weight"])
    prompts = ["the movie was", "i thought the acting"]
    assert _greedy_ids(first, prompts) == _greedy_ids(second, prompts)


def test_built_tokenizer_has_distinct_pad_and_left_padding(tmp_path):
    tokenizer = load_tokenizer(build_demo(tmp_path / "demo", steps=1, config=DemoConfig(n_layer=1), log=lambda _: None))
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.padding_side == "left"
    assert tokenizer("the movie was")["input_ids"][-1] != tokenizer.eos_token_id  # prompts get no EOS


def test_ensure_demo_policy_builds_only_when_missing(tmp_path, monkeypatch):
    built = []
    real_build = build_module.build_demo

    def quick_build(out_dir, **kwargs):
        built.append(out_dir)
        return real_build(out_dir, steps=2, config=DemoConfig(num_sentences=300, n_layer=1), **kwargs)

    monkeypatch.setattr(build_module, "DEMO_POLICY_DIR", tmp_path / "demo_policy")
    monkeypatch.setattr(build_module, "build_demo", quick_build)
    messages = []
    assert ensure_demo_policy(log=messages.append) == tmp_path / "demo_policy"
    assert built == [tmp_path / "demo_policy"] and "building" in messages[0]
    assert ensure_demo_policy(log=messages.append) == tmp_path / "demo_policy"
    assert len(built) == 1
    assert not [p for p in tmp_path.iterdir() if p.name != "demo_policy"]  # no staging dir left behind


def test_shipped_demo_policy_is_present_and_not_rebuilt():
    messages = []
    assert ensure_demo_policy(log=messages.append) == DEMO_POLICY_DIR
    assert messages == []


@functools.cache
def _shipped_samples():
    generator = HFGenerator(load_policy(DEMO_POLICY_DIR), load_tokenizer(DEMO_POLICY_DIR))
    train, _ = demo_prompts()
    return [s for group in generator.generate(train[::10], 4, 24, temperature=1.0, top_p=1.0, seed=0) for s in group]


def test_shipped_policy_samples_end_with_eos_and_have_mixed_sentiment():
    samples = _shipped_samples()
    assert len(samples) == 40
    assert all(s.text.strip() for s in samples)
    assert sum(s.ended_with_eos for s in samples) >= 0.8 * len(samples)
    scores = [sentiment_score(s.prompt + s.text) for s in samples]
    assert any(x > 0 for x in scores) and any(x < 0 for x in scores)
