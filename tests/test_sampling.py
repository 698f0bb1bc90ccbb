"""The studio's sampler (`trainers.models.sampling`): the distribution it draws from, by hand and against Hugging
Face's warpers; draws that follow it; per-token log-probs that a full forward (the trainers' log-prob pass) gives
back exactly, for left-padded prompts of different lengths, static and dynamic caches, PPO and GRPO rollouts, LoRA;
fixed seeds; rows that end."""

import math

import pytest
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from assets.build_demo import DEMO_POLICY_DIR
from tests.policy_helpers import count_great, small_config
from trainers.models import sampling
from trainers.models.chat_format import ChatFormat
from trainers.models.generation import left_pad, model_end_ids
from trainers.models.loading import load_policy, load_tokenizer
from trainers.models.sampling import draw, sample_ids, sampling_logits
from trainers.policy.ppo_math import entropy_from_logits, sampler_logprobs
from trainers.policy.rollout import cut_at_end, position_ids

NEG = -torch.inf
CHATS = [[{"role": "user", "content": text}] for text in
         ["hi", "the movie was great and the plot was good", "tell me about the acting",
          "the acting was fine, the plot was good, but the movie was far too long and the ending was awful"]]


pytestmark = pytest.mark.usefixtures("one_thread")


# ----- the distribution -------------------------------------------------------------------------------------------

def test_sampling_logits_scale_by_temperature_and_rule_out_the_pad_by_hand():
    logits = torch.tensor([[2.0, 1.0, 0.0, 4.0]])
    out = sampling_logits(logits, temperature=0.5, pad_id=3)
    assert torch.equal(out, torch.tensor([[4.0, 2.0, 0.0, NEG]]))
    assert torch.equal(logits, torch.tensor([[2.0, 1.0, 0.0, 4.0]]))  # the caller's logits are left alone


def test_top_k_keeps_the_k_likeliest_and_ties_at_the_kth_by_hand():
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0, 9.0]])
    assert torch.equal(sampling_logits(logits, 1.0, pad_id=5, top_k=2), torch.tensor([[3.0, NEG, 2.0, 2.0, NEG, NEG]]))
    assert torch.equal(sampling_logits(logits, 1.0, pad_id=5, top_k=1), torch.tensor([[3.0, NEG, NEG, NEG, NEG, NEG]]))


def test_top_p_keeps_the_smallest_set_reaching_the_mass_by_hand():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    # 0.5 < 0.7: the second token is needed; 0.5 + 0.3 >= 0.7: the third is not
    assert torch.isinf(sampling_logits(probs.log(), 1.0, pad_id=3, top_p=0.7)).tolist() == [[False, False, True, True]]
    # the likeliest token always stays, whatever the mass asked for
    assert torch.isinf(sampling_logits(probs.log(), 1.0, pad_id=3, top_p=0.1)).tolist() == [[False, True, True, True]]


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (5, 1.0), (0, 0.9), (7, 0.6), (50, 0.95)])
def test_sampling_logits_match_hugging_faces_warpers(top_k, top_p):
    torch.manual_seed(0)
    logits = torch.randn(6, 40) * 3
    expected = logits / 0.8
    expected[:, 7] = NEG  # suppress_tokens=[pad]
    if top_k:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1:
        expected = TopPLogitsWarper(top_p)(None, expected)
    torch.testing.assert_close(sampling_logits(logits, 0.8, pad_id=7, top_k=top_k, top_p=top_p), expected)


@pytest.mark.parametrize("scale", [0.3, 3.0, 8.0])  # sets of ~44k, ~3k and tens of tokens: each search stage
def test_top_p_on_a_49k_vocabulary_keeps_what_exact_arithmetic_keeps(scale):
    """The set is looked for among the likeliest 256 tokens, then 4096, then all: on a real model's vocabulary it is
    the one float64 arithmetic gives, but where the likelier tokens' mass is within float32 rounding of top-p."""
    torch.manual_seed(0)
    logits = torch.randn(16, 49152) * scale
    kept = ~torch.isinf(sampling_logits(logits, 1.0, pad_id=5, top_p=0.9))
    probs = logits.double().index_fill(-1, torch.tensor([5]), NEG).softmax(-1)
    ordered, order = probs.sort(-1, descending=True)
    likelier = ordered.cumsum(-1) - ordered  # the mass of the tokens likelier than each
    exact = torch.zeros_like(kept).scatter(-1, order, likelier < 0.9)
    rounding = torch.zeros_like(kept).scatter(-1, order, (likelier - 0.9).abs() < 1e-5)
    assert torch.equal(kept[~rounding], exact[~rounding]) and rounding.sum() <= 2 * len(logits)  # ~one a row
    assert 0 < kept.sum(-1).min() and kept.sum(-1).max() < 49152 and not kept[:, 5].any()


def test_at_top_p_1_and_top_k_0_the_distribution_is_the_one_the_trainers_score():
    torch.manual_seed(0)
    logits, tokens = torch.randn(3, 5, 30), torch.randint(0, 30, (3, 5))
    tokens[tokens == 4] = 5  # never the pad
    ours = sampling_logits(logits, 0.7, pad_id=4).log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
    torch.testing.assert_close(ours, sampler_logprobs(logits, tokens, 0.7, excluded=4))


def test_draws_follow_softmax_of_the_sampling_logits_and_never_the_pad():
    logits = torch.tensor([[2.0, 1.0, 0.0, 0.5]]).expand(40000, 4)
    torch.manual_seed(0)
    counts = torch.bincount(draw(logits, temperature=2.0, pad_id=3, top_k=0, top_p=1.0), minlength=4)
    assert counts[3] == 0
    expected = torch.softmax(torch.tensor([1.0, 0.5, 0.0]), -1)
    torch.testing.assert_close(counts[:3] / 40000, expected, atol=0.01, rtol=0)  # ~4 standard errors
    assert draw(logits[:2], 0.0, pad_id=0, top_k=0, top_p=1.0).tolist() == [1, 1]  # greedy, the pad excluded


# ----- the decode loop on real architectures ----------------------------------------------------------------------

def _recording_draws(monkeypatch) -> list[torch.Tensor]:
    """Record, for every step, each row's log-prob of the drawn token under the distribution it was drawn from."""
    seen = []

    def recorded(logits, temperature, pad_id, top_k, top_p):
        chosen = draw(logits, temperature, pad_id, top_k, top_p)
        distribution = sampling_logits(logits, temperature, pad_id, top_k, top_p).log_softmax(-1)
        seen.append(distribution.gather(-1, chosen[:, None]).squeeze(-1))
        return chosen

    monkeypatch.setattr(sampling, "draw", recorded)
    return seen


def _model(name, tiny_qwen_dir):
    path = {"qwen2": tiny_qwen_dir, "demo gpt2": DEMO_POLICY_DIR}[name]
    tokenizer = load_tokenizer(path)
    model = load_policy(path)
    prompts = CHATS if tokenizer.chat_template else [c[0]["content"] for c in CHATS]
    return model, tokenizer, ChatFormat.from_tokenizer(tokenizer, model_end_ids(model)), prompts


def _response_logits(model, query, query_mask, responses, mask) -> torch.Tensor:
    """The logits a full forward over prompts and responses gives at each response position (the trainers' pass)."""
    full_mask = torch.cat([query_mask, mask.long()], 1)
    with torch.no_grad():
        logits = model(input_ids=torch.cat([query, responses], 1), attention_mask=full_mask,
                       position_ids=position_ids(full_mask)).logits
    return logits[:, query.shape[1] - 1:-1]  # (B, R, V)


@pytest.mark.parametrize("cache", ["static", "dynamic"])
@pytest.mark.parametrize("name", ["qwen2", "demo gpt2"])
def test_per_token_logprobs_of_a_full_forward_equal_the_sampling_distributions(name, cache, tiny_qwen_dir,
                                                                               monkeypatch):
    model, tokenizer, chat, prompts = _model(name, tiny_qwen_dir)
    pad = tokenizer.pad_token_id
    query, query_mask = left_pad(chat.prompts_ids(prompts), pad)
    assert len(set(query_mask.sum(1).tolist())) == len(prompts)  # every row padded differently
    if cache == "dynamic":
        monkeypatch.setattr(sampling, "new_cache", lambda model, length: sampling.DynamicCache(config=model.config))
    seen = _recording_draws(monkeypatch)
    torch.manual_seed(0)
    raw = sample_ids(model, query, query_mask, 16, 0.7, 1.0, 0, chat.end_ids, pad)
    responses, mask, ended = cut_at_end(raw, chat.end_ids, pad)
    assert mask.sum() > 20 and len(seen) == raw.shape[1]
    forward = sampler_logprobs(_response_logits(model, query, query_mask, responses, mask), responses, 0.7, pad)
    torch.testing.assert_close(forward * mask, torch.stack(seen, 1) * mask, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_a_prompt_several_rows_share_is_read_once_and_each_row_samples_on_its_own(cache, tiny_qwen_dir, monkeypatch):
    model, tokenizer, chat, prompts = _model("qwen2", tiny_qwen_dir)
    pad = tokenizer.pad_token_id
    query, query_mask = left_pad(chat.prompts_ids([prompts[i] for i in (0, 1, 0, 2, 1, 0)]), pad)
    if cache == "dynamic":
        monkeypatch.setattr(sampling, "new_cache", lambda model, length: sampling.DynamicCache(config=model.config))
    seen = _recording_draws(monkeypatch)
    batches = []
    model.register_forward_pre_hook(lambda _, args, kwargs: batches.append(kwargs["input_ids"].shape[0]),
                                    with_kwargs=True)
    torch.manual_seed(0)
    raw = sample_ids(model, query, query_mask, 10, 1.0, 1.0, 0, chat.end_ids, pad)
    assert batches[0] == 3 and batches[1] == 6  # three distinct prompts read, then six rows decoded
    assert not torch.equal(raw[0], raw[2]) and not torch.equal(raw[2], raw[5])  # copies draw their own tokens
    responses, mask, _ = cut_at_end(raw, chat.end_ids, pad)
    forward = sampler_logprobs(_response_logits(model, query, query_mask, responses, mask), responses, 1.0, pad)
    torch.testing.assert_close(forward * mask, torch.stack(seen, 1) * mask, atol=1e-4, rtol=1e-4)


def test_distinct_rows_by_hand():
    ids = torch.tensor([[0, 1, 2], [3, 4, 5], [0, 1, 2], [0, 0, 9]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [0, 1, 1]])
    first, copies = sampling.distinct_rows(ids, mask)
    assert torch.equal(ids[first][copies], ids) and torch.equal(mask[first][copies], mask) and len(first) == 3
    assert sorted(first.tolist()) == [0, 1, 3]  # the first row of each prompt
    other_mask = mask.clone()
    other_mask[2, 0] = 0  # the same ids, padded otherwise: another prompt
    assert len(sampling.distinct_rows(ids, other_mask)[0]) == 4
    assert sampling.distinct_rows(ids[1:], mask[1:])[0].tolist() == [0, 1, 2]  # nothing repeats: every row, in order


def test_a_fixed_seed_gives_the_same_samples_and_another_seed_others(tiny_qwen_dir):
    model, tokenizer, chat, prompts = _model("qwen2", tiny_qwen_dir)
    query, query_mask = left_pad(chat.prompts_ids(prompts), tokenizer.pad_token_id)

    def sampled(seed):
        torch.manual_seed(seed)
        return sample_ids(model, query, query_mask, 12, 1.0, 0.9, 20, chat.end_ids, tokenizer.pad_token_id)

    first = sampled(3)
    assert torch.equal(sampled(3), first)
    assert not torch.equal(sampled(4), first)


def test_rows_that_end_are_padded_and_the_loop_stops_when_all_have_ended(tiny_qwen_dir, monkeypatch):
    model, tokenizer, chat, prompts = _model("qwen2", tiny_qwen_dir)
    pad, end = tokenizer.pad_token_id, chat.end_ids[0]
    query, query_mask = left_pad(chat.prompts_ids(prompts), pad)
    plan = iter([[end, 5, 6, 7], [8, 9, end, 10], [11, end, 13, end]])  # the draws of steps 0, 1, 2
    monkeypatch.setattr(sampling, "draw", lambda *args: torch.tensor(next(plan)))
    calls = []
    model.register_forward_pre_hook(lambda *_: calls.append(1))
    out = sample_ids(model, query, query_mask, 8, 1.0, 1.0, 0, chat.end_ids, pad)
    assert out.tolist() == [[end, pad, pad], [5, 9, end], [6, end, pad], [7, 10, end]]
    assert len(calls) == 3  # the prompts, then the tokens of steps 0 and 1; none after the last row ended

    plan = iter([[end] * 4])
    assert sample_ids(model, query, query_mask, 8, 1.0, 1.0, 0, chat.end_ids, pad).tolist() == [[end]] * 4


@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_rows_that_end_leave_the_batch_and_the_others_keep_their_distributions(cache, tiny_qwen_dir, monkeypatch):
    """Once a quarter of the batch has ended the model computes only the rest (the cache's rows dropped with them),
    and each running row's logits stay those a full forward over its prompt and tokens gives."""
    model, tokenizer, chat, prompts = _model("qwen2", tiny_qwen_dir)
    pad, end = tokenizer.pad_token_id, chat.end_ids[0]
    query, query_mask = left_pad(chat.prompts_ids(prompts), pad)
    if cache == "dynamic":
        monkeypatch.setattr(sampling, "new_cache", lambda model, length: sampling.DynamicCache(config=model.config))
    plan = iter([[5, 6, end, 7], [8, 9, 1, 10], [end, 11, 1, 12], [1, 13, 1, 14], [1, end, 1, 15], [1, 1, 1, 16]])
    seen = []

    def planned(logits, *args):
        seen.append(logits.log_softmax(-1))
        return torch.tensor(next(plan))

    monkeypatch.setattr(sampling, "draw", planned)
    batches = []
    model.register_forward_pre_hook(lambda _, args, kwargs: batches.append(kwargs["input_ids"].shape[0]),
                                    with_kwargs=True)
    raw = sample_ids(model, query, query_mask, 6, 1.0, 1.0, 0, chat.end_ids, pad)
    # row 2 ends at step 0 (a quarter of 4 rows), row 0 at step 2 (one of 3), row 1 at step 4 (one of 2): each leaves
    assert batches == [4, 3, 3, 2, 2, 1]
    responses, mask, _ = cut_at_end(raw, chat.end_ids, pad)
    assert mask.sum(1).tolist() == [3, 5, 1, 6]
    forward = _response_logits(model, query, query_mask, responses, mask).log_softmax(-1)  # (B, R, V)
    for step, sampled in enumerate(seen):
        running = mask[:, step].bool()
        torch.testing.assert_close(sampled[running], forward[running, step], atol=1e-4, rtol=1e-4)


# ----- the trainers' rollouts -------------------------------------------------------------------------------------

def real_model_sampling() -> dict:
    """The sampling settings of the real-model preset (what a chat model's PPO or GRPO samples with)."""
    from trainers.loop.config import policy_settings
    from trainers.loop.presets import real_model_config

    settings = policy_settings(real_model_config(135_000_000, 8192))
    return {name: settings[name] for name in ("temperature", "top_p", "top_k", "lora")}


TOP_K_AND_TOP_P = {"temperature": 0.7, "top_p": 0.8, "top_k": 10, "lora": True}


@pytest.mark.parametrize("preset", ["demo", "real model", "top-k and top-p"])
@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_rollout_logprobs_are_those_of_the_distribution_sampled(algorithm, preset, tiny_qwen_dir, monkeypatch):
    """The tiny Qwen2's generation config sets a repetition penalty, n-gram blocking, top-k and top-p: none reaches
    the sampler, so the old log-probs PPO and GRPO store are exactly those of the tokens' sampling distribution, under
    the demo's sampling settings, the real-model preset's (temperature 0.7, LoRA) and a chat model's truncated
    sampling (top-k 10, top-p 0.8: the log-probs of the renormalised distribution over the kept tokens)."""
    from trainers.policy.grpo import GRPOTrainer
    from trainers.policy.ppo import PPOTrainer

    tokenizer = load_tokenizer(tiny_qwen_dir)
    policy = load_policy(tiny_qwen_dir)
    sampling = {"demo": {"temperature": 1.0, "lora": False}, "real model": real_model_sampling(),
                "top-k and top-p": TOP_K_AND_TOP_P}[preset]
    config = small_config(algorithm=algorithm, response_length=12, **sampling,
                          **({"group_size": 2} if algorithm == "grpo" else {}))
    trainer = (GRPOTrainer if algorithm == "grpo" else PPOTrainer)(config, policy, tokenizer, CHATS, count_great)
    seen = _recording_draws(monkeypatch)
    rollout = trainer.rollout(CHATS, trainer.prompt_ids)
    assert len(set(rollout.query_mask.sum(1).tolist())) == len(CHATS) and rollout.mask.sum() > 8
    torch.testing.assert_close(rollout.logprobs, torch.stack(seen, 1) * rollout.mask, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("lora", [False, True, "and top-k, top-p"])
@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
@pytest.mark.parametrize("name", ["qwen2", "demo gpt2"])
def test_the_rollout_keeps_the_samplers_log_probs_entropies_and_values_a_forward_pass_gives_back(name, algorithm, lora,
                                                                                                  tiny_qwen_dir):
    """The rollout takes the old log-probs, entropies and (PPO) values from the sampler's own steps instead of a
    second forward pass: they are what the trainers' forward over prompts and responses gives (so the first update's
    ratios start at 1), rows that ended early (and left the sampler's batch), GRPO's repeated prompts and truncated
    sampling included."""
    from trainers.policy.grpo import GRPOTrainer
    from trainers.policy.ppo import PPOTrainer

    policy, tokenizer, _, prompts = _model(name, tiny_qwen_dir)
    sampling = TOP_K_AND_TOP_P if lora == "and top-k, top-p" else {"temperature": 0.7, "lora": lora}
    config = small_config(algorithm=algorithm, response_length=12, **sampling,
                          **({"group_size": 2} if algorithm == "grpo" else {}))
    trainer = (GRPOTrainer if algorithm == "grpo" else PPOTrainer)(config, policy, tokenizer, prompts, count_great)
    model = trainer.policy_model
    if algorithm == "ppo":  # a critic that is not zero, so its values say something
        torch.nn.init.normal_(model.value_head.weight, std=0.5)
    rows = [i for i in range(len(prompts)) for _ in range(config.episodes_per_prompt)]
    passes = []
    hook = model.register_forward_hook(lambda *_: passes.append(1))
    torch.manual_seed(3)
    rollout = trainer.rollout([prompts[i] for i in rows], [trainer.prompt_ids[i] for i in rows])
    hook.remove()
    assert passes == []  # no forward pass of the trained model besides the sampler's steps
    mask = rollout.mask
    assert len(set(mask.sum(1).tolist())) > 1 and rollout.ended.any()  # some rows ended before others
    input_ids = torch.cat([rollout.query, rollout.responses], 1)
    attention_mask = torch.cat([rollout.query_mask, mask.long()], 1)
    with torch.no_grad():
        logits, values = model(input_ids, attention_mask, position_ids(attention_mask), rollout.query.shape[1])
    torch.testing.assert_close(rollout.logprobs, trainer._logprobs(logits, rollout.responses) * mask,
                               atol=1e-4, rtol=1e-4)
    entropy = entropy_from_logits(trainer._sampling_logits(logits, rollout.responses))
    torch.testing.assert_close(rollout.entropy, entropy * mask, atol=1e-4, rtol=1e-4)
    if algorithm == "ppo":
        assert values.abs().max() > 0.1
        torch.testing.assert_close(rollout.values, values * mask, atol=1e-4, rtol=1e-4)
    else:
        assert rollout.values is None


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_under_top_k_and_top_p_the_kl_to_the_reference_starts_at_0_and_training_stays_finite(algorithm,
                                                                                           tiny_qwen_dir):
    """The reference is scored as the policy is (the same truncation), so before any update, when the two are the
    same model, their log-probs agree; two iterations of updates on truncated samples give finite losses and KL."""
    from trainers.policy.grpo import GRPOTrainer
    from trainers.policy.ppo import PPOTrainer

    policy, tokenizer, _, prompts = _model("qwen2", tiny_qwen_dir)
    config = small_config(algorithm=algorithm, response_length=12, learning_rate=1e-2, **TOP_K_AND_TOP_P,
                          **({"group_size": 2} if algorithm == "grpo" else {}))
    trainer = (GRPOTrainer if algorithm == "grpo" else PPOTrainer)(config, policy, tokenizer, prompts, count_great)
    rows = [i for i in range(len(prompts)) for _ in range(config.episodes_per_prompt)]
    torch.manual_seed(0)
    rollout = trainer.rollout([prompts[i] for i in rows], [trainer.prompt_ids[i] for i in rows])
    assert rollout.mask.sum() > 8
    torch.testing.assert_close(rollout.ref_logprobs, rollout.logprobs, atol=1e-5, rtol=1e-5)
    metrics = [trainer.step() for _ in range(2)]
    values = [value for step in metrics for value in step.values() if isinstance(value, float)]
    assert values and all(math.isfinite(value) for value in values)
    assert metrics[-1][f"{algorithm}/kl"] != 0  # the updates moved the policy off the reference
