"""`python app.py export-model vK --out DIR`: a version of the demo, full or LoRA, leaves the studio as a folder plain
transformers loads and that gives the version's logits, without the studio's own files; its model card carries the
figures `status` gives; bad requests are refused in one line, with DIR as it was."""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.commands.cli import main
from storage import Store
from storage.policies import add_policy, list_policies

STUDIO_FILES = ("adapter", "value_head.safetensors", "ppo_config.json", "build_info.json")


@pytest.fixture(scope="module")
def trained_store(demo_template, tmp_path_factory) -> Path:
    """The demo after one full PPO round (v1) and one LoRA PPO round (v2), each judged blind against the SFT policy."""
    folder = tmp_path_factory.mktemp("export")
    db = folder / "demo.db"
    shutil.copyfile(demo_template, db)
    quick = '"seed": 0, "policy_iterations": 2, "reward_epochs": 1, "eval_samples": 8, "winrate_pairs": 12'
    for settings in (f'{{{quick}}}', f'{{{quick}, "lora": true}}'):
        assert main(["loop", "--db", str(db), "--rounds", "1", "--labels-per-round", "20", "--annotator", "oracle",
                     "--config", settings]) == 0
    return db


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def logits(folder: Path, text: str = "the movie was") -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).logits


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_full_and_a_lora_version_export_as_a_plain_folder_with_the_versions_logits(trained_store, tmp_path, capsys,
                                                                                      version):
    policy = list_policies(Store(trained_store))[int(version[1:])]
    if version == "v2":
        assert (Path(policy.path) / "adapter" / "adapter_config.json").is_file()  # a LoRA version, saved merged
    out = tmp_path / version
    code, printed, err = cli(capsys, "export-model", version, "--out", str(out), "--db", str(trained_store))
    assert code == 0, err
    assert printed.startswith(f"exported {version} (PPO, ")
    assert not [name for name in STUDIO_FILES if (out / name).exists()]
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "README.md"} <= \
        {f.name for f in out.iterdir()}
    torch.testing.assert_close(logits(out), logits(Path(policy.path)), rtol=0, atol=0)
    generation = json.loads((out / "generation_config.json").read_text())
    settings = json.loads((Path(policy.path) / "ppo_config.json").read_text())
    assert generation["do_sample"] is True
    assert (generation["temperature"], generation["max_new_tokens"]) == (settings["temperature"],
                                                                         settings["response_length"])


def test_the_card_tells_the_lineage_the_judgements_and_the_figures_status_gives(trained_store, tmp_path, capsys):
    code, status, _ = cli(capsys, "status", "--db", str(trained_store))
    assert code == 0
    assert cli(capsys, "export-model", "v2", "--out", str(tmp_path / "v2"), "--db", str(trained_store))[0] == 0
    card = (tmp_path / "v2" / "README.md").read_text()
    assert card.startswith("---\n") and "\nlibrary_name: transformers\n" in card and "\n- ppo\n" in card
    assert "v0 → v1 → v2" in card
    assert "| v1 | PPO | the reward model | PPO, 2 iterations |" in card
    win_rate = next(line.strip() for line in status.splitlines()
                    if line.strip().startswith("v2: ") and "vs SFT" in line)
    assert f"- {win_rate}" in card
    strength = next(line for line in status.splitlines() if ". v2: " in line).split("strength ")[1].split(" ")[0]
    assert f"strength {strength}" in card
    store = Store(trained_store)
    oracle_pairs = store.db().execute("SELECT count(*) FROM labels WHERE annotator = 'oracle' AND outcome != 'skip' "
                                      "AND created <= ?", [list_policies(store)[2].created]).fetchone()[0]
    assert f"| pairs | 0 | {oracle_pairs} | 0 |" in card


def test_refusals_leave_the_folder_as_it_was(trained_store, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    code, _, err = cli(capsys, "export-model", "v1", "--out", str(taken), "--db", str(trained_store))
    assert code == 2 and err.count("\n") == 1 and "not empty" in err and "--force" in err
    assert [f.name for f in taken.iterdir()] == ["notes.txt"]
    code, _, err = cli(capsys, "export-model", "v9", "--out", str(tmp_path / "new"), "--db", str(trained_store))
    assert code == 2 and "no version 'v9'" in err and "v0 to v2" in err and not (tmp_path / "new").exists()
    code, _, err = cli(capsys, "export-model", "v1", "--out", str(tmp_path / "no" / "such"), "--db", str(trained_store))
    assert code == 2 and "does not exist" in err
    assert cli(capsys, "export-model", "v1", "--out", str(taken), "--force", "--db", str(trained_store))[0] == 0
    assert not (taken / "notes.txt").exists() and (taken / "model.safetensors").is_file()


def test_a_version_with_weights_that_are_not_finite_is_refused(trained_store, tmp_path, capsys):
    db = tmp_path / "copy.db"
    with sqlite3.connect(trained_store) as source, sqlite3.connect(db) as copy:
        source.backup(copy)  # the WAL's pages too
    store = Store(db)
    broken = tmp_path / "broken"
    shutil.copytree(list_policies(store)[1].path, broken)
    weights = load_file(broken / "model.safetensors")
    name = sorted(weights)[3]
    weights[name][0] = float("nan")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    add_policy(store, str(broken), parent_id=list_policies(store)[-1].id, round=3, note="broken")
    out = tmp_path / "out"
    code, _, err = cli(capsys, "export-model", "v3", "--out", str(out), "--db", str(db))
    assert code == 2 and err.count("\n") == 1
    assert "not finite" in err and f"first {name})" in err and not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out-")]  # nothing staged is left behind
