"""Reward model: examples from the store, the split, last-token scoring, training, checkpoints, ensemble, errors.

The acceptance run trains on the shipped demo (SFT policy, its samples, 200 oracle labels) with the default
settings. The other tests use tiny GPT-2s built from a config with the demo's tokenizer recipe (pad distinct from
EOS), labelled by the demo's lexicon oracle on corpus sentences.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, GPT2Config, GPT2LMHeadModel

from assets.build_demo import train_tokenizer
from assets.corpus import build_corpus
from assets.lexicon import sentiment_score
from labeling.annotation import undo_label, update_queue_settings
from labeling.selection import candidate_pairs, disagreement_scores, select_by_disagreement, select_random
from labeling.synthetic import OracleAnnotator
from storage import Store, StudioError
from storage.db import copy_store
from storage.generations import NewGeneration, add_generations, list_generations
from storage.jobs import claim_job, create_job, list_jobs, request_cancel
from storage.metrics import read_metrics
from storage.pairs import add_pairs, get_pair, list_pairs
from storage.policies import add_policy, latest_policy
from storage.preferences import Preference, import_preferences
from storage.prompts import PromptSelection, add_prompts, list_prompts, set_excluded
from storage.reward_models import latest_reward_models, list_reward_models
from storage.settings import REWARD_BASE_SETTING, set_setting
from storage.types import JobStatus, Outcome
from tests.helpers import label_pairs
from trainers.entry import reward_cli
from trainers.jobs.reward_job import check_reward_inputs, load_examples, plan_reward_training, train_reward_model
from trainers.models.loading import load_chat_format, load_reward_model, load_tokenizer
from trainers.reporting import JobCancelled, Reporter
from trainers.reward.config import RewardConfig
from trainers.reward.data import (
    PreferenceCollator,
    PreferenceExample,
    pad_right,
    split_by_fit,
    split_by_pair,
    tokenize_examples,
)
from trainers.reward.scorer import INFO_FILE, RewardScorer, pair_probabilities, sequence_scores
from trainers.reward.trainer import PreferenceTrainer, training_arguments

FAST = dict(epochs=3.0, learning_rate=1e-3, batch_size=16, logging_steps=5)


class Progress(Reporter):
    """Hands each progress report (steps done, total steps) to `seen`."""

    def __init__(self, seen):
        self.seen = seen

    def progress(self, done, total):
        self.seen(done, total)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The CI machine's cores are shared: one thread is faster than two fighting over them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def sentences():
    return build_corpus(1500, seed=0)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory, sentences):
    """A tiny untrained GPT-2 policy with a BPE tokenizer whose pad token is not EOS."""
    path = tmp_path_factory.mktemp("policy") / "policy"
    tokenizer = train_tokenizer(sentences, 300)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                        bos_token_id=tokenizer.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def split_sentence(sentence):
    words = sentence.split(" ")
    return " ".join(words[:3]), " " + " ".join(words[3:])


def fill_store(store, policy_dir, sentences, n_labels, samples=4, seed=0):
    """Prompts (first three words), `samples` responses each from one policy, `n_labels` oracle-labelled pairs."""
    responses = {}
    for sentence in sentences:
        prompt, response = split_sentence(sentence)
        responses.setdefault(prompt, []).append(response)
    prompts = sorted(p for p, r in responses.items() if len(set(r)) >= samples)
    add_prompts(store, prompts)
    policy = add_policy(store, str(policy_dir))
    ids = {p.text: p.id for p in list_prompts(store)}
    add_generations(store, [NewGeneration(ids[p], r, policy_id=policy) for p in prompts
                            for r in sorted(set(responses[p]))[:samples]])
    pairs = select_random(candidate_pairs(list_generations(store, policy_id=policy)), n=n_labels, seed=seed)
    texts = {g.id: g.text for g in list_generations(store)}
    outcomes = {}
    for pair_id, pair in zip(add_pairs(store, pairs), pairs):
        first, second = sentiment_score(texts[pair.first_id]), sentiment_score(texts[pair.second_id])
        outcomes[pair_id] = Outcome.FIRST if first > second else Outcome.SECOND if second > first else Outcome.TIE
    label_pairs(store, "oracle", outcomes)
    return policy


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demo_template):
    """The demo store (SFT policy, its samples, 200 queued pairs) with 200 oracle labels, trained once with defaults."""
    path = tmp_path_factory.mktemp("demo") / "studio.db"
    copy_store(demo_template, path)
    store = Store(path)
    assert len(OracleAnnotator.from_spec(seed=0).label(store, 200)) == 200
    job_id = create_job(store, "reward", {})
    claim_job(store, job_id, 1)
    seen = []
    result = train_reward_model(store, RewardConfig(seed=0), job_id=job_id,
                                listener=Progress(lambda done, total: seen.append((done, total))))
    yield store, job_id, result, seen
    store.close()


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


def test_imported_margins_reach_the_loss_and_the_others_take_the_configured_margin(store, queue_pairs, policy_dir):
    import_preferences(store, [Preference("Review it.", " Great film.", " Dull film.", 2.0),
                               Preference("Review it.", " Fine acting.", " Dull film.")], "import", 0.0)
    [pair] = queue_pairs([("p", " a", " b")])
    label_pairs(store, "ann", {pair: Outcome.SECOND})
    examples, _ = load_examples(store, margin=0.25)
    assert [(e.first, e.target, e.margin) for e in examples] == [
        (" Great film.", 1.0, 2.0), (" Fine acting.", 1.0, 0.25), (" a", 0.0, 0.25)]

    tokenizer = load_tokenizer(policy_dir)
    batch = PreferenceCollator(tokenizer.pad_token_id)(list(tokenize_examples(load_chat_format(policy_dir), examples)))
    assert batch["margin"].tolist() == [2.0, 0.25, 0.25]
    model = load_reward_model(policy_dir)
    trainer = PreferenceTrainer(model=model, args=training_arguments(RewardConfig(), str(store.data_dir), 0, False))
    first, second = sequence_scores(model, batch["input_ids"], batch["attention_mask"]).chunk(2)
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


def test_a_stable_split_keeps_each_pair_on_its_side_as_labels_are_added():
    examples = [PreferenceExample(i, i, "p", "a", "b", 1.0) for i in range(400)]
    early_train, early_val = split_by_pair(examples[:150], 0.2, seed=3, stable=True)
    train, val = split_by_pair(examples, 0.2, seed=3, stable=True)
    assert set(early_val) <= set(val) and set(early_train) <= set(train)  # never validated on what it trained on
    assert 0.15 <= len(val) / len(examples) <= 0.25


def test_scores_read_the_last_real_token_whatever_the_padding(policy_dir):
    tokenizer = load_tokenizer(policy_dir)
    torch.manual_seed(0)
    model = load_reward_model(policy_dir)
    rows = load_chat_format(policy_dir).sequences_ids(["the movie was", "i thought the acting", "the film"],
                                                      [" great .", " was dull and far too long for me .", " ok"])
    assert all(row[-1] == tokenizer.eos_token_id for row in rows)
    with torch.no_grad():
        alone = torch.cat([model(input_ids=torch.tensor([row])).logits[:, 0] for row in rows])
        input_ids, attention_mask = pad_right(rows, tokenizer.pad_token_id)
        right = sequence_scores(model, input_ids, attention_mask)
        plain_right = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0]
        left_ids = torch.stack([torch.cat([ids[mask == 0], ids[mask == 1]]) for ids, mask in zip(input_ids, attention_mask)])
        left_mask = torch.stack([torch.cat([mask[mask == 0], mask[mask == 1]]) for mask in attention_mask])
        assert left_ids[1, 0] != tokenizer.pad_token_id and left_ids[0, 0] == tokenizer.pad_token_id  # really left-padded
        left = sequence_scores(model, left_ids, left_mask)
    assert right.tolist() == pytest.approx(alone.tolist(), abs=1e-5)
    assert plain_right.tolist() == pytest.approx(alone.tolist(), abs=1e-5)
    assert left.tolist() == pytest.approx(alone.tolist(), abs=1e-5)


def test_nothing_is_cut_a_pair_longer_than_the_context_is_left_out(policy_dir):
    chat = load_chat_format(policy_dir)
    short = PreferenceExample(1, 1, "the movie was", " great .", " bad .", 1.0)
    long = PreferenceExample(7, 3, "the movie was", " great" * 3, " great and moving and fun ." * 8, 0.0)
    dataset = tokenize_examples(chat, [short, long])
    assert dataset[1]["second_ids"] == chat.sequences_ids(["the movie was"], [long.second])[0]  # whole
    assert split_by_fit(chat, [short, long], context=None) == ([short, long], [])
    tokens = len(dataset[1]["second_ids"])
    assert split_by_fit(chat, [short, long], context=tokens) == ([short, long], [])
    assert split_by_fit(chat, [short, long], context=tokens - 1) == ([short], [long])


def test_labels_too_long_for_the_reward_model_or_of_excluded_prompts_are_left_out_counted(store, policy_dir,
                                                                                        queue_pairs):
    add_policy(store, str(policy_dir))  # context 64
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


# ---- training -----------------------------------------------------------------------------------------------------

def test_on_the_demo_200_oracle_labels_give_085_validation_accuracy(trained):
    store, job_id, result, _ = trained
    [model] = list_reward_models(store)
    assert result.reward_model_ids == [model.id] and model.labels_used == 200 == result.labels_used
    assert model.job_id == job_id and model.ensemble_size == 1 and model.ensemble_index == 0
    assert result.train_pairs == 160 and result.val_pairs == 40
    assert model.metrics["val_accuracy"] >= 0.85
    assert model.metrics["train_loss"] < 0.69  # below chance (ln 2)
    assert set(model.metrics) >= {"val_loss", "val_accuracy", "val_tie_logloss", "train_loss", "train_accuracy"}


def test_metrics_go_to_the_store_each_logging_step(trained):
    store, job_id, _, seen = trained
    rows = read_metrics(store, job_id, prefix="reward/")
    names = {r["name"] for r in rows}
    assert names >= {"reward/loss", "reward/accuracy", "reward/val_loss", "reward/val_accuracy", "reward/tie_logloss"}
    steps = sorted({r["step"] for r in rows if r["name"] == "reward/loss"})
    total = 12 * 10  # 12 epochs of 160 training pairs / 16 per batch
    assert steps == list(range(10, total + 1, 10))
    assert sorted({r["step"] for r in rows if r["name"] == "reward/val_accuracy"}) == steps
    assert seen[0] == (1, total) and seen[-1] == (total, total)


def test_the_checkpoint_is_a_plain_hf_directory_that_gives_the_same_scores(trained):
    store, _, result, _ = trained
    [model] = list_reward_models(store)
    info = json.loads(open(f"{model.path}/{INFO_FILE}").read())
    assert info["labels_used"] == 200 and len(info["label_ids"]) == 200 and info["ensemble_index"] == 0
    assert info["norm_mean"] == pytest.approx(model.norm_mean) and info["norm_std"] == pytest.approx(model.norm_std)
    assert info["metrics"] == model.metrics and info["norm_source"].startswith("policy")
    staging = [p.name for p in (store.data_dir / "reward_models").iterdir() if p.name.startswith(".")]
    assert staging == []

    scorer = RewardScorer.from_store(store)
    prompts, responses = ["the movie was", "the plot was"], [" brilliant and moving .", " awful , a total mess ."]
    ours = scorer.raw_scores(prompts, responses)[0]
    hf = AutoModelForSequenceClassification.from_pretrained(model.path).eval()
    with torch.no_grad():
        theirs = torch.cat([hf(input_ids=torch.tensor([row])).logits[:, 0]
                            for row in load_chat_format(model.path).sequences_ids(prompts, responses)])
    assert ours.tolist() == pytest.approx(theirs.tolist(), abs=1e-5)
    assert ours[0] > ours[1]  # it learnt the lexicon's sentiment
    assert scorer.score(prompts, responses).tolist() == \
        pytest.approx(((ours - model.norm_mean) / model.norm_std).tolist(), abs=1e-5)


def test_rewards_are_normalised_on_the_policy_samples(trained):
    store, _, _, _ = trained
    generations = list_generations(store)
    texts = {p.id: p.text for p in list_prompts(store)}
    rewards = RewardScorer.from_store(store).score([texts[g.prompt_id] for g in generations], [g.text for g in generations])
    assert rewards.mean().item() == pytest.approx(0.0, abs=1e-4)
    assert rewards.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-3)


def test_training_changes_the_weights(trained):
    store, _, _, _ = trained
    [model] = list_reward_models(store)
    before = GPT2LMHeadModel.from_pretrained(latest_policy(store).path).transformer.h[0].attn.c_attn.weight
    after = AutoModelForSequenceClassification.from_pretrained(model.path).transformer.h[0].attn.c_attn.weight
    assert not torch.allclose(before, after)


def test_ensemble_members_disagree_where_the_selector_looks(store, policy_dir, sentences):
    policy = fill_store(store, policy_dir, sentences, 90, samples=5)
    result = train_reward_model(store, RewardConfig(**{**FAST, "epochs": 2.0, "logging_steps": 10}, ensemble=3))
    members = latest_reward_models(store)
    assert [m.ensemble_index for m in members] == [0, 1, 2] and {m.ensemble_size for m in members} == {3}
    assert [m.id for m in members] == result.reward_model_ids
    infos = [json.loads(open(f"{m.path}/{INFO_FILE}").read()) for m in members]
    assert len({tuple(i["member_label_ids"]) for i in infos}) == 3  # three different bootstrap resamples
    assert all(len(i["member_label_ids"]) == 72 for i in infos)

    scorer = RewardScorer.from_store(store)
    assert scorer.size == 3
    queued = [(p.first_id, p.second_id) for p in list_pairs(store)]
    candidates = candidate_pairs(list_generations(store, policy_id=policy), exclude=queued)
    prompts = {p.id: p.text for p in list_prompts(store)}
    probs = pair_probabilities(scorer, candidates, prompts)
    assert probs.shape == (3, len(candidates)) and len(candidates) >= 200
    spread = dict(zip([c.key for c in candidates], disagreement_scores(probs)))
    chosen = select_by_disagreement(candidates, probs, n=40)
    random_pairs = select_random(candidates, n=40, seed=0)
    chosen_spread = np.mean([spread[(p.first_id, p.second_id)] for p in chosen])
    random_spread = np.mean([spread[(p.first_id, p.second_id)] for p in random_pairs])
    assert chosen_spread > random_spread
    assert chosen[0].score == pytest.approx(max(spread.values()))


def test_a_cancel_request_stops_training_within_one_logging_step(store, policy_dir, sentences):
    fill_store(store, policy_dir, sentences, 100)
    job_id = create_job(store, "reward", {})
    claim_job(store, job_id, 1)
    request_cancel(store, job_id)
    with pytest.raises(JobCancelled):
        train_reward_model(store, RewardConfig(**FAST), job_id=job_id)
    assert list_reward_models(store) == []
    assert max(r["step"] for r in read_metrics(store, job_id)) <= FAST["logging_steps"]
    folder = store.data_dir / "reward_models"
    assert not folder.exists() or not any(folder.iterdir())


def test_the_model_starts_from_the_sft_policy_and_normalises_on_the_newest(store, policy_dir, queue_pairs, tmp_path):
    [pair] = queue_pairs([("p", "a", "b")])
    label_pairs(store, "ann", {pair: Outcome.FIRST})
    sft = add_policy(store, str(policy_dir))
    round1 = add_policy(store, str(tmp_path / "not-needed-1"), parent_id=sft, round=1)
    round2 = add_policy(store, str(tmp_path / "not-needed-2"), parent_id=round1, round=2)
    inputs = check_reward_inputs(store, RewardConfig())
    assert (inputs.policy.id, inputs.init_dir) == (round2, policy_dir)
    inputs = check_reward_inputs(store, RewardConfig(policy_id=round1, init_policy_id=sft))
    assert (inputs.policy.id, inputs.init_dir) == (round1, policy_dir)


def test_a_warm_start_begins_each_member_from_the_newest_reward_models_same_member(store, policy_dir, sentences):
    fill_store(store, policy_dir, sentences, 60)
    assert check_reward_inputs(store, RewardConfig(warm_start=True)).warm_dirs == ()  # no reward model yet: the base
    first = train_reward_model(store, RewardConfig(**{**FAST, "epochs": 1.0}, ensemble=2))
    plan = plan_reward_training(store, RewardConfig(warm_start=True, ensemble=3))
    assert [str(plan.start_dir(k)) for k in range(3)] == [first.paths[0], first.paths[1], first.paths[0]]
    assert plan_reward_training(store, RewardConfig()).start_dir(1) == policy_dir
    again = train_reward_model(store, RewardConfig(**{**FAST, "epochs": 1.0, "learning_rate": 1e-12}, warm_start=True,
                                                   round=1))
    head = lambda path: load_reward_model(path).score.weight.detach()  # the head a cold start draws anew
    assert torch.allclose(head(again.paths[0]), head(first.paths[0]), atol=1e-6)
    assert not torch.allclose(head(again.paths[0]), head(first.paths[1]), atol=1e-3)


def test_early_stopping_ends_when_validation_loss_stops_falling_and_keeps_the_best(store, policy_dir, sentences):
    fill_store(store, policy_dir, sentences, 120)
    job_id = create_job(store, "reward", {})
    claim_job(store, job_id, 1)
    seen = []
    result = train_reward_model(store, RewardConfig(**{**FAST, "epochs": 40.0, "learning_rate": 1e-2, "logging_steps": 3},
                                                    early_stopping_patience=2), job_id=job_id,
                                listener=Progress(lambda done, total: seen.append((done, total))))
    done, total = seen[-1]
    assert done < total  # stopped before its 40 epochs
    val_losses = [r["value"] for r in read_metrics(store, job_id, names=["reward/val_loss"])]
    assert len(val_losses) >= 3
    assert result.metrics[0]["val_loss"] == pytest.approx(min(val_losses), rel=1e-4)  # the best weights were kept


def test_the_projects_reward_base_is_the_start_and_its_own_format_reads_the_pairs(store, policy_dir, queue_pairs,
                                                                                  tiny_qwen_dir):
    [pair] = queue_pairs([("p", "a", "b")])
    label_pairs(store, "ann", {pair: Outcome.FIRST})
    add_policy(store, str(policy_dir))
    set_setting(store, REWARD_BASE_SETTING, str(tiny_qwen_dir))
    inputs = check_reward_inputs(store, RewardConfig())
    assert inputs.init_dir == tiny_qwen_dir and inputs.chat.chat_template  # the base's own chat template
    assert check_reward_inputs(store, RewardConfig(init_policy_id=1)).init_dir == policy_dir  # an explicit start wins


# ---- bad inputs ---------------------------------------------------------------------------------------------------

def snapshot(store):
    folder = store.data_dir / "reward_models"
    return (list_reward_models(store), read_metrics(store), sorted(folder.iterdir()) if folder.exists() else None)


def test_no_usable_labels_is_one_clear_error(store, policy_dir, queue_pairs):
    add_policy(store, str(policy_dir))
    with pytest.raises(StudioError, match="no labels"):
        train_reward_model(store, RewardConfig())
    [pair] = queue_pairs([("p", "a", "b")])
    label_pairs(store, "ann", {pair: Outcome.SKIP})
    with pytest.raises(StudioError, match="no labels"):
        train_reward_model(store, RewardConfig())
    label_pairs(store, "bob", {pair: Outcome.BOTH_BAD})
    with pytest.raises(StudioError, match="both bad"):
        train_reward_model(store, RewardConfig(both_bad_as_tie=False))
    assert snapshot(store) == ([], [], None)


def test_labels_whose_generations_were_deleted_are_one_clear_error(store, policy_dir, queue_pairs):
    add_policy(store, str(policy_dir))
    pairs = queue_pairs([("p", "a", "b"), ("q", "c", "d")])
    label_pairs(store, "ann", {pair: Outcome.FIRST for pair in pairs})
    db = store.db()  # no studio function deletes generations; simulate a damaged or hand-edited store
    db.conn.execute("PRAGMA foreign_keys = OFF")
    db.conn.execute("DELETE FROM generations")
    db.conn.commit()
    with pytest.raises(StudioError) as info:
        train_reward_model(store, RewardConfig())
    assert "generations were deleted" in str(info.value) and "\n" not in str(info.value)
    assert snapshot(store) == ([], [], None)


def test_a_policy_without_tokenizer_or_pad_token_is_one_clear_error(store, policy_dir, tmp_path, queue_pairs):
    [pair] = queue_pairs([("p", "a", "b")])
    label_pairs(store, "ann", {pair: Outcome.FIRST})
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(policy_dir / name, bare / name)
    add_policy(store, str(bare))
    with pytest.raises(StudioError, match="no tokenizer"):
        train_reward_model(store, RewardConfig())

    no_pad = tmp_path / "no_pad"
    shutil.copytree(policy_dir, no_pad)
    tokenizer_config = json.loads((no_pad / "tokenizer_config.json").read_text())
    tokenizer_config["pad_token"] = None
    (no_pad / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    add_policy(store, str(no_pad))
    with pytest.raises(StudioError, match="no pad token"):
        check_reward_inputs(store, RewardConfig())
    with pytest.raises(StudioError, match="no pad token"):
        train_reward_model(store, RewardConfig())
    assert snapshot(store) == ([], [], None)


@pytest.mark.parametrize("setting", [{"epochs": 0}, {"learning_rate": -1.0}, {"batch_size": 0}, {"ensemble": 0},
                                     {"val_fraction": 1.0}, {"label_noise": 1.0}, {"margin": -1.0}])
def test_out_of_range_settings_are_refused_before_anything_else(store, setting):
    with pytest.raises(StudioError):
        train_reward_model(store, RewardConfig(**setting))


# ---- command line -------------------------------------------------------------------------------------------------

def app(*args):
    """`python app.py ARGS` in a subprocess, as a user runs it."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.run([sys.executable, str(root / "app.py"), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})


def test_train_reward_command_trains_registers_and_prints_validation_metrics(store, policy_dir, sentences):
    fill_store(store, policy_dir, sentences, 60)
    result = app("train-reward", "--db", str(store.path), "--epochs", "1", "--lr", "1e-3", "--ensemble", "2")
    assert result.returncode == 0, result.stderr
    assert "trained on 60 labels (48 training pairs, 12 validation pairs)" in result.stdout
    assert result.stdout.count("val_accuracy") == 2 and "member 2/2" in result.stdout
    assert "reward model" in result.stderr  # the progress bar
    [job] = list_jobs(store)
    assert job.kind == "reward" and job.status is JobStatus.COMPLETED and job.config["ensemble"] == 2
    assert [m.job_id for m in list_reward_models(store)] == [job.id, job.id]


def test_train_reward_command_bad_input_fails_before_any_job_or_store_change(store, policy_dir):
    """(app.py turns the StudioError into exit code 2 and one line on stderr; tests/test_cli.py checks that.)"""
    parser = argparse.ArgumentParser()
    reward_cli.add_arguments(parser)
    add_policy(store, str(policy_dir))
    with pytest.raises(StudioError, match="no labels"):
        reward_cli.run(parser.parse_args([]), lambda args: store)
    assert list_jobs(store) == [] and snapshot(store) == ([], [], None)
    with pytest.raises(StudioError, match="epochs must be positive"):  # checked before the store is even opened
        reward_cli.run(parser.parse_args(["--epochs", "0"]), lambda args: pytest.fail("the store was opened"))


def test_a_training_shorter_than_one_logging_interval_still_logs_its_last_step(store, policy_dir, sentences):
    fill_store(store, policy_dir, sentences, 60)
    job_id = create_job(store, "reward", {})
    claim_job(store, job_id, 1)
    seen = []
    train_reward_model(store, RewardConfig(**{**FAST, "epochs": 1.0, "logging_steps": 1000}), job_id=job_id,
                       listener=Progress(lambda done, total: seen.append(total)))
    rows = read_metrics(store, job_id, prefix="reward/")
    assert {r["step"] for r in rows if r["name"] in ("reward/loss", "reward/accuracy")} == {seen[-1]}
    assert {r["name"] for r in rows} >= {"reward/loss", "reward/val_loss"}
