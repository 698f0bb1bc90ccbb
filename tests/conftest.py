"""Shared fixtures. Nothing is downloaded: the hub is offline for every test."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import pytest  # noqa: E402

from storage import Store  # noqa: E402


@pytest.fixture
def store(tmp_path):
    """A fresh, migrated store file in the test's tmp dir."""
    s = Store(tmp_path / "studio.db")
    yield s
    s.close()
