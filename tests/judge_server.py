"""A small OpenAI-compatible chat-completions server for tests: real HTTP on loopback, answers chosen by the test.

    with JudgeServer(prefers_word("good")) as server:
        client = EndpointClient(server.url, model="fake")

`answer(messages) -> str` writes the assistant's text (or `(text, confidence)`: that answer's letter probability);
a reply of `SLOW` sleeps past any test timeout, `REFUSE` comes
back as a refusal (`finish_reason: content_filter`). With `logprobs`, the verdict letter's token carries
`top_logprobs` (the letter at `confidence`, the other two sharing the rest). Requests are kept (body and headers).
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOW = "<slow>"
REFUSE = "<refuse>"


def prefers_word(word: str):
    """A judge that prefers the answer holding `word` (a tie when both or neither do), in MT-Bench's format."""
    def answer(messages: list[dict]) -> str:
        user = messages[-1]["content"]
        a = user.split("[The Start of Assistant A's Answer]")[1].split("[The End of Assistant A's Answer]")[0]
        b = user.split("[The Start of Assistant B's Answer]")[1].split("[The End of Assistant B's Answer]")[0]
        has_a, has_b = word in a, word in b
        return f"Comparing both. [[{'A' if has_a and not has_b else 'B' if has_b and not has_a else 'C'}]]"
    return answer


def prefers_score(score, sure_gap: float = 2.0):
    """A judge that prefers the answer `score(text)` rates higher (a tie when equal), sure (0.9) when the scores
    differ by at least `sure_gap`, else unsure (0.5)."""
    def answer(messages: list[dict]):
        user = messages[-1]["content"]
        a = user.split("[The Start of Assistant A's Answer]\n")[1].split("\n[The End of Assistant A's Answer]")[0]
        b = user.split("[The Start of Assistant B's Answer]\n")[1].split("\n[The End of Assistant B's Answer]")[0]
        gap = score(a) - score(b)
        return f"[[{'A' if gap > 0 else 'B' if gap < 0 else 'C'}]]", 0.9 if abs(gap) >= sure_gap else 0.5
    return answer


def always(text: str):
    return lambda messages: text


class JudgeServer:
    def __init__(self, answer, logprobs: bool = False, confidence: float = 0.8, refuse_logprobs: bool = False):
        self.answer, self.logprobs, self.confidence = answer, logprobs, confidence
        self.refuse_logprobs = refuse_logprobs
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                if server.refuse_logprobs and body.get("logprobs"):
                    return self.send(400, {"error": "logprobs not supported"})
                text, confidence = server.answer(body["messages"]), server.confidence
                if isinstance(text, tuple):
                    text, confidence = text
                if text == SLOW:
                    time.sleep(2.0)
                    text = "[[A]]"
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                if text == REFUSE:
                    choice = {"index": 0, "message": {"role": "assistant", "content": ""},
                              "finish_reason": "content_filter"}
                elif server.logprobs and body.get("logprobs"):
                    choice["logprobs"] = {"content": server.token_logprobs(text, confidence)}
                self.send(200, {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [choice]})

            def send(self, code: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads, self.httpd.block_on_close = True, False  # a slow answer never holds the test
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def token_logprobs(self, text: str, confidence: float) -> list[dict]:
        """The answer as tokens `...[[`, `X`, `]]` with the letter's top log-probabilities."""
        match = re.search(r"\[\[([ABC])\]\]", text)
        if not match:
            return [{"token": text, "logprob": -0.1, "top_logprobs": []}]
        letter, rest = match.group(1), (1 - confidence) / 2
        top = [{"token": x, "logprob": math.log(confidence if x == letter else rest)} for x in "ABC"]
        return [{"token": text[:match.start()] + "[[", "logprob": -0.1, "top_logprobs": []},
                {"token": letter, "logprob": math.log(confidence), "top_logprobs": top},
                {"token": "]]" + text[match.end():], "logprob": -0.01, "top_logprobs": []}]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> JudgeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
