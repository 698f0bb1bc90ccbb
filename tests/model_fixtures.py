"""Session fixtures of tiny real chat models (built by `bench/tiny_models.py`), loaded by conftest's `pytest_plugins`.

The builders are imported inside each fixture, so a test session that uses none of them does not import torch here.
Every folder is built once per session: never write into one, copy it first.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory) -> Path:
    """The tiny Qwen2 chat model (pad `<|endoftext|>` distinct from EOS `<|im_end|>`)."""
    from bench.tiny_models import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("tiny-qwen") / "qwen")


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """The tiny Llama-3-style chat model (no pad token; reserved special tokens a pad fix reuses)."""
    from bench.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "llama")


@pytest.fixture(scope="session")
def bad_model_dirs(tmp_path_factory, tiny_qwen_dir, tiny_llama_dir) -> dict[str, Path]:
    """Folders the studio refuses as a policy, keyed by what is wrong: pickle_only, remote_code, encoder_only,
    classifier_only (a valid reward base), no_tokenizer, no_config, damaged_weights, a_file, missing."""
    from bench import tiny_models as tiny

    root = tmp_path_factory.mktemp("bad-models")
    (root / "a_file").write_text("not a model\n")
    (root / "no_config").mkdir()
    (root / "no_config" / "notes.txt").write_text("weights elsewhere\n")
    return {
        "pickle_only": tiny.make_pickle_only(tiny_qwen_dir, root / "pickle_only"),
        "remote_code": tiny.make_remote_code(tiny_qwen_dir, root / "remote_code"),
        "encoder_only": tiny.make_encoder_only(tiny_qwen_dir, root / "encoder_only"),
        "classifier_only": tiny.make_classifier_only(tiny_llama_dir, root / "classifier_only"),
        "no_tokenizer": tiny.make_no_tokenizer(tiny_qwen_dir, root / "no_tokenizer"),
        "no_config": root / "no_config",
        "damaged_weights": tiny.make_damaged_weights(tiny_qwen_dir, root / "damaged_weights"),
        "a_file": root / "a_file",
        "missing": root / "missing",
    }



@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory, tiny_llama_dir) -> Path:
    """The tiny Llama as a GGUF file (tests/tiny_gguf.py): float32 tensors, a Q8_0 token embedding, tied output."""
    from tests.tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tiny_llama_dir, tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")
