"""A local judge: a chat model (a model folder, or a GGUF file converted once) answering the judge prompt with its
verdict token's probabilities, in a worker or the terminal, never in the serving process.

The judge prompt goes through the model's chat format (`ChatFormat.prompt_text`, its chat template), and the
assistant's answer is begun with `[[` (prefilled): one forward pass gives the next token's distribution, from which
the verdict is read as RLAIF reads it (Lee et al. 2023: the softmax over the answer tokens' log-probabilities): the
likeliest of the letters A, B, C, with their probabilities normalised over the three. The letters must hold at least
`MIN_VERDICT_MASS` of the model's next-token probability: below it the model is not answering the question, and the
answer is unparseable (counted, never guessed). The mass is kept with the answer. A folder is data, never code: it loads
as policies do (`trainers.models.checks`: safetensors only, no remote code); its pad token is not needed.

    judge = LocalJudge.load("models/qwen2.5-1.5b-instruct", cache_dir=store.data_dir / "judges")
    reply = judge.complete(messages)          # Reply("[[A]]", probs={"A": 0.8, "B": 0.15, "C": 0.05})
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from labeling.judges.judge import LETTERS, Reply, Status, letter_probs
from storage.errors import first_line

from .chat_format import ChatFormat, generation_eos, model_context
from .checks import ModelError, ModelRole, find_weights, inspect_model_dir, read_tokenizer
from .gguf import convert_gguf, gguf_source

PREFILL = "[["
MIN_VERDICT_MASS = 0.1  # the share of next-token probability the three letters must hold for a verdict


@dataclass
class LocalJudge:
    """A `labeling.judges.judge.JudgeClient` on a causal LM held in this process; verdicts stored under `name`."""

    name: str
    model: PreTrainedModel
    chat: ChatFormat
    letter_ids: dict[str, int]
    context: int | None = None

    @classmethod
    def load(cls, path: str | Path, cache_dir: Path) -> LocalJudge:
        """The judge in `path`: a model folder, or a GGUF file converted once into `cache_dir/<its name>`."""
        path = Path(path)
        if not path.exists():
            raise ModelError(f"no judge model at {path}; give a model folder, a GGUF file or an http(s) URL")
        source = gguf_source(path)
        folder = path
        if source is not None:
            folder = cache_dir / source.name.removesuffix(".gguf")
            if not folder.is_dir():
                cache_dir.mkdir(parents=True, exist_ok=True)
                convert_gguf(source, folder)
        tokenizer = read_tokenizer(folder)
        checked = inspect_model_dir(folder, ModelRole.POLICY)
        find_weights(checked)
        try:
            model = AutoModelForCausalLM.from_pretrained(checked.path, use_safetensors=True, trust_remote_code=False)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ModelError(f"cannot load the judge from {folder}: {first_line(exc)}") from exc
        chat = ChatFormat.from_tokenizer(tokenizer, generation_eos(folder))
        name = (source or path).name.removesuffix(".gguf")
        return cls(name, model.eval(), chat, verdict_token_ids(chat), model_context(folder))

    def complete(self, messages: list[dict]) -> Reply:
        text = self.chat.prompt_text(messages) + PREFILL
        ids = self.chat.tokenizer.encode(text, add_special_tokens=not self.chat.chat_template).ids
        if self.context is not None and len(ids) > self.context:
            return Reply(f"the judge prompt has {len(ids)} tokens, over the judge's context of {self.context}",
                         failure=Status.ERROR)
        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0, -1].float()  # (V,)
        return read_next_token(logits, self.letter_ids, self.chat.decode)


def verdict_token_ids(chat: ChatFormat) -> dict[str, int]:
    """The token id of each verdict letter as it follows `[[` (so the prefilled prompt's tokens stay as they are);
    a tokenizer that merges `[[` with a letter cannot be read this way: one line saying so."""
    ids = {}
    for letter in LETTERS:
        before = chat.tokenizer.encode(PREFILL, add_special_tokens=False).ids
        after = chat.tokenizer.encode(PREFILL + letter, add_special_tokens=False).ids
        if after[:len(before)] != before or len(after) != len(before) + 1:
            raise ModelError(f"this judge's tokenizer writes `[[{letter}` as other tokens than `[[` then `{letter}`; "
                             "serve it behind an OpenAI-compatible endpoint (llama.cpp, vLLM) instead")
        ids[letter] = after[-1]
    return ids


def read_next_token(logits: torch.Tensor, letter_ids: dict[str, int], decode) -> Reply:
    """The verdict the next-token logits (V,) give after `[[`: the likeliest letter with the letters' probabilities
    normalised over the three, when they hold at least MIN_VERDICT_MASS; else unparseable (the text shows what the
    model would write, and the letters' share)."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights = {x: float(probs[i]) for x, i in letter_ids.items()}
    mass = sum(weights.values())
    if mass < MIN_VERDICT_MASS:
        return Reply(f"{PREFILL}{decode([int(probs.argmax())])} (the letters held {mass:.0%} of the probability)")
    letter = max(weights, key=weights.get)
    return Reply(f"{PREFILL}{letter}]] (the letters held {mass:.0%} of the probability)", letter_probs(weights))
