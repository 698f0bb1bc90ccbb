"""trainers.models.chat_format: the one place prompts and responses become token ids, checked against transformers'
own `apply_chat_template` on tiny Qwen2 and Llama-3-style chat models and against the demo's plain tokenizer."""

import shutil
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from storage.errors import InvalidInput
from storage.types import Prompt
from trainers.models.chat_format import ChatFormat, generation_eos, model_context, prompt_budget

CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "the movie was good"},
        {"role": "assistant", "content": "it was"}, {"role": "user", "content": "why?"}]
DEMO = "assets/demo_policy"


@pytest.fixture(params=["tiny_qwen_dir", "tiny_llama_dir"])
def chat_dir(request):
    return request.getfixturevalue(request.param)


def test_prompt_ids_are_apply_chat_template_with_a_generation_prompt(chat_dir):
    hf = AutoTokenizer.from_pretrained(chat_dir)
    chat = ChatFormat.from_dir(chat_dir)
    for prompt in (CHAT, [{"role": "user", "content": "hello world"}]):
        assert chat.prompt_ids(prompt) == hf.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"]
    assert chat.prompt_ids("hello world") == chat.prompt_ids([{"role": "user", "content": "hello world"}])
    from_tokenizer = ChatFormat.from_tokenizer(hf, generation_eos(chat_dir))
    assert from_tokenizer.prompts_ids([CHAT, "hi"]) == chat.prompts_ids([CHAT, "hi"])


def test_responses_close_with_the_templates_end_of_turn_and_every_end_id_counts(tiny_qwen_dir, tiny_llama_dir):
    qwen, llama = ChatFormat.from_dir(tiny_qwen_dir), ChatFormat.from_dir(tiny_llama_dir)
    assert qwen.tokenizer.id_to_token(qwen.end_of_turn_id) == "<|im_end|>"
    assert llama.tokenizer.id_to_token(llama.end_of_turn_id) == "<|eot_id|>"
    assert set(qwen.end_ids) == {2, 0} and set(llama.end_ids) == {1, 4}  # generation_config's eos lists
    hf = AutoTokenizer.from_pretrained(tiny_qwen_dir)
    assert qwen.responses_ids(["hello world"]) == [hf("hello world", add_special_tokens=False)["input_ids"] + [2]]
    assert qwen.sequences_ids([CHAT], ["ok"]) == [qwen.prompt_ids(CHAT) + qwen.responses_ids(["ok"])[0]]
    assert qwen.cut_at_end([5, 6, 0, 7]) == ([5, 6, 0], True)  # <|endoftext|> ends a response too
    assert qwen.cut_at_end([5, 6]) == ([5, 6], False)


def test_a_model_without_a_template_reads_plain_text_and_conversations_as_human_assistant_turns():
    hf = AutoTokenizer.from_pretrained(DEMO)
    chat = ChatFormat.from_dir(DEMO)
    assert chat.chat_template is None and chat.end_ids == (hf.eos_token_id,)
    assert chat.prompt_ids("the movie was") == hf("the movie was")["input_ids"]
    text = "System: Answer briefly.\n\nHuman: the movie was good\n\nAssistant: it was\n\nHuman: why?\n\nAssistant:"
    assert chat.prompt_text(CHAT) == text and chat.prompt_ids(CHAT) == hf(text)["input_ids"]
    response_ids = hf(" great .", add_special_tokens=False)["input_ids"]
    assert chat.responses_ids([" great ."]) == [response_ids + [hf.eos_token_id]]


def test_the_prompt_budget_is_the_context_less_the_response_length(tiny_qwen_dir):
    assert model_context(DEMO) == 64 and model_context(tiny_qwen_dir) == 256
    budget = prompt_budget(DEMO, response_length=24)
    assert budget.limit == 40 and budget.describe() == "policy context 64 tokens: responses up to 24, prompts up to 40"
    prompts = [Prompt(1, "the movie was", None, False), Prompt(7, "the movie was " * 20, None, False),
               Prompt(9, "", None, False, [{"role": "user", "content": "the movie was good"}])]
    chat = ChatFormat.from_dir(DEMO)
    assert budget.counts(prompts) == [chat.count(p.content) for p in prompts]
    fit = budget.fit(prompts)  # nothing is cut: the long prompt is left out, with its count
    assert [p.id for p in fit.fitting] == [1, 9] and fit.too_long == [(prompts[1], chat.count(prompts[1].content))]
    assert fit.too_long_line() == "1 too long for 40 tokens (prompts 7)"
    assert budget.fit(prompts[:1]).too_long_line() == ""


def test_a_prompt_the_chat_template_refuses_is_left_out_and_a_template_that_refuses_all_is_one_error(tiny_qwen_dir,
                                                                                                    tmp_path):
    folder = tmp_path / "qwen"
    shutil.copytree(tiny_qwen_dir, folder)
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system turns') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}")
    budget = prompt_budget(folder, response_length=24)
    system = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    prompts = [Prompt(1, "hi", None, False), Prompt(2, "System: be brief", None, False, system)]
    assert budget.counts(prompts)[1] is None
    refused = "1 too long for 232 tokens (prompts 2, 1 of them refused by the chat template)"
    assert budget.fit(prompts).too_long_line() == refused
    (folder / "chat_template.jinja").write_text("{{ raise_exception('never') }}")
    with pytest.raises(InvalidInput, match="chat template"):
        prompt_budget(folder, response_length=24).counts(prompts)


def test_a_folder_without_tokenizer_json_is_refused_in_one_line(tmp_path):
    with pytest.raises(InvalidInput, match="has no tokenizer.json"):
        ChatFormat.from_dir(tmp_path)


def test_counting_tokens_imports_no_torch(tiny_qwen_dir):
    code = (f"import sys; from trainers.models.chat_format import ChatFormat; "
            f"ChatFormat.from_dir({str(tiny_qwen_dir)!r}).count('hi'); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
