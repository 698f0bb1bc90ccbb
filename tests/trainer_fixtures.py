"""Fixtures of the trainer tests, loaded by conftest's `pytest_plugins`: one torch thread, the corpus sentences and
tiny GPT-2 policy folder the reward-model tests train on, and a store seeded with the tiny policy of
tests/policy_helpers.py. Torch and the builders are imported inside each fixture, so a session that uses none of
them does not import them here.

A test module of tiny-model training runs on one torch thread with `pytestmark = pytest.mark.usefixtures("one_thread")`
(module-scoped, so a module-scoped fixture that trains runs on one thread too).
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread, above all on a CPU shared with other jobs."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def corpus_sentences() -> list[str]:
    """1500 sentences of the demo corpus (seed 0): prompts are their first three words, responses the rest."""
    from assets.corpus import build_corpus

    return build_corpus(1500, seed=0)


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory, corpus_sentences) -> Path:
    """A tiny untrained GPT-2 policy with a BPE tokenizer (trained on the corpus) whose pad token is not EOS; the
    reward-model tests start their models from it. Never write into it."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from assets.build_demo import train_tokenizer

    path = tmp_path_factory.mktemp("policy") / "policy"
    tokenizer = train_tokenizer(corpus_sentences, 300)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                        bos_token_id=tokenizer.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def seeded_store(store, tmp_path):
    """A store holding the tiny policy (version 1) and the training prompts."""
    from storage.policies import add_policy
    from storage.prompts import add_prompts
    from tests.policy_helpers import PROMPTS, make_policy, make_tokenizer

    path = tmp_path / "sft"
    make_policy().save_pretrained(path)
    make_tokenizer().save_pretrained(path)
    add_policy(store, str(path))
    add_prompts(store, PROMPTS)
    return store
