"""How a model turns prompts and responses into token ids: the one place every path goes through.

With a chat template (the tokenizer's), a prompt is rendered as `apply_chat_template(messages,
add_generation_prompt=True)` renders it (a plain-text prompt is one user turn) and tokenized without added special
tokens; a response is its text closed by the template's end-of-turn token (`<|im_end|>`, `<|eot_id|>`, ...).
Without a template, a plain-text prompt is tokenized as it is (a conversation as its 'Human:/Assistant:' text,
ending with 'Assistant:') and a response is closed by EOS. A model may end a response with any of several ids
(Llama-3's EOS list, Qwen's `<|im_end|>` beside `<|endoftext|>`): `end_ids` holds them all.

Sampling for labels, held-out evaluation, reward training, reward scoring and PPO rollouts tokenize through a
`ChatFormat`, so all of them see the same ids. It needs no torch (the `tokenizers` library, and Jinja for the
template, rendered within bounds of steps, time and size by `trainers.models.chat_template`), so the UI process counts
tokens with it too.

    chat = ChatFormat.from_dir("path/to/model")   # or ChatFormat.from_tokenizer(hf_tokenizer, generation_eos(path))
    chat.prompt_ids([{"role": "user", "content": "Hi"}])   # [..., <|im_start|>, 'assistant', '\\n']
    chat.response_ids("Hello!")                            # [..., <|im_end|>]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer

from labeling.transfer.conversations import TURN_SEPARATOR, PromptInput, conversation_text
from storage.errors import InvalidInput

from .chat_template import render_chat_template

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_MARK = "RLHFSTUDIOMARK"  # stands for a response while the end-of-turn token is found
CONTEXT_KEYS = ("n_positions", "max_position_embeddings")  # where a config.json gives the context length
MAX_CONTEXT = 2**24  # tokens: more than any model reads; a larger value in a config is a mistake


@dataclass(frozen=True)
class ChatFormat:
    """A tokenizer (the `tokenizers` object), its chat template (or None), special tokens and end ids."""

    tokenizer: Tokenizer
    chat_template: str | None
    special_tokens: dict[str, str]
    end_of_turn_id: int
    end_ids: tuple[int, ...]

    @classmethod
    def from_dir(cls, path: str | Path) -> "ChatFormat":
        """From a model directory's `tokenizer.json`, tokenizer config, chat template and generation config."""
        path = Path(path)
        if not (path / "tokenizer.json").is_file():
            raise InvalidInput(f"{path} has no tokenizer.json; save the tokenizer with a recent transformers "
                               "(tokenizer.save_pretrained) to write one")
        config = _read_json(path / "tokenizer_config.json")
        specials = {key: _token_text(config[key]) for key in SPECIAL_TOKEN_KEYS if config.get(key)}
        return cls.build(Tokenizer.from_file(str(path / "tokenizer.json")), _chat_template(path, config), specials,
                         generation_eos(path))

    @classmethod
    def from_tokenizer(cls, tokenizer, end_ids: Iterable[int] = ()) -> "ChatFormat":
        """From a loaded Hugging Face tokenizer (as the trainers load it), with the model's declared end ids
        (`generation_eos(path)`, or its generation config's `eos_token_id`)."""
        specials = {key: value for key, value in tokenizer.special_tokens_map.items() if isinstance(value, str)}
        return cls.build(tokenizer.backend_tokenizer, tokenizer.chat_template, specials, tuple(end_ids))

    @classmethod
    def build(cls, tokenizer: Tokenizer, chat_template: str | None, specials: dict[str, str],
              generation_eos: tuple[int, ...] = ()) -> "ChatFormat":
        eos = specials.get("eos_token")
        eos_id = tokenizer.token_to_id(eos) if eos else None
        if eos_id is None:
            raise InvalidInput("the tokenizer has no EOS token; set tokenizer.eos_token and save it again")
        end_of_turn = _end_of_turn_id(tokenizer, chat_template, specials) if chat_template else None
        end_of_turn = eos_id if end_of_turn is None else end_of_turn
        end_ids = tuple(dict.fromkeys([end_of_turn, eos_id, *generation_eos]))  # ordered, no repeats
        return cls(tokenizer, chat_template, specials, end_of_turn, end_ids)

    # ----- text ----------------------------------------------------------------------------------------------

    def prompt_text(self, prompt: PromptInput) -> str:
        """The text the model reads before its answer."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if self.chat_template:
            return render_chat_template(self.chat_template, messages=messages, add_generation_prompt=True,
                                        **self.special_tokens)
        if isinstance(prompt, str):
            return prompt
        return f"{conversation_text(messages)}{TURN_SEPARATOR}Assistant:"

    def check_template(self) -> None:
        """InvalidInput when the chat template cannot render a one-line prompt (it reaches into Python, runs too
        long, writes too much): no prompt could become tokens. One it refuses only some prompts of is no error."""
        self.prompt_text("hello")

    # ----- token ids -----------------------------------------------------------------------------------------

    def prompt_ids(self, prompt: PromptInput) -> list[int]:
        """Token ids of a prompt, ready for the model to write its answer."""
        return self.prompts_ids([prompt])[0]

    def prompts_ids(self, prompts: list[PromptInput]) -> list[list[int]]:
        """`prompt_ids` of many prompts (one batched tokenizer call)."""
        texts = [self.prompt_text(p) for p in prompts]
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=not self.chat_template)
        return [e.ids for e in encodings]

    def responses_ids(self, responses: list[str]) -> list[list[int]]:
        """Token ids of each response text, closed by the end-of-turn id."""
        encodings = self.tokenizer.encode_batch(list(responses), add_special_tokens=False)
        return [e.ids + [self.end_of_turn_id] for e in encodings]

    def sequences_ids(self, prompts: list[PromptInput], responses: list[str]) -> list[list[int]]:
        """Prompt ids + response ids per row: what a reward model scores (its head reads the last id)."""
        return [p + r for p, r in zip(self.prompts_ids(prompts), self.responses_ids(responses), strict=True)]

    def cut_at_end(self, ids: list[int]) -> tuple[list[int], bool]:
        """Generated ids up to and including the first end id, and whether there was one."""
        for index, token in enumerate(ids):
            if token in self.end_ids:
                return ids[:index + 1], True
        return ids, False

    def decode(self, ids: list[int]) -> str:
        """Response text of generated ids (special tokens, the end id among them, left out)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def count(self, prompt: PromptInput) -> int:
        """Number of tokens of a prompt."""
        return len(self.prompt_ids(prompt))


LISTED = 5  # prompt (or label) ids a line names; the rest are counted


def listed(ids: list[int]) -> str:
    """The first LISTED ids, then how many more: "24, 31, 55, 60, 71 and 9 more"."""
    more = f" and {len(ids) - LISTED} more" if len(ids) > LISTED else ""
    return ", ".join(str(i) for i in ids[:LISTED]) + more


@dataclass(frozen=True)
class PromptBudget:
    """The most tokens a prompt may have: the policy's context less the response length. Nothing is cut: a prompt
    over it is left out of sampling, training and evaluation (and counted), never truncated."""

    chat: ChatFormat
    context: int
    response_length: int

    @property
    def limit(self) -> int:
        return self.context - self.response_length

    def counts(self, prompts) -> list[int | None]:
        """Token counts of stored prompts (`storage.types.Prompt`); None for one the chat template refuses (a
        template that refuses a one-line prompt refuses them all: InvalidInput)."""
        self.chat.check_template()
        texts: list[str | None] = []
        for prompt in prompts:
            try:
                texts.append(self.chat.prompt_text(prompt.content))
            except InvalidInput:
                texts.append(None)
        rendered = [text for text in texts if text is not None]
        encoded = iter(self.chat.tokenizer.encode_batch(rendered, add_special_tokens=not self.chat.chat_template))
        return [None if text is None else len(next(encoded).ids) for text in texts]

    def fit(self, prompts) -> PromptFit:
        """Which of the stored prompts fit, and which do not (with their token counts)."""
        fitting, too_long = [], []
        for prompt, tokens in zip(prompts, self.counts(prompts), strict=True):
            if tokens is not None and tokens <= self.limit:
                fitting.append(prompt)
            else:
                too_long.append((prompt, tokens))
        return PromptFit(self, fitting, too_long)

    def describe(self) -> str:
        """The limits in words: "policy context 512 tokens: responses up to 24, prompts up to 488"."""
        return (f"policy context {self.context} tokens: responses up to {self.response_length}, prompts up to "
                f"{self.limit}")


@dataclass(frozen=True)
class PromptFit:
    """Stored prompts against a budget: those that fit, and those that do not, with their token counts (None: the
    chat template refuses the prompt)."""

    budget: PromptBudget
    fitting: list
    too_long: list[tuple[object, int | None]]

    def too_long_line(self) -> str:
        """ "9 too long for 488 tokens (prompts 24, 31, 55, 60, 71 and 4 more)", or "" when every prompt fits."""
        if not self.too_long:
            return ""
        refused = sum(tokens is None for _, tokens in self.too_long)
        template = f", {refused} of them refused by the chat template" if refused else ""
        return (f"{len(self.too_long)} too long for {self.budget.limit} tokens (prompts "
                f"{listed([prompt.id for prompt, _ in self.too_long])}{template})")


def pair_token_counts(chat: ChatFormat, prompts: list[PromptInput], firsts: list[str],
                      seconds: list[str]) -> list[int]:
    """Tokens a reward model reads for each labelled pair: the prompt and the longer of its two responses."""
    return [len(prompt) + max(len(first), len(second)) for prompt, first, second in
            zip(chat.prompts_ids(prompts), chat.responses_ids(firsts), chat.responses_ids(seconds), strict=True)]


def prompt_budget(model_dir: str | Path, response_length: int) -> PromptBudget | None:
    """The prompt budget of a model directory, counted without torch (None when its config names no context length
    or it has no tokenizer.json: the worker, which loads the tokenizer itself, checks then)."""
    context = model_context(model_dir)
    if context is None or not (Path(model_dir) / "tokenizer.json").is_file():
        return None
    return PromptBudget(ChatFormat.from_dir(model_dir), context, response_length)


def model_context(model_dir: str | Path) -> int | None:
    """Context length from a model directory's config.json (read as JSON: no torch), or None when unknown (also
    when config.json cannot be read: loading the model then says what is wrong with the folder). A length that is
    no whole number of tokens from 1 to MAX_CONTEXT is an InvalidInput naming it."""
    try:
        config = _read_json(Path(model_dir) / "config.json")
    except InvalidInput:
        return None
    key = next((key for key in CONTEXT_KEYS if config.get(key) not in (None, 0)), None)
    if key is None:
        return None
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONTEXT:
        raise InvalidInput(f"config.json in {model_dir}: {key} is {str(value)[:24]!r}, not a whole number of tokens "
                           f"from 1 to {MAX_CONTEXT}; write the model's context length there (e.g. 2048)")
    return value


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from None


def _token_text(value) -> str:
    """A special token as saved in tokenizer_config.json: a string, or an AddedToken dict with `content`."""
    return value["content"] if isinstance(value, dict) else str(value)


def _chat_template(path: Path, config: dict) -> str | None:
    """The default chat template: `chat_template.jinja` (transformers 5) or the config's `chat_template`."""
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    return template or None


def generation_eos(path: str | Path) -> tuple[int, ...]:
    """The end ids a model folder declares: `eos_token_id` (one id or a list) of generation_config.json, else of
    config.json (Llama-3 lists `<|end_of_text|>` and `<|eot_id|>`); () when neither has one."""
    path = Path(path)
    eos = _read_json(path / "generation_config.json").get("eos_token_id")
    if eos is None:
        eos = _read_json(path / "config.json").get("eos_token_id")
    if eos is None:
        return ()
    return tuple(i for i in (eos if isinstance(eos, list) else [eos]) if isinstance(i, int))


def _end_of_turn_id(tokenizer: Tokenizer, chat_template: str, specials: dict[str, str]) -> int | None:
    """The special token the template writes right after an assistant turn's text (None when there is none)."""
    turns = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _MARK}]
    try:
        text = render_chat_template(chat_template, messages=turns, add_generation_prompt=False, **specials)
    except InvalidInput:  # a template may refuse this minimal conversation (jinja raise_exception): use EOS
        return None
    if _MARK not in text:
        return None
    after = tokenizer.encode(text.split(_MARK, 1)[1], add_special_tokens=False).ids
    special_ids = {token.content for token in tokenizer.get_added_tokens_decoder().values() if token.special}
    if after and tokenizer.id_to_token(after[0]) in special_ids:
        return after[0]
    return None
