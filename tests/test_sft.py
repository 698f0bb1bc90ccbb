"""SFT on TRL's SFTTrainer (trainers/policy/sft.py) on the tiny GPT-2 policy: the loss is on the answer's tokens only
(by hand: prompt positions get no gradient), each answer closed by the end-of-turn id, nothing cut; the run moves
the weights, reports sft/ metrics with a held-out loss, stops within a step and resumes, and saves a plain policy
(LoRA merged, no adapter kept)."""

import math

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

from tests.policy_helpers import make_policy, make_tokenizer
from trainers.models.chat_format import ChatFormat
from trainers.policy.sft import (
    StudioSFTTrainer,
    heldout_split,
    save_sft_policy,
    sft_rows,
    train_sft,
    training_arguments,
)
from trainers.policy.sft_config import SFTConfig, SFTExample, SFTSetupError
from trainers.reporting import JobCancelled, Reporter

pytestmark = pytest.mark.usefixtures("one_thread")

ANSWERS = {"the movie was": "great .", "the plot was": "good .", "the acting was": "great and fine .",
           "the movie is": "good .", "the plot is": "great .", "the acting is": "fine and good ."}
EXAMPLES = [SFTExample(i, prompt, answer) for i, (prompt, answer) in enumerate(ANSWERS.items(), 1)]


def chat_of(tokenizer):
    return ChatFormat.from_tokenizer(tokenizer, [tokenizer.eos_token_id])


class Recorder(Reporter):
    def __init__(self, stop_after: int | None = None):
        self.metrics, self.done, self.stop_after = {}, [], stop_after

    def on_step(self, step, metrics):
        for name, value in metrics.items():
            self.metrics.setdefault(name, []).append((step, value))

    def progress(self, done, total):
        self.done.append((done, total))

    def should_stop(self):
        return self.stop_after is not None and self.done and self.done[-1][0] >= self.stop_after


def test_rows_mark_the_answer_closed_by_the_end_of_turn_id():
    tokenizer = make_tokenizer()
    [row] = sft_rows(chat_of(tokenizer), [SFTExample(1, "the movie was", "great .")])
    ids = tokenizer("the movie was great .", add_special_tokens=False)["input_ids"]
    assert row["input_ids"] == ids + [tokenizer.eos_token_id]
    assert row["completion_mask"] == [0, 0, 0, 1, 1, 1]


def test_prompt_tokens_carry_no_gradient():
    """The trainer's loss is the mean NLL of the answer tokens (end-of-turn id included) computed by hand, and the
    hidden states at the positions that predict prompt tokens get exactly zero gradient."""
    tokenizer, policy = make_tokenizer(), make_policy()
    config = SFTConfig(heldout_share=0.0)
    rows = sft_rows(chat_of(tokenizer), EXAMPLES[:2])
    trainer = StudioSFTTrainer(model=policy, args=training_arguments(config, "unused", False, False),
                               train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    prompt_lengths = [row["completion_mask"].index(1) for row in rows]
    for labels, row, prompt in zip(batch["labels"], rows, prompt_lengths, strict=True):
        assert (labels[:prompt] == -100).all() and labels[len(row["input_ids"]) - 1] == tokenizer.eos_token_id
    hidden = {}
    handle = policy.transformer.ln_f.register_forward_hook(lambda m, i, out: hidden.update(h=out) or out.retain_grad())
    policy.eval()  # no dropout: the hand computation below sees the same network
    loss = trainer.compute_loss(policy, dict(batch))
    loss.backward()
    handle.remove()
    with torch.no_grad():  # by hand: log-softmax of the plain forward, answer tokens only
        logits = policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    targets = batch["labels"][:, 1:]
    mask = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    assert math.isclose(loss.item(), (-(picked * mask).sum() / mask.sum()).item(), rel_tol=1e-4)
    grad = hidden["h"].grad  # (B, T, C)
    for b, prompt in enumerate(prompt_lengths):
        assert grad[b, :prompt - 1].abs().max() == 0  # they predict prompt tokens: no gradient
        assert grad[b, prompt - 1].abs().max() > 0  # it predicts the answer's first token


def test_heldout_split_is_seeded_and_leaves_both_sides():
    train, held = heldout_split(EXAMPLES, 0.34, seed=0)
    assert len(held) == 2 and len(train) == 4 and not set(map(id, held)) & set(map(id, train))
    assert heldout_split(EXAMPLES, 0.34, seed=0) == (train, held)
    assert heldout_split(EXAMPLES[:3], 0.1, seed=0) == (EXAMPLES[:3], [])


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(SFTSetupError, match="epochs must be a positive number"):
        SFTConfig(epochs=0).check()
    with pytest.raises(SFTSetupError, match="heldout_share must be in"):
        SFTConfig(heldout_share=1.0).check()


def test_training_moves_the_weights_reports_and_saves_a_plain_policy(tmp_path):
    tokenizer, policy = make_tokenizer(), make_policy()
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    recorder = Recorder()
    config = SFTConfig(epochs=4, batch_size=2, learning_rate=5e-3, heldout_share=0.34, eval_every=2)
    result = train_sft(config, policy, tokenizer, chat_of(tokenizer), EXAMPLES, reporter=recorder)
    assert (result.trained, result.heldout, result.steps) == (4, 2, 8)
    assert any(not torch.equal(before[k], v) for k, v in result.trainer.model.state_dict().items() if k in before)
    for name in ("sft/loss", "sft/token_accuracy", "sft/heldout_loss", "sft/heldout_token_accuracy"):
        assert name in recorder.metrics and all(math.isfinite(v) for _, v in recorder.metrics[name])
    assert recorder.metrics["sft/heldout_loss"][-1][0] == 8  # measured after the last step too
    losses = [v for _, v in recorder.metrics["sft/loss"]]
    assert losses[-1] < losses[0]
    assert recorder.done[-1] == (8, 8)
    save_sft_policy(result, tmp_path / "sft")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    assert (tmp_path / "sft" / "sft_config.json").is_file() and not (tmp_path / "sft" / "adapter").exists()
    state = result.trainer.model.state_dict()
    assert torch.equal(loaded.state_dict()["transformer.wte.weight"], state["transformer.wte.weight"])


def test_lora_is_merged_into_the_saved_policy(tmp_path):
    tokenizer, policy = make_tokenizer(), make_policy()
    config = SFTConfig(epochs=2, batch_size=3, learning_rate=1e-2, heldout_share=0.0, lora=True,
                       lora_target_modules=["c_attn"])
    result = train_sft(config, policy, tokenizer, chat_of(tokenizer), EXAMPLES)
    save_sft_policy(result, tmp_path / "sft")
    assert not (tmp_path / "sft" / "adapter").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    base = make_policy().state_dict()
    changed = [k for k, v in loaded.state_dict().items() if k in base and not torch.equal(base[k], v)]
    assert changed and all("c_attn" in k for k in changed)


def test_stop_within_a_step_then_resume_finishes_the_run(tmp_path):
    tokenizer = make_tokenizer()
    config = SFTConfig(epochs=4, batch_size=2, learning_rate=5e-3, heldout_share=0.0, save_every=100)
    with pytest.raises(JobCancelled, match="stopped after 3 of 12 steps"):
        train_sft(config, make_policy(), tokenizer, chat_of(tokenizer), EXAMPLES, reporter=Recorder(stop_after=3),
                  state_dir=tmp_path / "state")
    assert (tmp_path / "state" / "checkpoint-3").is_dir()
    recorder = Recorder()
    result = train_sft(config, make_policy(), tokenizer, chat_of(tokenizer), EXAMPLES, reporter=recorder,
                       state_dir=tmp_path / "state")
    assert result.steps == 12 and recorder.done[0] == (3, 12)
    uninterrupted = train_sft(config, make_policy(), tokenizer, chat_of(tokenizer), EXAMPLES)
    for key, value in uninterrupted.trainer.model.state_dict().items():
        assert torch.allclose(value, result.trainer.model.state_dict()[key], atol=1e-5), key
