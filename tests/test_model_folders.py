"""Model folders are data: the loaders refuse code and pickles, the tiny Llama/Qwen2 chat models load padding left,
and prepared copies (pickle converted, pad token fixed) hold the same model, and only the files a model needs, without
touching the user's folder."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from bench.tiny_models import build_tiny_llama, build_tiny_qwen, folder_digest, make_pickle_shards, same_weights
from storage.errors import StudioError
from trainers.models.checks import ModelRole, declared_end_ids, inspect_model_dir, read_tokenizer
from trainers.models.copies import (
    MODEL_FILES,
    NEW_PAD_TOKEN,
    PadFix,
    convert_pickle_weights,
    copy_model_files,
    make_prepared_copy,
    plan_pad_fix,
)
from trainers.models.loading import ModelError, load_policy, load_reward_model, load_tokenizer

TEXTS = ["the movie was", "i thought the acting was brilliant and moving ."]


def _error(load, path) -> str:
    with pytest.raises(ModelError) as caught:
        load(path)
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, StudioError)
    assert str(path) in message
    return message


def _last_logits(model, tokenizer, texts=TEXTS) -> torch.Tensor:
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        return model(**batch, position_ids=positions).logits[:, -1]  # (B, V)


@pytest.mark.parametrize("name, expected", [
    ("pickle_only", "--allow-pickle"), ("remote_code", "own Python code"), ("encoder_only", "BertForMaskedLM"),
    ("no_tokenizer", "no tokenizer in"), ("no_config", "no config.json"),
    ("damaged_weights", "cannot load a causal language model"), ("a_file", "is a file"), ("missing", "does not exist"),
])
def test_load_policy_refuses_each_bad_folder_in_one_line(bad_model_dirs, name, expected):
    before = folder_digest(bad_model_dirs[name])
    assert expected in _error(load_policy, bad_model_dirs[name])
    assert folder_digest(bad_model_dirs[name]) == before


def test_remote_code_is_refused_before_any_of_it_runs(bad_model_dirs):
    for load in (load_tokenizer, load_policy, load_reward_model):  # the folder's module raises SystemExit if imported
        assert "never runs code from a model folder" in _error(load, bad_model_dirs["remote_code"])


def test_encoder_only_folder_is_not_a_causal_lm(bad_model_dirs):
    message = _error(lambda p: inspect_model_dir(p, ModelRole.POLICY), bad_model_dirs["encoder_only"])
    assert "not a causal language model" in message and "AutoModelForCausalLM" in message


def test_a_sequence_classifier_starts_a_reward_model_but_is_no_policy(bad_model_dirs):
    folder = inspect_model_dir(bad_model_dirs["classifier_only"], ModelRole.REWARD)
    assert folder.config["architectures"] == ["LlamaForSequenceClassification"]
    assert "LlamaForSequenceClassification, not a causal language model" in _error(
        lambda p: inspect_model_dir(p, ModelRole.POLICY), bad_model_dirs["classifier_only"])
    assert "cannot start a reward model" in _error(lambda p: inspect_model_dir(p, ModelRole.REWARD),
                                                   bad_model_dirs["encoder_only"])


@pytest.mark.parametrize("build, architecture, chat", [
    (build_tiny_qwen, "Qwen2ForCausalLM", "<|im_start|>user\nthe movie was<|im_end|>\n<|im_start|>assistant\n"),
    (build_tiny_llama, "LlamaForCausalLM", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
                                           "the movie was<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
])
def test_tiny_chat_models_are_real_architectures_with_templates_and_generation_extras(tmp_path, build, architecture,
                                                                                      chat):
    path = build(tmp_path / "m")
    tokenizer = read_tokenizer(path)
    config = json.loads((path / "config.json").read_text())
    generation = json.loads((path / "generation_config.json").read_text())
    assert config["architectures"] == [architecture]
    model = AutoModelForCausalLM.from_pretrained(path)
    assert 100_000 < sum(p.numel() for p in model.parameters()) < 1_000_000
    assert generation["repetition_penalty"] == 1.5 and generation["no_repeat_ngram_size"] == 2
    assert len(declared_end_ids(inspect_model_dir(path), tokenizer)) == 2
    assert tokenizer.apply_chat_template([{"role": "user", "content": "the movie was"}], tokenize=False,
                                         add_generation_prompt=True) == chat
    assert build(tmp_path / "again").joinpath("model.safetensors").read_bytes() == \
        (path / "model.safetensors").read_bytes()  # deterministic


def test_tiny_qwen_loads_padding_left_and_a_padded_row_scores_as_alone(tiny_qwen_dir):
    tokenizer, policy = load_tokenizer(tiny_qwen_dir), load_policy(tiny_qwen_dir)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.eos_token == "<|im_end|>" and policy.generation_config.pad_token_id == tokenizer.pad_token_id
    batch = tokenizer(TEXTS, padding=True)
    assert batch["input_ids"][0][0] == tokenizer.pad_token_id
    alone = _last_logits(policy, tokenizer, TEXTS[:1])
    torch.testing.assert_close(_last_logits(policy, tokenizer)[0], alone[0])


def test_tiny_llama_without_pad_is_refused_by_the_loader_and_fixed_in_a_copy(tiny_llama_dir, tmp_path):
    assert "no pad token" in _error(load_tokenizer, tiny_llama_dir)
    before = folder_digest(tiny_llama_dir)
    tokenizer = read_tokenizer(tiny_llama_dir)
    fix = plan_pad_fix(tokenizer, declared_end_ids(inspect_model_dir(tiny_llama_dir), tokenizer))
    assert fix == PadFix("<|reserved_special_token_0|>", added=False)
    copy = tmp_path / "models" / "llama"
    copy.parent.mkdir()
    [note] = make_prepared_copy(inspect_model_dir(tiny_llama_dir), fix, copy)
    assert "'<|reserved_special_token_0|>'" in note and str(copy) in note and "reused" in note
    fixed = load_tokenizer(copy)
    assert fixed.padding_side == "left" and fixed.pad_token == "<|reserved_special_token_0|>"
    assert len(fixed) == len(tokenizer) and same_weights(copy, tiny_llama_dir)  # nothing added, weights as they were
    for name in ("config.json", "generation_config.json"):
        assert json.loads((copy / name).read_text())["pad_token_id"] == fixed.pad_token_id
    assert fixed(TEXTS, padding=True)["input_ids"][0][0] == fixed.pad_token_id
    assert load_policy(copy).get_input_embeddings().num_embeddings == len(tokenizer)
    assert folder_digest(tiny_llama_dir) == before
    assert sorted(p.name for p in copy.parent.iterdir()) == ["llama"]  # no staging folder left


def test_pad_equal_to_eos_reuses_a_reserved_token(tiny_llama_dir):
    tokenizer = read_tokenizer(tiny_llama_dir)
    tokenizer.pad_token = tokenizer.eos_token
    assert plan_pad_fix(tokenizer, [tokenizer.eos_token_id]) == PadFix("<|reserved_special_token_0|>", added=False)


def test_qwen_without_pad_reuses_endoftext_beside_im_end(tmp_path):
    path = build_tiny_qwen(tmp_path / "qwen", pad_token=None)
    tokenizer = read_tokenizer(path)
    fix = plan_pad_fix(tokenizer, declared_end_ids(inspect_model_dir(path), tokenizer))
    assert fix == PadFix("<|endoftext|>", added=False)  # <|im_start|>/<|im_end|> are the template's


def test_a_tokenizer_with_nothing_to_reuse_gets_a_new_pad_and_grown_embeddings_in_the_copy(tmp_path):
    path = build_tiny_llama(tmp_path / "plain", reserved=False, end_of_text=False)
    before = folder_digest(path)
    tokenizer = read_tokenizer(path)
    fix = plan_pad_fix(tokenizer, declared_end_ids(inspect_model_dir(path), tokenizer))
    assert fix == PadFix(NEW_PAD_TOKEN, added=True)  # the header tokens are the chat template's: never reused
    copy = tmp_path / "copy"
    [note] = make_prepared_copy(inspect_model_dir(path), fix, copy)
    rows = len(tokenizer)
    assert f"grew the embeddings from {rows} to {rows + 1} rows" in note and "added the pad token" in note
    fixed, grown = load_tokenizer(copy), load_policy(copy)
    assert fixed.pad_token == NEW_PAD_TOKEN and fixed.pad_token_id == rows
    assert grown.get_input_embeddings().num_embeddings == rows + 1
    source = AutoModelForCausalLM.from_pretrained(path).eval()
    assert source.get_input_embeddings().num_embeddings == rows  # the user's folder still has its own size
    batch = fixed(TEXTS[:1], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(grown(**batch).logits[..., :rows], source(**batch).logits)
    assert folder_digest(path) == before


def test_pickle_conversion_gives_the_same_logits_and_leaves_the_source_alone(bad_model_dirs, tmp_path):
    source = bad_model_dirs["pickle_only"]
    before = folder_digest(source)
    copy = tmp_path / "converted"
    [note] = make_prepared_copy(inspect_model_dir(source), None, copy)
    assert "weights_only=True" in note and str(copy) in note
    assert not list(copy.glob("*.bin")) and (copy / "model.safetensors").is_file()
    tokenizer = load_tokenizer(copy)
    original = AutoModelForCausalLM.from_pretrained(source, use_safetensors=False).eval()
    torch.testing.assert_close(_last_logits(load_policy(copy), tokenizer), _last_logits(original, tokenizer))
    pickled = torch.load(source / "pytorch_model.bin", weights_only=True)
    converted = load_file(copy / "model.safetensors")
    assert pickled.keys() == converted.keys() and all(torch.equal(pickled[k], converted[k]) for k in pickled)
    assert pickled["lm_head.weight"].data_ptr() == pickled["model.embed_tokens.weight"].data_ptr()  # tied: cloned apart
    assert folder_digest(source) == before


def test_sharded_pickle_weights_convert_to_sharded_safetensors(tiny_llama_dir, tmp_path):
    shards = make_pickle_shards(tiny_llama_dir, tmp_path / "shards")
    copy = convert_pickle_weights(shards, tmp_path / "converted")
    index = json.loads((copy / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == ["model-00001-of-00002.safetensors",
                                                         "model-00002-of-00002.safetensors"]
    converted = AutoModelForCausalLM.from_pretrained(copy, use_safetensors=True).eval()
    original = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()
    batch = read_tokenizer(tiny_llama_dir)(TEXTS[:1], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(converted(**batch).logits, original(**batch).logits)


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_hostile_pickle_is_refused_without_running(tiny_qwen_dir, tmp_path):
    source, marker = tmp_path / "hostile", tmp_path / "ran"
    copy_model_files(tiny_qwen_dir, source, skip=("model.safetensors",))
    torch.save({"model.embed_tokens.weight": _RunsCode(marker)}, source / "pytorch_model.bin")
    message = _error(lambda p: convert_pickle_weights(p, tmp_path / "out"), source)
    assert "unreadable" in message and not marker.exists()


def test_an_auto_map_beside_a_built_in_architecture_loads_with_the_built_in_class(tiny_qwen_dir, tmp_path):
    path = tmp_path / "qwen-with-code"
    copy_model_files(tiny_qwen_dir, path)
    config = json.loads((path / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_qwen.Qwen2ForCausalLM"}
    (path / "config.json").write_text(json.dumps(config))
    (path / "modeling_qwen.py").write_text("raise SystemExit('remote code ran')\n")
    assert type(load_policy(path)).__name__ == "Qwen2ForCausalLM"  # the folder's module would have exited


def test_a_prepared_copy_holds_only_the_files_a_model_needs_following_links_to_them(tiny_llama_dir, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the admin's private notes")
    cache = tmp_path / "hub" / "models--org--llama"  # a Hugging Face cache: snapshot files link to ../../blobs
    (cache / "blobs").mkdir(parents=True)
    snapshot = cache / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for file in tiny_llama_dir.iterdir():
        (cache / "blobs" / f"blob-{file.name}").write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(f"../../blobs/blob-{file.name}")
    (snapshot / "notes.txt").symlink_to(secret)  # a link to what is no part of the model
    (snapshot / "README.md").write_text("a model card")
    (snapshot / "train.py").write_text("print('code')")
    tokenizer = read_tokenizer(snapshot)
    fix = plan_pad_fix(tokenizer, declared_end_ids(inspect_model_dir(snapshot), tokenizer))
    copy = tmp_path / "copy"
    make_prepared_copy(inspect_model_dir(snapshot), fix, copy)
    files = sorted(copy.iterdir())
    assert {file.name for file in files} <= set(MODEL_FILES) and {"config.json", "model.safetensors"} <= \
        {file.name for file in files}
    assert not any(file.is_symlink() for file in files)  # the linked blobs' contents, copied
    assert all(b"private notes" not in file.read_bytes() for file in files)
    assert same_weights(copy, tiny_llama_dir) and load_tokenizer(copy).pad_token == fix.token
