"""A judge served by an OpenAI-compatible chat-completions endpoint (vLLM's or llama.cpp's server, Ollama), over the
standard library's HTTP client.

The key, when the server wants one, is read from the environment variable the admin names (`--judge-key-env VAR`)
when the client is made, kept in memory only and sent as `Authorization: Bearer`: it is never stored, logged, shown
in an error or exported, and goes to no other address: a redirect is never followed (`labeling.judges.judge_http`, which
also gives each request one deadline, `timeout_s`, from connecting to the last byte, and reads at most `max_mb` of an
answer; a redirect or a larger answer stops the run in one line). The client asks for log-probabilities (`logprobs`,
`top_logprobs`) so the verdict token's probabilities give the confidence; a server that refuses them (HTTP 400) is
asked again without, once. A timeout, an HTTP error, a server's refusal (`finish_reason: content_filter`, a `refusal`
message) come back as a failed `Reply`, counted by the caller, never guessed.

    client = EndpointClient("http://127.0.0.1:8000/v1", model="qwen2.5-7b-instruct", key_env="JUDGE_KEY")
    reply = client.complete([{"role": "user", "content": "..."}])
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import urllib.parse
from dataclasses import dataclass, field

from labeling.judges.judge import LETTERS, Reply, Status, letter_probs
from labeling.judges.judge_http import post_json, shown
from storage.errors import InvalidInput

DEFAULT_TIMEOUT_S = 60.0  # each request's deadline, connection to last byte
DEFAULT_MAX_MB = 1.0  # the largest answer read
DEFAULT_MAX_TOKENS = 1024
TOP_LOGPROBS = 5
_VERDICT_END = re.compile(r"\[\[\s*([ABC])$")


def is_endpoint(judge: str) -> bool:
    """Does `--judge` name an endpoint (an http(s) URL) rather than a model folder or GGUF file?"""
    return judge.startswith(("http://", "https://"))


def completions_url(base: str) -> str:
    """The chat-completions URL of a server given by its base (`http://host:8000`, `.../v1`) or the full URL."""
    base = base.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    return f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"


def names_host(url: str) -> bool:
    """Does the URL name a host (and a valid port, if any)?"""
    try:
        parts = urllib.parse.urlsplit(url)
        return bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:
        return False


def read_key(key_env: str | None) -> str | None:
    """The key held by the environment variable `key_env` (None: the server needs none); a named but unset
    variable is one clear line, which never shows a value."""
    if key_env is None:
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_env):
        raise InvalidInput(f"--judge-key-env must name an environment variable (letters, digits, _), got {key_env!r}")
    key = os.environ.get(key_env)
    if not key:
        raise InvalidInput(f"the environment variable {key_env} holds no key; export {key_env}=... before running, "
                           "or leave --judge-key-env out for a server that needs no key")
    return key


@dataclass
class EndpointClient:
    """A `labeling.judges.judge.JudgeClient` on an OpenAI-compatible server; its verdicts are stored under `model`."""

    url: str
    model: str
    key_env: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_mb: float = DEFAULT_MAX_MB
    max_tokens: int = DEFAULT_MAX_TOKENS
    logprobs: bool = True
    _key: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not is_endpoint(self.url):
            raise InvalidInput(f"the judge endpoint must be an http:// or https:// URL, got {self.url!r}")
        if not self.model:
            raise InvalidInput("an endpoint judge needs --judge-model NAME (the model the server serves)")
        if not self.timeout_s > 0:
            raise InvalidInput(f"the judge's timeout must be positive, got {self.timeout_s}")
        if not self.max_mb > 0:
            raise InvalidInput(f"the judge's largest answer (--judge-max-mb) must be positive, got {self.max_mb}")
        self.url = completions_url(self.url)
        if not names_host(self.url):
            raise InvalidInput(f"the judge endpoint {shown(self.url)!r} names no host and port to call; give "
                               "http(s)://HOST[:PORT]/v1")
        self._key = read_key(self.key_env)

    @property
    def name(self) -> str:
        return self.model

    def complete(self, messages: list[dict]) -> Reply:
        reply, refused_logprobs = self._post(messages, self.logprobs)
        if refused_logprobs:
            self.logprobs = False
            reply, _ = self._post(messages, False)
        return reply

    def _post(self, messages: list[dict], logprobs: bool) -> tuple[Reply, bool]:
        """One request; (the reply, True when the server refused the log-probability options with HTTP 400)."""
        body = {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": self.max_tokens}
        if logprobs:
            body |= {"logprobs": True, "top_logprobs": TOP_LOGPROBS}
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        try:
            status, data = post_json(self.url, json.dumps(body).encode(), headers, self.timeout_s,
                                     int(self.max_mb * 1_000_000))
        except TimeoutError:
            return Reply(f"no answer within {self.timeout_s:g} s", failure=Status.TIMEOUT), False
        except (OSError, http.client.HTTPException, ValueError) as exc:
            return Reply(f"cannot reach the judge endpoint: {shown(str(exc) or type(exc).__name__)}",
                         failure=Status.ERROR), False
        if status >= 400:
            return Reply(f"HTTP {status} from the judge endpoint", failure=Status.ERROR), logprobs and status == 400
        try:
            payload = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            return Reply("the judge endpoint's answer is not JSON", failure=Status.ERROR), False
        return read_completion(payload), False


def read_completion(payload: dict) -> Reply:
    """A chat-completions answer as a `Reply`: the message's text and the verdict token's probabilities, or the
    server's refusal; an answer of the wrong shape is an error."""
    try:
        choice = payload["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        return Reply("the judge endpoint's answer has no choices[0].message", failure=Status.ERROR)
    if message.get("refusal") or choice.get("finish_reason") == "content_filter":
        return Reply(str(message.get("refusal") or text), failure=Status.REFUSAL)
    return Reply(text, verdict_probs((choice.get("logprobs") or {}).get("content")))


def verdict_probs(tokens: list[dict] | None) -> dict[str, float] | None:
    """The probabilities of A, B, C at the last verdict token of an answer's log-probabilities (the token that
    completes `[[X`), from its `top_logprobs`; None when the answer carries none or writes no verdict."""
    if not tokens:
        return None
    text, found = "", None
    for entry in tokens:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            return None
        if _VERDICT_END.search((text + entry["token"]).rstrip()):
            found = (text, entry)
        text += entry["token"]
    if found is None:
        return None
    before, entry = found
    weights = {letter: 0.0 for letter in LETTERS}
    for alternative in entry.get("top_logprobs") or [entry]:
        match = _VERDICT_END.search((before + str(alternative.get("token", ""))).rstrip())
        logprob = alternative.get("logprob")
        if match and isinstance(logprob, (int, float)) and math.isfinite(logprob):
            weights[match.group(1)] += math.exp(logprob)
    return letter_probs(weights)
