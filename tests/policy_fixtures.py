"""Fixtures of the policy-optimiser tests (builders in tests/policy_helpers.py), loaded by conftest's
`pytest_plugins`; torch and the builders are imported inside each fixture, so a session that uses none of them does
not import them here.

A test module of tiny-model training runs on one torch thread with `pytestmark = pytest.mark.usefixtures("one_thread")`.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread, above all on a CPU shared with other jobs."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
