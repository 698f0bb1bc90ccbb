"""What a reward model trains on (trainers/reward/data.py, and the examples trainers/jobs/reward_job.py reads from
the store): the current non-skip labels as soft targets, imported margins, a split by pair, the score read at the
last real token whatever the padding, and nothing cut: a pair over the context is left out, counted."""


import pytest
import torch

from labeling.queue.annotation import undo_label, update_queue_settings
from storage import StudioError
from storage.pairs import get_pair
from storage.policies import add_policy
from storage.preferences import Preference, import_preferences
from storage.prompts import PromptSelection, set_excluded
from storage.types import Outcome
from tests.helpers import label_pairs
from trainers.jobs.reward_job import check_reward_inputs, load_examples
from trainers.models.loading import load_chat_format, load_reward_model, load_tokenizer
from trainers.models.sampling import length_chunks
from trainers.reward.batches import pad_right, prompted_rows, whole_rows
from trainers.reward.config import RewardConfig
from trainers.reward.data import (
    PreferenceCollator,
    PreferenceExample,
    lineage_split,
    split_by_fit,
    split_by_pair,
    tokenize_examples,
)
from trainers.reward.scorer import prompted_scores, sequence_scores
from trainers.reward.trainer import PreferenceTrainer, training_arguments

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- data ---------------------------------------------------------------------------------------------------------

def test_examples_are_the_current_non_skip_labels_with_soft_targets(store, queue_pairs):
    pairs = queue_pairs([("p", "a", "b"), ("q", "c", "d"), ("r", "e", "f"), ("s", "g", "h"), ("t", "i", "j")])
    update_queue_settings(store, overlap=2)
    label_pairs(store, "ann", {pairs[0]: Outcome.FIRST})
    label_pairs(store, "bob", {pairs[0]: Outcome.SECOND})  # each annotator's label counts
    label_pairs(store, "ann", {pairs[1]: Outcome.TIE, pairs[2]: Outcome.BOTH_BAD, pairs[3]: Outcome.SKIP,
                               pairs[4]: Outcome.SECOND})
    undo_label(store, "ann")  # ann changes her mind on pairs[4]: the new label replaces the undone one
    label_pairs(store, "ann", {pairs[4]: Outcome.FIRST})
    got = [(e.pair_id, e.first, e.second, e.target) for e in load_examples(store)[0]]
    assert got == [(pairs[0], "a", "b", 1.0), (pairs[0], "a", "b", 0.0), (pairs[1], "c", "d", 0.5),
                   (pairs[2], "e", "f", 0.5), (pairs[4], "i", "j", 1.0)]
    assert [e.pair_id for e in load_examples(store, both_bad_as_tie=False)[0]] == [pairs[0], pairs[0], pairs[1],
                                                                                  pairs[4]]


def test_imported_margins_reach_the_loss_and_the_others_take_the_configured_margin(store, queue_pairs, tiny_gpt2_dir):
    import_preferences(store, [Preference("Review it.", " Great film.", " Dull film.", 2.0),
                               Preference("Review it.", " Fine acting.", " Dull film.")], "import", 0.0)
    [pair] = queue_pairs([("p", " a", " b")])
    label_pairs(store, "ann", {pair: Outcome.SECOND})
    examples, _ = load_examples(store, margin=0.25)
    assert [(e.first, e.target, e.margin) for e in examples] == [
        (" Great film.", 1.0, 2.0), (" Fine acting.", 1.0, 0.25), (" a", 0.0, 0.25)]

    tokenizer = load_tokenizer(tiny_gpt2_dir)
    tokenized = list(tokenize_examples(load_chat_format(tiny_gpt2_dir), examples))
    batch = PreferenceCollator(tokenizer.pad_token_id)(tokenized)
    assert batch["margin"].tolist() == [2.0, 0.25, 0.25]
    model = load_reward_model(tiny_gpt2_dir)
    trainer = PreferenceTrainer(model=model, args=training_arguments(RewardConfig(), str(store.data_dir), 0, False))
    scores = sequence_scores(model, *whole_rows(batch))  # (6,): each pair's two in turn
    first, second = scores[0::2], scores[1::2]
    assert batch["first"].tolist() == [0, 2, 4] and batch["second"].tolist() == [1, 3, 5]
    expected = -torch.nn.functional.logsigmoid(torch.stack([first[0] - second[0] - 2.0, first[1] - second[1] - 0.25,
                                                            second[2] - first[2] - 0.25])).mean()
    assert trainer.compute_loss(model, batch).item() == pytest.approx(expected.item(), rel=1e-5)


def test_split_is_by_pair_and_deterministic():
    examples = [PreferenceExample(i, i // 2, "p", "a", "b", 1.0) for i in range(40)]  # 2 labels per pair
    train, val = split_by_pair(examples, 0.25, seed=1)
    assert (train, val) == split_by_pair(examples, 0.25, seed=1)
    assert len({e.pair_id for e in val}) == 5 and len(val) == 10
    assert not {e.pair_id for e in train} & {e.pair_id for e in val}
    assert split_by_pair(examples, 0.25, seed=2)[1] != val
    assert split_by_pair(examples, 0.0, seed=1) == (examples, [])
    one_pair = examples[:2]
    assert split_by_pair(one_pair, 0.5, seed=0) == (one_pair, [])  # the only pair trains


def test_a_lineage_validates_again_on_what_it_held_out_and_holds_out_a_fifth_of_what_is_new_to_it():
    examples = [PreferenceExample(i, i, "p", "a", "b", 1.0) for i in range(400)]
    early_train, early_val = split_by_pair(examples[:150], 0.2, seed=3)
    seen = {e.key for e in examples[:150]}
    retold = PreferenceExample(1000, early_train[0].pair_id, "p", "a", "b", 0.0)  # a new label on a trained pair
    train, val = lineage_split(examples + [retold], seen, {e.unit for e in early_val}, 0.2, seed=3)
    assert set(early_val) <= set(val) and set(early_train) <= set(train)  # never validated on what it trained on
    assert retold in train
    fresh_val = [e for e in val if e.pair_id >= 150]
    assert len(fresh_val) == round(250 * 0.2) and len(val) == 30 + 50
    assert lineage_split(examples, seen, set(), 0.2, seed=3)[1] == split_by_pair(examples[150:], 0.2, seed=3)[1]


def test_scores_read_the_last_real_token_whatever_the_padding(tiny_gpt2_dir):
    tokenizer = load_tokenizer(tiny_gpt2_dir)
    torch.manual_seed(0)
    model = load_reward_model(tiny_gpt2_dir)
    rows = load_chat_format(tiny_gpt2_dir).sequences_ids(["the movie was", "i thought the acting", "the film"],
                                                      [" great .", " was dull and far too long for me .", " ok"])
    assert all(row[-1] == tokenizer.eos_token_id for row in rows)
    with torch.no_grad():
        alone = torch.cat([model(input_ids=torch.tensor([row])).logits[:, 0] for row in rows])
        input_ids, attention_mask = pad_right(rows, tokenizer.pad_token_id)
        right = sequence_scores(model, input_ids, attention_mask)
        plain_right = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0]
        left_ids = torch.stack([torch.cat([ids[mask == 0], ids[mask == 1]])
                                for ids, mask in zip(input_ids, attention_mask, strict=True)])
        left_mask = torch.stack([torch.cat([mask[mask == 0], mask[mask == 1]]) for mask in attention_mask])
        pad = tokenizer.pad_token_id
        assert left_ids[1, 0] != pad and left_ids[0, 0] == pad  # really left-padded
        left = sequence_scores(model, left_ids, left_mask)
    assert right.tolist() == pytest.approx(alone.tolist(), abs=1e-5)
    assert plain_right.tolist() == pytest.approx(alone.tolist(), abs=1e-5)
    assert left.tolist() == pytest.approx(alone.tolist(), abs=1e-5)


def test_length_chunks_cut_the_rows_where_the_fewest_tokens_are_read():
    lengths = [10, 200, 30, 190, 40, 180, 20]
    chunks = length_chunks(lengths, pass_tokens=300)
    assert chunks == [[1, 3, 5], [4, 2, 6, 0]]  # 3 x 200 + 300 + 4 x 40 + 300 = 1360: one chunk 1700, three 1630
    assert length_chunks(lengths, pass_tokens=10_000) == [[1, 3, 5, 4, 2, 6, 0]]  # passes dearer than any padding
    assert length_chunks(lengths, pass_tokens=0) == [[1], [3], [5], [4], [2], [6], [0]]
    assert length_chunks([50, 60], pass_tokens=10) == [[1, 0]]  # 130 either way: the fewer passes
    assert length_chunks([50, 60], pass_tokens=5) == [[1], [0]]  # 120 < 125
    assert length_chunks([7, 7, 7], pass_tokens=0) == [[0, 1, 2]] and length_chunks([], pass_tokens=64) == []


@pytest.mark.parametrize("fixture", ["tiny_gpt2_dir", "tiny_qwen_dir"])
def test_prompted_scores_read_each_prompt_once_and_equal_whole_rows_with_their_gradients(fixture, request,
                                                                                        monkeypatch):
    folder = request.getfixturevalue(fixture)
    chat, pad_id = load_chat_format(folder), load_tokenizer(folder).pad_token_id
    torch.manual_seed(0)
    model = load_reward_model(folder)
    words = "the movie was great and i would see it again with friends".split()
    prompts = ["the film", "a long prompt about the movie we saw", "the film"] * 3
    responses = [" ".join(words[:n]) for n in (1, 12, 3, 9, 2, 12, 6, 1, 4)]
    rows = prompted_rows(chat.prompts_ids(prompts), chat.responses_ids(responses), pad_id)
    assert rows["prompt_ids"].shape[0] == 2 and rows["prompt_of"].tolist() == [0, 1, 0] * 3
    assert whole_rows(rows)[0][0][whole_rows(rows)[1][0] == 1].tolist() == chat.sequences_ids(prompts, responses)[0]
    tokens = []
    model.register_forward_pre_hook(lambda module, args, kwargs: tokens.append(kwargs["input_ids"].numel()),
                                    with_kwargs=True)
    monkeypatch.setattr("trainers.reward.scorer.CPU_PASS_TOKENS", 0)
    prompted = prompted_scores(model, rows)
    assert len(tokens) > 2 and sum(tokens) < whole_rows(rows)[0].numel()  # the prompts once, chunks of like length
    grads = torch.autograd.grad(prompted.sum(), list(model.parameters()), allow_unused=True)
    whole = sequence_scores(model, *whole_rows(rows))
    alone = torch.cat([sequence_scores(model, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))
                       for ids in chat.sequences_ids(prompts, responses)])
    assert prompted.tolist() == pytest.approx(whole.tolist(), abs=1e-5)
    assert prompted.tolist() == pytest.approx(alone.tolist(), abs=1e-5)
    expected = torch.autograd.grad(whole.sum(), list(model.parameters()), allow_unused=True)
    for got, want in zip(grads, expected, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


def test_nothing_is_cut_a_pair_longer_than_the_context_is_left_out(tiny_gpt2_dir):
    chat = load_chat_format(tiny_gpt2_dir)
    short = PreferenceExample(1, 1, "the movie was", " great .", " bad .", 1.0)
    long = PreferenceExample(7, 3, "the movie was", " great" * 3, " great and moving and fun ." * 8, 0.0)
    dataset = tokenize_examples(chat, [short, long])
    whole = dataset[1]["prompt"] + dataset[1]["responses"][1]
    assert whole == chat.sequences_ids(["the movie was"], [long.second])[0]  # nothing cut
    assert split_by_fit(chat, [short, long], context=None) == ([short, long], [])
    tokens = len(whole)
    assert split_by_fit(chat, [short, long], context=tokens) == ([short, long], [])
    assert split_by_fit(chat, [short, long], context=tokens - 1) == ([short], [long])


def test_labels_too_long_for_the_reward_model_or_of_excluded_prompts_are_left_out_counted(store, tiny_gpt2_dir,
                                                                                        queue_pairs):
    add_policy(store, str(tiny_gpt2_dir))  # context 64
    pairs = queue_pairs([("the movie was", " great .", " bad ."), ("the film was", " fine .", " dull ."),
                         ("the plot was", " great" * 40, " bad .")])
    label_pairs(store, "ann", {pair: Outcome.FIRST for pair in pairs})
    inputs = check_reward_inputs(store, RewardConfig())
    assert [e.pair_id for e in inputs.examples] == pairs[:2]
    assert inputs.left_out.line() == "1 label left out: 1 too long for the reward model's context of 64 (labels 3)"
    set_excluded(store, PromptSelection(ids=(get_pair(store, pairs[0]).prompt_id,)))
    inputs = check_reward_inputs(store, RewardConfig())
    assert [e.pair_id for e in inputs.examples] == pairs[1:2]
    assert inputs.left_out.line() == ("2 labels left out: 1 too long for the reward model's context of 64 (labels 3);"
                                      " 1 of excluded prompts")
    set_excluded(store, PromptSelection(ids=(get_pair(store, pairs[1]).prompt_id,)))
    with pytest.raises(StudioError, match=r"no label can train a reward model: 3 labels left out: 1 too long .*; 2 of "
                                          r"excluded prompts; include the prompts again"):
        check_reward_inputs(store, RewardConfig())
