"""GGUF in: `init --model FILE.gguf` (or a folder holding one) converts the file once into a safetensors folder in
the data folder, then goes on as for any folder; a file transformers cannot read is refused in one line, exit 2,
nothing left behind. The GGUF files are written here (tests/tiny_gguf.py), never downloaded."""

import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from app.commands.cli import main
from bench.tiny_models import folder_digest
from storage import Store
from storage.policies import list_policies
from storage.settings import REWARD_BASE_SETTING, get_setting
from tests.tiny_gguf import write_tiny_gguf
from trainers.loop.project import MODELS_DIR, init_project
from trainers.models.chat_format import ChatFormat
from trainers.models.gguf import readable_architectures
from trainers.models.loading import ModelError, load_tokenizer

IDS = torch.tensor([[0, 264, 369, 273, 227, 77, 309, 90]])


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def test_a_gguf_file_is_converted_once_into_a_folder_that_gives_the_files_logits(capsys, tmp_path, tiny_gguf):
    code, out, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(tiny_gguf))
    assert code == 0 and "error" not in err  # stderr: transformers' progress bars over the tensors
    folder = tmp_path / "p-data" / MODELS_DIR / "tiny-llama"
    [converted] = [line for line in out.splitlines() if line.startswith("converted the GGUF file")]
    assert f"{tiny_gguf} (llama; tensors F32 (" in converted and "Q8_0 (1)" in converted
    assert f"at {folder}: weights dequantised into float32, tokenizer and chat template from the file" in converted
    # the file's vocabulary has no `<|endoftext|>`, which transformers' GPT-2 tokenizer adds (as for Llama-3 files)
    assert "the embeddings grew from 384 to 385 rows for '<|endoftext|>'" in converted
    assert f"the tokenizer of {tiny_gguf} had no pad token distinct from EOS" in out  # then as for any folder
    [policy] = list_policies(Store(tmp_path / "p.db"))
    assert policy.path == str(folder) and policy.note == f"SFT policy from {tiny_gguf} (a prepared copy)"
    assert sorted(p.name for p in (tmp_path / "p-data" / MODELS_DIR).iterdir()) == ["tiny-llama"]  # no staging left
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.gguf"))

    saved = AutoModelForCausalLM.from_pretrained(folder)
    direct = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    assert saved.config.tie_word_embeddings and saved.lm_head.weight is saved.model.embed_tokens.weight
    assert saved.dtype == torch.float32 and not hasattr(saved.config, "quantization_config")
    assert torch.equal(logits(saved)[..., :384], logits(direct))
    tokenizer = load_tokenizer(folder)
    assert tokenizer.pad_token_id not in (None, tokenizer.eos_token_id)
    assert ChatFormat.from_dir(folder).prompt_text("hi").startswith("<|begin_of_text|><|start_header_id|>user")


def test_a_folder_holding_one_gguf_file_is_converted_and_so_is_a_gguf_reward_base(tmp_path, tiny_gguf):
    folder = tmp_path / "downloads"
    folder.mkdir()
    shutil.copy(tiny_gguf, folder / "model-Q8.gguf")
    (folder / "README.md").write_text("a model card\n")
    store = Store(tmp_path / "p.db")
    result = init_project(store, folder, reward_base=tiny_gguf)
    assert result.policy_path == store.data_dir / MODELS_DIR / "model-Q8"
    assert result.reward_base == store.data_dir / MODELS_DIR / "tiny-llama-reward-base"
    assert get_setting(store, REWARD_BASE_SETTING) == str(result.reward_base)
    assert any(note.startswith(f"converted the GGUF file {folder / 'model-Q8.gguf'}") for note in result.notes)
    assert (folder / "model-Q8.gguf").read_bytes() == tiny_gguf.read_bytes()  # the user's file is only read


def refused(capsys, tmp_path, policy) -> str:
    """`init --model` on a new store path: exit 2, one line on stderr, and neither a store nor a data folder."""
    code, out, err = cli(capsys, "init", "--db", str(tmp_path / "p.db"), "--model", str(policy))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert not (tmp_path / "p.db").exists() and not (tmp_path / "p-data").exists()
    return err


def test_a_folder_of_two_gguf_files_is_refused_naming_them(capsys, tmp_path, tiny_gguf):
    folder = tmp_path / "quants"
    folder.mkdir()
    for name in ("m.Q4_0.gguf", "m.Q8_0.gguf"):
        shutil.copy(tiny_gguf, folder / name)
    err = refused(capsys, tmp_path, folder)
    assert "holds 2 GGUF files (m.Q4_0.gguf, m.Q8_0.gguf); give the one to start from" in err


@pytest.mark.parametrize("keep", [0.5, 0.999, 0.01])
def test_a_truncated_gguf_file_is_refused_in_one_line(capsys, tmp_path, tiny_gguf, keep):
    cut = tmp_path / "cut.gguf"
    data = tiny_gguf.read_bytes()
    cut.write_bytes(data[:int(len(data) * keep)])
    err = refused(capsys, tmp_path, cut)
    assert f"the GGUF file {cut} is truncated or corrupt" in err and "download or copy it again" in err


def test_a_file_that_is_not_gguf_is_refused_in_one_line(capsys, tmp_path):
    junk = tmp_path / "model.gguf"
    junk.write_bytes(b"not a gguf file at all\n" * 40)
    assert "is truncated or corrupt (GGUF magic invalid" in refused(capsys, tmp_path, junk)


def test_an_architecture_transformers_cannot_read_is_refused_listing_those_it_reads(capsys, tmp_path,
                                                                                    tiny_llama_dir):
    unknown = write_tiny_gguf(tiny_llama_dir, tmp_path / "rwkv.gguf", architecture="rwkv6")
    err = refused(capsys, tmp_path, unknown)
    assert f"the GGUF file {unknown} holds a 'rwkv6' model, which transformers" in err
    assert "cannot read from GGUF" in err and ", ".join(readable_architectures()) in err
    assert {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "mistral", "phi3"} <= set(readable_architectures())
    assert "general" not in readable_architectures()


def test_a_refused_gguf_leaves_an_existing_store_and_data_folder_unchanged(tmp_path, tiny_gguf, tiny_llama_dir):
    store = Store(tmp_path / "p.db")
    (store.data_dir / "exports").mkdir(parents=True)
    (store.data_dir / "exports" / "labels.jsonl").write_text("{}\n")
    before = folder_digest(store.data_dir), sorted(p.name for p in store.data_dir.iterdir())
    unknown = write_tiny_gguf(tiny_llama_dir, tmp_path / "rwkv.gguf", architecture="rwkv6")
    with pytest.raises(ModelError, match="cannot read from GGUF"):
        init_project(store, tiny_gguf, reward_base=unknown)  # the policy converted first, then the refusal
    assert (folder_digest(store.data_dir), sorted(p.name for p in store.data_dir.iterdir())) == before
    assert list_policies(store) == []
