"""`export-model --gguf`: a Llama, a Qwen2, a Gemma 3 and the demo's GPT-2, written as GGUF with the `gguf` package,
read back by transformers and by the studio's own GGUF import, give the folder's next token on held-out prompts, the
same tokens from the file's tokenizer, and logits within f16's and q8_0's tolerance; the Ollama Modelfile maps the
chat templates it knows; an architecture the writer does not cover is refused in one line."""

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM

from assets import DEMO_POLICY_DIR
from bench.tiny_models import build_tiny_gemma3, build_tiny_llama, build_tiny_qwen
from storage.errors import InvalidInput
from trainers.export.gguf_file import write_gguf
from trainers.export.modelfile import modelfile_text
from trainers.models.gguf import config_fixes, convert_gguf

HELDOUT = ["the movie was", "I thought this film was great", "an awful, boring plot", "what did you think?"]
TOLERANCE = {"f16": 0.01, "q8_0": 0.1}  # largest |logit difference| allowed (measured: 0.002 and 0.03 at most)
BUILDERS = {"llama": build_tiny_llama, "qwen2": build_tiny_qwen, "gemma3": build_tiny_gemma3}
SAMPLING = {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "response_length": 64}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf-models")
    return {"gpt2": Path(DEMO_POLICY_DIR), **{name: build(root / name) for name, build in BUILDERS.items()}}


def inputs(tokenizer, text: str) -> torch.Tensor:
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             return_tensors="pt", return_dict=True)["input_ids"]
    return tokenizer(text, return_tensors="pt").input_ids


def next_token_logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits[0, -1]


def assert_same_next_tokens(folder: Path, model, tokenizer, quant: str) -> None:
    original, original_tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    for text in HELDOUT:
        ids = inputs(original_tokenizer, text)
        assert inputs(tokenizer, text).tolist() == ids.tolist(), text
        want = next_token_logits(original, ids)
        got = next_token_logits(model, ids)[: len(want)]  # the import may add a row: a Llama-3 vocabulary's
        # `<|endoftext|>`, which transformers' GPT-2 tokenizer adds (trainers/models/gguf.py)
        assert (want - got).abs().max().item() <= TOLERANCE[quant], text
        top2 = want.topk(2).values
        if top2[0] - top2[1] > 2 * TOLERANCE[quant]:  # a clear winner stays the winner
            assert got.argmax() == want.argmax(), text


@pytest.mark.parametrize("quant", ["f16", "q8_0"])
@pytest.mark.parametrize("architecture", ["llama", "qwen2", "gemma3", "gpt2"])
def test_the_gguf_reads_back_with_the_folders_next_tokens(folders, tmp_path, architecture, quant):
    folder = folders[architecture]
    written = write_gguf(folder, tmp_path / "model.gguf", quant)
    assert written.quant == quant and written.path.is_file() and not list(tmp_path.glob(".*partial"))
    config = AutoConfig.from_pretrained(tmp_path, gguf_file="model.gguf")
    assert config.model_type == AutoConfig.from_pretrained(folder).model_type
    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="model.gguf", **config_fixes(config))
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, gguf_file="model.gguf")
    assert tokenizer.chat_template == AutoTokenizer.from_pretrained(folder).chat_template
    assert_same_next_tokens(folder, model, tokenizer, quant)
    imported = tmp_path / "imported"  # the studio's own `init --policy FILE.gguf` path
    convert_gguf(written.path, imported)
    assert_same_next_tokens(folder, AutoModelForCausalLM.from_pretrained(imported),
                            AutoTokenizer.from_pretrained(imported), quant)


def test_q8_0_is_about_half_of_f16(folders, tmp_path):
    f16 = write_gguf(folders["qwen2"], tmp_path / "f16.gguf", "f16")
    q8 = write_gguf(folders["qwen2"], tmp_path / "q8.gguf", "q8_0")
    assert 0.45 < q8.bytes / f16.bytes < 0.7


@pytest.mark.parametrize(("architecture", "template", "stop"), [
    ("qwen2", "<|im_start|>{{ .Role }}", "<|im_end|>"),
    ("llama", "<|start_header_id|>{{ .Role }}<|end_header_id|>", "<|eot_id|>"),
    ("gemma3", "<start_of_turn>model", "<end_of_turn>"),
])
def test_the_modelfile_maps_the_chat_templates_it_knows(folders, architecture, template, stop):
    text, what = modelfile_text(folders[architecture], Path("out/v3-f16.gguf"), SAMPLING)
    assert text.startswith("FROM ./v3-f16.gguf\n")
    assert 'TEMPLATE """' in text and template in text and what == "with its chat template as TEMPLATE"
    assert f'PARAMETER stop "{stop}"' in text
    assert "PARAMETER temperature 0.7" in text and "PARAMETER num_predict 64" in text


def test_a_model_without_a_chat_template_gets_no_template(folders):
    text, what = modelfile_text(folders["gpt2"], Path("v1-f16.gguf"), SAMPLING)
    assert "TEMPLATE" not in text and 'PARAMETER stop "<|endoftext|>"' in text and "none" in what


def test_an_architecture_the_writer_does_not_cover_is_refused_in_one_line(folders, tmp_path):
    config = GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64)
    GPTNeoXForCausalLM(config).save_pretrained(tmp_path / "neox")
    with pytest.raises(InvalidInput, match=r"^a gpt_neox model cannot be written as GGUF here .*without --gguf$"):
        write_gguf(tmp_path / "neox", tmp_path / "neox.gguf")
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*"))
