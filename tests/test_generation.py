"""The HF generation backend on the shipped demo policy: shapes, EOS cuts, pads, limits, seeds, bad input."""

import functools

import pytest
import torch

from assets.build_demo import DEMO_POLICY_DIR
from storage.errors import InvalidInput
from trainers.models.generation import HFGenerator, Sample
from trainers.models.loading import load_policy, load_tokenizer

PROMPTS = ["the movie was", "in my opinion the lead actor", "i thought the plot"]


@functools.cache
def _generator() -> HFGenerator:
    return HFGenerator(load_policy(DEMO_POLICY_DIR), load_tokenizer(DEMO_POLICY_DIR))


def _sample(**overrides) -> list[list[Sample]]:
    args = dict(prompts=PROMPTS, num_samples=4, max_new_tokens=24, temperature=1.0, top_p=1.0, seed=0)
    return _generator().generate(**{**args, **overrides})


def test_one_list_of_num_samples_per_prompt_in_prompt_order():
    samples = _sample()
    assert [len(group) for group in samples] == [4, 4, 4]
    assert [[s.prompt for s in group] for group in samples] == [[p] * 4 for p in PROMPTS]
    assert _generator().generate([], 4, 24, 1.0, 1.0, seed=0) == []


def test_samples_are_cut_at_the_first_eos_without_pads():
    tokenizer = _generator().tokenizer
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    flat = [s for group in _sample(batch_size=12) for s in group]
    lengths = {s.num_tokens for s in flat}
    assert len(lengths) > 1  # rows ended at different steps, so the batch held pads after the early EOSes
    for s in flat:
        assert pad not in s.token_ids and s.num_tokens == len(s.token_ids) > 0
        assert s.token_ids.count(eos) == (1 if s.ended_with_eos else 0)
        assert s.ended_with_eos == (s.token_ids[-1] == eos)
        assert s.text == tokenizer.decode([t for t in s.token_ids if t != eos])
        assert s.text.startswith(" ")  # prompt + text is the whole review


def test_max_new_tokens_is_respected():
    flat = [s for group in _sample(max_new_tokens=3) for s in group]
    assert all(s.num_tokens <= 3 for s in flat)
    assert any(s.num_tokens == 3 and not s.ended_with_eos for s in flat)


def test_same_seed_same_samples_other_seed_other_samples():
    first = _sample(seed=7, num_samples=2, max_new_tokens=8)
    assert _sample(seed=7, num_samples=2, max_new_tokens=8) == first
    assert _sample(seed=8, num_samples=2, max_new_tokens=8) != first


def test_callers_random_state_is_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _sample(num_samples=1, max_new_tokens=4)
    assert torch.equal(torch.rand(3), expected)


def test_left_padded_batch_matches_each_prompt_alone():
    together = _sample(num_samples=1, temperature=0.0, max_new_tokens=8)
    alone = [_sample(prompts=[p], num_samples=1, temperature=0.0, max_new_tokens=8)[0] for p in PROMPTS]
    assert together == alone


def test_small_batches_cover_every_row():
    samples = _sample(num_samples=3, batch_size=2, max_new_tokens=2)
    assert [len(group) for group in samples] == [3, 3, 3]


def test_model_is_left_in_its_training_mode():
    model = _generator().model
    model.train()
    try:
        _sample(num_samples=1, max_new_tokens=2)
        assert model.training
    finally:
        model.eval()


@pytest.mark.parametrize("overrides, words", [
    (dict(num_samples=0), "samples per prompt"),
    (dict(max_new_tokens=0), "max new tokens"),
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top-p"),
    (dict(top_p=1.5), "top-p"),
    (dict(batch_size=0), "batch size"),
    (dict(prompts=["the movie was", "  "]), "prompt 2 is empty"),
    (dict(max_new_tokens=60), "prompt 2 has 6 tokens, which with 60 new tokens exceeds the model's context of 64"),
])
def test_bad_settings_raise_one_line_invalid_input(overrides, words):
    with pytest.raises(InvalidInput, match=words) as caught:
        _sample(**overrides)
    assert "\n" not in str(caught.value)
