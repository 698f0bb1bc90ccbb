"""Model loading (trainers/models/loading.py): the one-line errors for bad directories and tokenizers, and what the
loaders set up."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from assets.build_demo import EOS_TOKEN, PAD_TOKEN, train_tokenizer
from assets.corpus import build_corpus
from storage.errors import StudioError
from trainers.models.loading import ModelError, load_policy, load_reward_model, load_tokenizer


def _tokenizer(**special):
    tokenizer = train_tokenizer(build_corpus(200, seed=0), vocab_size=300)
    for name, value in special.items():
        setattr(tokenizer, name, value)
    return tokenizer


def _model(vocab_size: int) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab_size, n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                      bos_token_id=0, eos_token_id=0))


def _save(directory, tokenizer=None, vocab_size=None):
    model = _model(vocab_size or len(tokenizer))
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return directory


def _error(load, path) -> str:
    with pytest.raises(ModelError) as caught:
        load(path)
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, StudioError)
    return message


@pytest.mark.parametrize("load", [load_tokenizer, load_policy, load_reward_model])
def test_missing_directory_names_the_path(tmp_path, load):
    message = _error(load, tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in message and "does not exist" in message


def test_directory_without_config_is_not_a_model_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    message = _error(load_policy, tmp_path)
    assert "not a model directory" in message and str(tmp_path) in message


def test_file_is_not_a_model_directory(tmp_path):
    (tmp_path / "model.bin").write_text("x")
    assert "not a model directory" in _error(load_tokenizer, tmp_path / "model.bin")


@pytest.mark.parametrize("load", [load_tokenizer, load_policy, load_reward_model])
def test_directory_without_tokenizer(tmp_path, load):
    path = _save(tmp_path / "m", vocab_size=300)
    assert "no tokenizer in" in _error(load, path)


def test_tokenizer_without_pad_token_says_how_to_add_one(tmp_path):
    path = _save(tmp_path / "m", _tokenizer(pad_token=None))
    message = _error(load_policy, path)
    assert "no pad token" in message and "add_special_tokens" in message and "resize_token_embeddings" in message


def test_pad_token_equal_to_eos_is_refused(tmp_path):
    path = _save(tmp_path / "m", _tokenizer(pad_token=EOS_TOKEN))
    message = _error(load_reward_model, path)
    assert "EOS token as pad token" in message and "add_special_tokens" in message


def test_tokenizer_without_eos_is_refused(tmp_path):
    path = _save(tmp_path / "m", _tokenizer(eos_token=None, bos_token=None))
    assert "no EOS token" in _error(load_tokenizer, path)


def test_tokenizer_larger_than_embeddings_is_refused(tmp_path):
    path = _save(tmp_path / "m", _tokenizer(), vocab_size=100)
    assert "resize_token_embeddings" in _error(load_policy, path)


def test_right_padding_tokenizer_is_loaded_padding_left(tmp_path):
    path = _save(tmp_path / "m", _tokenizer(padding_side="right"))
    tokenizer = load_tokenizer(path)
    assert tokenizer.padding_side == "left"
    batch = tokenizer(["the movie was", "i thought the acting"], padding=True)
    assert batch["input_ids"][0][0] == tokenizer.pad_token_id
    assert tokenizer.convert_ids_to_tokens(tokenizer.pad_token_id) == PAD_TOKEN


def test_load_policy_sets_pad_and_eos_from_the_tokenizer(tmp_path):
    path = _save(tmp_path / "m", _tokenizer())
    policy = load_policy(path, dtype=torch.float32)
    assert not policy.training
    assert policy.config.pad_token_id == 1 and policy.generation_config.pad_token_id == 1
    assert policy.generation_config.eos_token_id == [0]  # every end id the folder declares: here the EOS alone
    assert next(policy.parameters()).dtype == torch.float32


def test_load_reward_model_from_a_policy_has_one_output_on_the_last_real_token(tmp_path):
    tokenizer = _tokenizer()
    path = _save(tmp_path / "m", tokenizer)
    torch.manual_seed(0)
    reward_model = load_reward_model(path)
    assert reward_model.config.num_labels == 1 and reward_model.config.pad_token_id == tokenizer.pad_token_id
    batch = tokenizer(["the movie was brilliant .", "the movie was"], return_tensors="pt", padding=True)
    positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        scores = reward_model(**batch, position_ids=positions).logits  # (2, 1)
        alone = reward_model(**tokenizer(["the movie was"], return_tensors="pt")).logits  # (1, 1)
    assert scores.shape == (2, 1)
    torch.testing.assert_close(scores[1], alone[0])
    reward_model.save_pretrained(tmp_path / "m")
    assert load_reward_model(tmp_path / "m").config.num_labels == 1


def test_load_policy_drops_the_checkpoints_sampling_extras_and_keeps_every_end_id(tiny_qwen_dir):
    policy = load_policy(tiny_qwen_dir)
    config = policy.generation_config
    assert sorted(config.eos_token_id) == [0, 2] and config.pad_token_id == 0  # <|endoftext|>, <|im_end|>
    assert config.repetition_penalty in (None, 1.0) and not config.no_repeat_ngram_size
    assert config.top_k in (None, 50) and config.temperature in (None, 1.0) and not config.do_sample


def test_gpt2s_tanh_gelu_runs_as_one_kernel_with_the_same_logits_and_an_unchanged_checkpoint(tmp_path):
    from transformers.activations import GELUTanh, NewGELUActivation

    tokenizer = _tokenizer()
    path = _save(tmp_path / "m", tokenizer)
    plain = GPT2LMHeadModel.from_pretrained(path).eval()
    policy, reward_model = load_policy(path), load_reward_model(path)
    for model in (policy, reward_model):
        activations = [m for m in model.modules() if isinstance(m, (NewGELUActivation, GELUTanh))]
        assert activations and all(type(m) is GELUTanh for m in activations)
    assert any(isinstance(m, NewGELUActivation) for m in plain.modules())
    ids = tokenizer(["the movie was brilliant ."], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(policy(ids).logits, plain(ids).logits, rtol=0, atol=1e-5)
    policy.save_pretrained(tmp_path / "saved")
    assert GPT2LMHeadModel.from_pretrained(tmp_path / "saved").config.activation_function == "gelu_new"
