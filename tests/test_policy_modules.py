"""The policy optimisers' forward (`trainers.policy.modules.response_pass`): rows that share a prompt (GRPO's
groups) read it once, responses go in chunks of like length that stop at their longest, and every row gets the
outputs and gradients a forward over it whole gives at its response tokens (zeros past its end); LoRA, the reference
with adapters disabled and gradient checkpointing (where every row is read whole) included."""

import pytest
import torch

from assets.build_demo import DEMO_POLICY_DIR
from tests.test_sampling import CHATS
from trainers.models.chat_format import ChatFormat
from trainers.models.generation import left_pad, model_end_ids
from trainers.models.loading import load_policy, load_tokenizer
from trainers.policy.modules import PolicyModel, PolicyWithValueHead, response_pass
from trainers.policy.rollout import position_ids
from trainers.policy.setup import with_lora

pytestmark = pytest.mark.usefixtures("one_thread")


def _grouped_batch(path, group=3, response=5):
    """Every prompt of CHATS `group` times in consecutive rows, each row with its own response (shorter ones padded
    after their end), as a GRPO rollout lays them out: (input_ids, attention_mask, positions, response_start)."""
    tokenizer = load_tokenizer(path)
    chat = ChatFormat.from_tokenizer(tokenizer, model_end_ids(load_policy(path)))
    prompts = CHATS if tokenizer.chat_template else [c[0]["content"] for c in CHATS]
    ids = [row for row in chat.prompts_ids(prompts) for _ in range(group)]
    query, query_mask = left_pad(ids, tokenizer.pad_token_id)
    generator = torch.Generator().manual_seed(0)
    responses = torch.randint(5, 100, (len(ids), response), generator=generator)
    mask = torch.ones_like(responses)
    mask[::2, -2:] = 0  # every other row ended early: pads after
    responses = responses.masked_fill(mask == 0, tokenizer.pad_token_id)
    attention_mask = torch.cat([query_mask, mask], 1)
    return torch.cat([query, responses], 1), attention_mask, position_ids(attention_mask), query.shape[1]


def _whole_rows(model, input_ids, attention_mask, positions, start):
    """The plain forward over every whole row (what `response_pass` must give back)."""
    output = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                   output_hidden_states=True, use_cache=False)
    return output.logits[:, start - 1:-1], output.hidden_states[-1][:, start - 1:-1]


@pytest.mark.parametrize("chunks", ["one chunk", "two chunks"])
@pytest.mark.parametrize("name", ["qwen2", "demo gpt2"])
def test_rows_sharing_a_prompt_read_it_once_and_get_the_outputs_of_whole_rows(name, chunks, tiny_qwen_dir,
                                                                             monkeypatch):
    path = {"qwen2": tiny_qwen_dir, "demo gpt2": DEMO_POLICY_DIR}[name]
    model = load_policy(path).eval()
    inputs = _grouped_batch(path)
    input_ids, attention_mask, _, start = inputs
    rows, full, ended = input_ids.shape[0], input_ids.shape[1] - start, input_ids.shape[1] - start - 2
    monkeypatch.setattr("trainers.policy.modules.CPU_PASS_TOKENS", {"one chunk": 1000, "two chunks": 0}[chunks])
    tokens = []
    model.register_forward_pre_hook(lambda _, args, kwargs: tokens.append(kwargs["input_ids"].numel()),
                                    with_kwargs=True)
    with torch.no_grad():
        logits, hidden = response_pass(model, *inputs, hidden_states=True)
    read = {"one chunk": [rows * (full - 1)], "two chunks": [rows // 2 * (full - 1), rows // 2 * (ended - 1)]}[chunks]
    assert tokens == [len(CHATS) * start, *read]  # each prompt once; no response's last token, no pads past a chunk
    with torch.no_grad():
        whole_logits, whole_hidden = _whole_rows(model, *inputs)
    real = attention_mask[:, start:].bool()  # (B, R): the response tokens
    torch.testing.assert_close(logits[real], whole_logits[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(hidden[real], whole_hidden[real], atol=1e-4, rtol=1e-4)
    if chunks == "two chunks":
        assert not logits[~real].any() and not hidden[~real].any()


@pytest.mark.parametrize("mode", ["one chunk", "two chunks", "checkpointing"])
def test_the_gradients_of_a_shared_prompt_are_those_of_whole_rows_with_lora_and_the_critic(mode, tiny_qwen_dir,
                                                                                          monkeypatch):
    """Gradients into the adapters and the value head through a prompt read once, and responses in chunks, equal
    those of whole rows, and the reference (adapters disabled) shares prompts too; under gradient checkpointing every
    row is read whole."""
    from trainers.policy.config import PolicyConfig

    checkpointing = mode == "checkpointing"
    if mode == "two chunks":  # the half of full length, then the half that ended early
        monkeypatch.setattr("trainers.policy.modules.CPU_PASS_TOKENS", 0)
    policy = with_lora(load_policy(tiny_qwen_dir), PolicyConfig(lora=True))
    model = PolicyWithValueHead(policy)
    torch.nn.init.normal_(model.value_head.weight, std=0.5)
    for name, weight in policy.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(weight, std=0.1)  # adapters that change the outputs
    if checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    inputs = _grouped_batch(tiny_qwen_dir)
    input_ids, attention_mask, _, start = inputs
    weights = torch.randn(input_ids.shape[0], input_ids.shape[1] - start, generator=torch.Generator().manual_seed(1))
    weights = weights * attention_mask[:, start:]  # the response tokens: a loss masks the rest
    trained = [p for p in model.parameters() if p.requires_grad]

    def gradients(forward):
        model.zero_grad(set_to_none=True)
        logits, values = forward()
        ((logits.log_softmax(-1)[..., 7] + values) * weights).sum().backward()
        return [p.grad.clone() for p in trained]

    tokens = []
    hook = policy.get_base_model().register_forward_pre_hook(
        lambda _, args, kwargs: tokens.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    shared = gradients(lambda: model(*inputs))
    hook.remove()
    # whole rows, or the prompts once and then the responses (in one chunk, or two)
    assert len(tokens) == {"checkpointing": 1, "one chunk": 2, "two chunks": 3}[mode]

    def whole_rows():
        logits, hidden = _whole_rows(policy, *inputs)
        return logits, model.values(hidden)

    whole = gradients(whole_rows)
    assert len(trained) > 2 and all(g.abs().sum() > 0 for g in whole)
    for a, b in zip(shared, whole, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    with torch.no_grad(), policy.disable_adapter():
        reference, _ = PolicyModel(policy)(*inputs)
        plain, _ = _whole_rows(policy, *inputs)
    real = attention_mask[:, start:].bool()
    torch.testing.assert_close(reference[real], plain[real], atol=1e-4, rtol=1e-4)
