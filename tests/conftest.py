"""Shared fixtures. Nothing is downloaded: the hub is offline for every test."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from bench.studio_driver import launch_studio  # noqa: E402
from storage import Store  # noqa: E402
from storage.db import copy_store  # noqa: E402

pytest_plugins = (
    "tests.model_fixtures",  # tiny Llama/Qwen2 chat models and bad model folders (session fixtures)
    "tests.trainer_fixtures",  # one torch thread, tiny trained-model inputs, a store seeded with the tiny policy
)

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")  # Debian's; `playwright install` cannot download browsers here
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def store(tmp_path):
    """A fresh, migrated store file in the test's tmp dir."""
    s = Store(tmp_path / "studio.db")
    yield s
    s.close()


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    """A store seeded with the demo, made once per test session (seeding costs ~25 s of CPU); copy it, never write
    it."""
    path = tmp_path_factory.mktemp("demo-template") / "studio.db"
    subprocess.run([sys.executable, "-m", "trainers.loop.demo_seed", "--db", str(path)], cwd=ROOT, check=True,
                   capture_output=True)
    return path


@pytest.fixture
def demo_store(demo_template, tmp_path):
    """This test's own copy of the demo-seeded store, as `python app.py` makes it (data folder beside it)."""
    copy_store(demo_template, tmp_path / "studio.db")
    s = Store(tmp_path / "studio.db")
    yield s
    s.close()


@pytest.fixture
def queue_pairs(store):
    """Queue pairs directly in the store: `queue_pairs([(prompt, response_a, response_b), ...])` -> pair ids.

    A prompt is text or a conversation (a list of {role, content} turns). Response a is the pair's first generation;
    `round` and `scores` set the queue order; `job_id` the loop job that owns them (None: the people's queue).
    """
    from labeling.conversations import conversation_text
    from storage.generations import NewGeneration, add_generations
    from storage.pairs import NewPair, add_pairs
    from storage.prompts import NewPrompt, add_prompts, list_prompts

    def stored(prompt) -> NewPrompt:
        return NewPrompt(conversation_text(prompt), prompt) if isinstance(prompt, list) else NewPrompt(prompt)

    def add(triples, round=0, scores=None, job_id=None):
        add_prompts(store, [stored(prompt) for prompt, _, _ in triples])
        prompt_ids = {p.text: p.id for p in list_prompts(store)}
        new = []
        for i, (prompt, a, b) in enumerate(triples):
            prompt_id = prompt_ids[stored(prompt).text]
            first, second = add_generations(store, [NewGeneration(prompt_id, a), NewGeneration(prompt_id, b)])
            score = scores[i] if scores is not None else None
            new.append(NewPair(prompt_id, first, second, selector="random", score=score, round=round))
        return add_pairs(store, new, job_id)

    return add


@pytest.fixture
def serve_studio():
    """`serve_studio(store, users=None, **options)`: the studio served in this process as `python app.py serve`
    serves it (bench.studio_driver.launch_studio); returns the running Blocks (URL: `.local_url`), closed after the
    test."""
    running = []

    def serve(store: Store, users=None, **options):
        running.append(launch_studio(store, users, **options))
        return running[-1]

    yield serve
    for blocks in running:
        blocks.close()


@pytest.fixture
def browser():
    """Chromium driven by Playwright; a missing Chromium fails the test (CI must install it), never skips it."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)"
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
