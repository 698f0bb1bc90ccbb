"""`loop --from vK` (`start_version`): the first round trains from that version instead of the store's newest (it
samples, and PPO starts from its weights; the new version is its child) while the KL reference and the SFT side of
win-rate pairs stay its SFT root; a LoRA version's adapter is continued; the line a loop starts with names the
version and how to start from another; an unknown version, a missing folder and `--from` with `--resume` are refused
in one line before any job row; the API takes the same setting."""

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from app.auth import Users
from app.commands.cli import main
from storage import InvalidInput
from storage import jobs as job_rows
from storage.generations import SAMPLE_SOURCE, list_generations
from storage.policies import add_policy, list_policies, set_trained_from
from storage.rounds import list_rounds
from tests.helpers import workerless_studio
from trainers.loop.config import LoopConfig, round_seed
from trainers.loop.start_version import start_line
from trainers.reward.shared_base import adapter_base, same_dir

ROOT = Path(__file__).resolve().parent.parent
TINY_LOOP = ["--rounds", "1", "--labels-per-round", "10", "--annotator", "oracle", "--config", json.dumps({
    "prompts_per_round": 8, "queue_reserve": 0, "reward_epochs": 1, "policy_iterations": 1, "policy_batch_size": 8,
    "policy_mini_batches": 1, "policy_epochs": 1, "eval_prompts": 4, "eval_samples": 2,
    "winrate_pairs": 4})]  # ~20 s a loop on one thread


def loop(store, *extra: str) -> list[str]:
    """`python app.py loop` on the store with the tiny settings (and `extra` on top); its stdout lines."""
    result = subprocess.run([sys.executable, "app.py", "loop", "--db", str(store.path), *TINY_LOOP, *extra],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def test_a_loop_from_v0_after_a_loop_made_v1_trains_a_child_of_v0(demo_store):
    assert "starting from v0 (the SFT policy, the store's newest version)" in loop(demo_store)
    lines = loop(demo_store, "--from", "v0")
    assert "starting from v0 (the SFT policy); to start from another version: --from vK (v0–v1)" in lines
    sft, v1, v2 = list_policies(demo_store)
    assert (v1.parent_id, v2.parent_id, v2.round) == (sft.id, sft.id, 2)  # v0's child, in the store's round 2
    second = job_rows.list_jobs(demo_store)[0]
    assert second.config["start_version"] == "v0"
    assert [r["policy_id"] for r in list_rounds(demo_store, second.id)] == [v2.id]
    drawn = {policy.id: {g.seed for g in list_generations(demo_store, policy_id=policy.id, source=SAMPLE_SOURCE)}
             for policy in (sft, v1)}
    assert round_seed(0, 2) in drawn[sft.id] and round_seed(0, 2) not in drawn[v1.id]  # the round sampled v0
    assert lines[-1].startswith(f"job {second.id} (loop) completed: made v2 in 1 round")


def test_a_lora_loop_from_an_earlier_version_continues_its_adapter(demo_store):
    loop(demo_store, "--lora", "--rounds", "2")
    lines = loop(demo_store, "--lora", "--from", "1")
    assert ("starting from v1 (store round 1, trained from v0; the SFT policy: v0); to start from "
            "another version: --from vK (v0–v2)") in lines
    sft, v1, _, v3 = list_policies(demo_store)
    assert v3.parent_id == v1.id
    # v1's adapter trained on, on the SFT base (fresh adapters on v1's merged copy would name v1's folder)
    assert same_dir(adapter_base(Path(v3.path) / "adapter"), sft.path)


@pytest.mark.parametrize("arguments,message", [
    (["--from", "v3"], "the store has no policy version v3, only v0–v1; start from one of them"),
    (["--from", "1"], "the folder of policy version v1 is missing ({gone}); restore it, or start from another version"),
    (["--from", "v0", "--resume", "1"], "--from and --resume do not go together: job 1 goes on from where it stopped; "
                                        "drop --from, or start a new loop from that version without --resume"),
    (["--config", '{"start_version": "v0"}', "--resume", "1"], "--from and --resume do not go together"),
    (["--from", "newest"], "start_version must name a policy version as v3 or 3, got 'newest'"),
], ids=["unknown", "folder-missing", "with-resume", "with-resume-in-json", "not-a-version"])
def test_a_bad_start_version_is_refused_in_one_line_before_any_job(demo_store, tmp_path, capsys, arguments, message):
    gone = tmp_path / "gone"
    add_policy(demo_store, str(gone), parent_id=list_policies(demo_store)[0].id, round=1)
    assert main(["loop", "--db", str(demo_store.path), *arguments]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"error: {message.format(gone=gone)}") and err.count("\n") == 1 and out == ""
    assert job_rows.list_jobs(demo_store) == []


def test_the_api_starts_a_loop_from_a_version_and_refuses_one_the_store_lacks(store, monkeypatch):
    from app.train import train_tab

    studio = workerless_studio(store, monkeypatch, Users({"owner": "o"}, frozenset({"owner"})))
    owner = SimpleNamespace(username="owner")
    small = {"rounds": 1, "prompts_per_round": 8, "policy_batch_size": 8, "labels_per_round": 8}
    with pytest.raises(gr.Error, match="the store has no policy version v1, only v0; start from one of them"):
        train_tab.api_start_loop(studio, json.dumps({**small, "start_version": "v1"}), owner)
    assert job_rows.list_jobs(store) == []
    train_tab.api_start_loop(studio, json.dumps({**small, "start_version": "0"}), owner)
    assert job_rows.list_jobs(store)[0].config["start_version"] == "v0"


def test_a_start_version_is_written_v3_or_3_and_stored_as_v3():
    assert LoopConfig.from_dict({"start_version": "3"}).start_version == "v3"
    assert LoopConfig.from_dict({"start_version": " V12 "}).start_version == "v12"
    assert LoopConfig().start_version is None
    with pytest.raises(InvalidInput, match=re.escape("'start_version' must be str | None, got 3")):
        LoopConfig.from_dict({"start_version": 3})


def test_the_start_line_names_the_version_its_parent_and_its_kl_reference(store, tmp_path):
    folders = [tmp_path / name for name in ("v0", "v1", "v2", "v3")]
    for folder in folders:
        folder.mkdir()
    v0 = add_policy(store, str(folders[0]))
    v1 = add_policy(store, str(folders[1]), parent_id=v0, round=1)
    v2 = add_policy(store, str(folders[2]), round=2)  # SFT on v1 as a new root (the KL reference from here)
    set_trained_from(store, v2, v1)
    add_policy(store, str(folders[3]), parent_id=v2, round=2)
    other = "; to start from another version: --from vK (v0–v3)"
    assert start_line(store, LoopConfig()) == (
        f"starting from v3 (store round 2, the store's newest version, trained from v2; the SFT policy: v2){other}")
    assert start_line(store, LoopConfig(start_version="v1")) == (
        f"starting from v1 (store round 1, trained from v0; the SFT policy: v0){other}")
    assert start_line(store, LoopConfig(start_version="2")) == f"starting from v2 (the SFT policy){other}"
