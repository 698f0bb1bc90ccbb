"""Shared fixtures. Nothing is downloaded: the hub is offline for every test."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import fcntl  # noqa: E402
import inspect  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from app.door.server import serve  # noqa: E402
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

# The tiers (docs/architecture.md, "Tests"): `browser` drives Chromium; `e2e` runs the product as a user does (a
# command or worker in a subprocess, the studio served on a port, or, in the files below, whole jobs and loops
# in-process); `unit` is the rest, the fast tier (`python -m pytest -m unit`). A test, or a fixture or helper of
# tests/ or bench/ it uses, that names one of STARTS_PRODUCT is end-to-end.
STARTS_PRODUCT = (subprocess, subprocess.run, subprocess.Popen, serve, launch_studio)
STARTS_PRODUCT_MODULES = {"subprocess", "app.door.server"}
WHOLE_RUN_FILES = {  # files whose tests train whole jobs or loops in-process
    "test_dpo.py", "test_dpo_loop.py", "test_export_smollm2.py", "test_failure_warnings.py", "test_grpo.py",
    "test_judge_loop.py", "test_loop.py", "test_loop_rewards.py", "test_loop_queue_ownership.py", "test_ppo.py",
    "test_ranking_loop.py", "test_reward_job.py", "test_rlvr_loop.py", "test_scale_out.py", "test_selecting.py",
    "test_sft_loop.py", "test_worker.py",
}
WHOLE_RUN_TESTS = {  # such tests in files of unit tests (by function name; a renamed one falls back to `unit`)
    "test_votes_on_the_waiting_rounds_pairs_lower_its_count_at_once",
    "test_the_tab_shows_the_token_limits_and_how_many_prompts_and_labels_the_loop_leaves_out",
    "test_a_two_round_loop_on_a_tiny_qwen2_chat_model_feeds_reward_training_and_ppo_the_same_chat_ids",
    "test_a_long_imported_dialogue_does_not_block_the_loop_which_runs_on_the_rest_and_says_so",
    "test_rankings_train_for_the_steps_of_the_pairs_they_stand_for",
    "test_an_admin_starts_a_project_on_a_model_folder_and_bad_folders_are_one_line",
}


def _reaches(code, namespace: dict, seen: set) -> bool:
    """Whether `code` (a test, a fixture, a tests/ helper they call, nested functions included) refers to one of
    STARTS_PRODUCT, following the tests' own functions (`_in_tests`) that it names."""
    if code in seen:
        return False
    seen.add(code)
    if STARTS_PRODUCT_MODULES & set(code.co_names):  # imported inside the function
        return True
    modules = [vars(v) for v in namespace.values() if inspect.ismodule(v) and _in_tests(v)]
    for name in code.co_names:
        for value in [namespace.get(name), *(m.get(name) for m in modules)]:
            if any(value is starter for starter in STARTS_PRODUCT):
                return True
            if inspect.isfunction(value) and _in_tests(value) and _reaches(value.__code__, value.__globals__, seen):
                return True
    return any(_reaches(c, namespace, seen) for c in code.co_consts if inspect.iscode(c))


def _in_tests(thing) -> bool:
    """Whether a module or function is the tests' own code (tests/, or the bench/ helpers tests share)."""
    path = getattr(thing, "__file__", None) if inspect.ismodule(thing) else thing.__code__.co_filename
    return path is not None and Path(path).resolve().parent in (ROOT / "tests", ROOT / "bench")


def _tier(item) -> str:
    if item.get_closest_marker("browser") or "browser" in item.fixturenames:
        return "browser"
    if item.path.name in WHOLE_RUN_FILES or item.originalname in WHOLE_RUN_TESTS:
        return "e2e"
    seen: set = set()
    functions = [item.function] + [defs[-1].func for defs in item._fixtureinfo.name2fixturedefs.values()
                                   if defs[-1].scope != "session"]
    return "e2e" if any(_in_tests(f) and _reaches(f.__code__, f.__globals__, seen) for f in functions) else "unit"


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier (`unit`, `e2e` or `browser`), so `-m unit` runs the fast ones."""
    for item in items:
        item.add_marker(_tier(item))


@pytest.fixture
def store(tmp_path):
    """A fresh, migrated store file in the test's tmp dir."""
    s = Store(tmp_path / "studio.db")
    yield s
    s.close()


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    """A store seeded with the demo, made once per test session (seeding costs ~25 s of CPU) and shared by the
    session's xdist workers (the first seeds it under a lock); copy it, never write it."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "demo-template"
    folder.mkdir(exist_ok=True)
    path, seeded = folder / "studio.db", folder / "seeded"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not seeded.exists():
            subprocess.run([sys.executable, "-m", "trainers.loop.demo_seed", "--db", str(path)], cwd=ROOT, check=True,
                           capture_output=True)
            seeded.touch()
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
    from labeling.transfer.conversations import conversation_text
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
