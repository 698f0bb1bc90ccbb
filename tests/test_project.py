"""init_project: a user's model becomes policy v0 of an empty store, all or nothing, the user's folder untouched."""

import pytest

from bench.tiny_models import build_tiny_llama, folder_digest, make_pickle_only
from storage import Conflict, Store
from storage.policies import add_policy, list_policies
from storage.prompts import add_prompts, count_prompts
from storage.settings import REWARD_BASE_SETTING, get_setting
from trainers.loop.project import MODELS_DIR, init_project
from trainers.models.loading import ModelError, load_policy, load_reward_model, load_tokenizer


def _snapshot(store: Store) -> dict:
    """Every row of every table, and every file of the data folder."""
    db = store.db()
    rows = {table: list(db[table].rows) for table in db.table_names()}
    return {"rows": rows, "data": folder_digest(store.data_dir), "data_exists": store.data_dir.exists()}


def _refused(store, error_type, **kwargs) -> str:
    before = _snapshot(store)
    with pytest.raises(error_type) as caught:
        init_project(store, **kwargs)
    assert _snapshot(store) == before
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name, expected", [
    ("pickle_only", "--allow-pickle"), ("remote_code", "never runs code from a model folder"),
    ("encoder_only", "BertForMaskedLM, not a causal language model"),
    ("classifier_only", "LlamaForSequenceClassification, not a causal language model"),
    ("no_tokenizer", "no tokenizer in"), ("no_config", "no config.json"), ("damaged_weights", "are unreadable"),
    ("a_file", "is a file"), ("missing", "does not exist"),
])
def test_every_bad_policy_folder_is_refused_leaving_store_and_data_folder_unchanged(store, bad_model_dirs, name,
                                                                                     expected):
    source = bad_model_dirs[name]
    before = folder_digest(source)
    message = _refused(store, ModelError, policy_dir=source)
    assert str(source) in message and expected in message
    assert folder_digest(source) == before and not store.data_dir.exists()


@pytest.mark.parametrize("name", ["pickle_only", "remote_code", "encoder_only", "damaged_weights", "missing"])
def test_a_bad_reward_base_is_refused_before_anything_is_written(store, bad_model_dirs, tiny_llama_dir, name):
    # the policy needs a prepared copy: the refusal must come before it is made
    message = _refused(store, ModelError, policy_dir=tiny_llama_dir, reward_base=bad_model_dirs[name])
    assert str(bad_model_dirs[name]) in message


def test_a_store_with_prompts_or_a_policy_is_refused(store, tiny_qwen_dir, tmp_path):
    add_prompts(store, ["the movie was"])
    message = _refused(store, Conflict, policy_dir=tiny_qwen_dir)
    assert "already holds a policy or prompts" in message and str(store.path) in message
    other = Store(tmp_path / "other.db")
    add_policy(other, str(tiny_qwen_dir), note="an earlier project")
    assert "already holds" in _refused(other, Conflict, policy_dir=tiny_qwen_dir)


def test_a_ready_model_is_registered_as_it_is(store, tiny_qwen_dir):
    before = folder_digest(tiny_qwen_dir)
    result = init_project(store, tiny_qwen_dir)
    [policy] = list_policies(store)
    assert (policy.id, policy.round, policy.parent_id) == (result.policy_id, 0, None)
    assert policy.path == str(tiny_qwen_dir.resolve()) and result.notes == ()
    assert str(tiny_qwen_dir.resolve()) in policy.note
    assert result.reward_base is None and get_setting(store, REWARD_BASE_SETTING) is None
    assert not store.data_dir.exists() and folder_digest(tiny_qwen_dir) == before
    assert count_prompts(store) == 0 and store.db()["generations"].count == 0  # no demo seeded


def test_a_model_without_pad_is_registered_as_a_copy_with_a_reused_pad(store, tiny_llama_dir):
    before = folder_digest(tiny_llama_dir)
    result = init_project(store, tiny_llama_dir)
    assert result.policy_path == store.data_dir / MODELS_DIR / "llama"
    assert list_policies(store)[0].path == str(result.policy_path)
    [note] = result.notes
    assert "<|reserved_special_token_0|>" in note and str(tiny_llama_dir) in note
    assert str(tiny_llama_dir.resolve()) in list_policies(store)[0].note
    tokenizer = load_tokenizer(result.policy_path)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<|reserved_special_token_0|>"
    assert load_policy(result.policy_path).config.pad_token_id == tokenizer.pad_token_id
    assert folder_digest(tiny_llama_dir) == before


def test_pickle_only_policy_converts_with_allow_pickle(store, bad_model_dirs):
    source = bad_model_dirs["pickle_only"]
    before = folder_digest(source)
    result = init_project(store, source, allow_pickle=True)
    assert "weights_only=True" in result.notes[0]
    assert (result.policy_path / "model.safetensors").is_file() and not list(result.policy_path.glob("*.bin"))
    assert load_policy(result.policy_path).generation_config.pad_token_id == load_tokenizer(source).pad_token_id
    assert folder_digest(source) == before


def test_reward_base_is_recorded_and_prepared_like_the_policy(store, tiny_qwen_dir, bad_model_dirs):
    result = init_project(store, tiny_qwen_dir, reward_base=bad_model_dirs["classifier_only"])
    assert result.reward_base == store.data_dir / MODELS_DIR / "classifier_only-reward-base"  # pad fixed in a copy
    assert get_setting(store, REWARD_BASE_SETTING) == str(result.reward_base)
    assert "reused" in result.notes[0] and load_reward_model(result.reward_base).config.num_labels == 1


def test_reward_base_equal_to_the_policy_is_the_default(store, tiny_qwen_dir):
    assert init_project(store, tiny_qwen_dir, reward_base=tiny_qwen_dir).reward_base is None
    assert get_setting(store, REWARD_BASE_SETTING) is None


def test_a_failure_after_a_copy_was_made_removes_it_all(store, tiny_llama_dir, tmp_path):
    broken = make_pickle_only(build_tiny_llama(tmp_path / "src"), tmp_path / "broken")
    (broken / "pytorch_model.bin").write_bytes(b"not a pickle")
    message = _refused(store, ModelError, policy_dir=tiny_llama_dir, reward_base=broken, allow_pickle=True)
    assert "unreadable" in message and str(broken) in message
    assert not store.data_dir.exists()  # the policy's copy, made first, is gone with the folders made for it


def test_an_existing_data_folder_keeps_its_files_after_a_refusal(store, tiny_llama_dir, tmp_path):
    (store.data_dir / MODELS_DIR).mkdir(parents=True)
    (store.data_dir / "exports.jsonl").write_text("{}\n")
    broken = make_pickle_only(build_tiny_llama(tmp_path / "src"), tmp_path / "broken")
    (broken / "pytorch_model.bin").write_bytes(b"not a pickle")
    _refused(store, ModelError, policy_dir=tiny_llama_dir, reward_base=broken, allow_pickle=True)
    result = init_project(store, tiny_llama_dir)
    assert result.policy_path == store.data_dir / MODELS_DIR / "llama"
