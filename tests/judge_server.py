"""A small OpenAI-compatible chat-completions server for tests: real HTTP on loopback, answers chosen by the test.

    with JudgeServer(prefers_word("good")) as server:
        client = EndpointClient(server.url, model="fake")

`answer(messages) -> str` writes the assistant's text (or `(text, confidence)`: that answer's letter probability);
a reply of `SLOW` sleeps past any test timeout, `REFUSE` comes
back as a refusal (`finish_reason: content_filter`). With `logprobs`, the verdict letter's token carries
`top_logprobs` (the letter at `confidence`, the other two sharing the rest). Requests are kept (body and headers).

`HostileServer(respond)` answers any request as `respond` writes it: a redirect (`redirecting`), a byte at a time
(`dripping`), a huge body (`streaming`), or a verdict to any method (`verdict_everywhere`, where a redirect may lead).
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


class HostileServer:
    """An HTTP server on loopback that answers every request with `respond(handler)`, writing whatever it likes
    (`handler.wfile`); it records each request's method, path and headers, and `sent` counts the answer bytes
    `write` got out before the client hung up. `done` is set when an answer ends (written or cut off)."""

    def __init__(self, respond):
        self.requests: list[dict] = []
        self.sent = 0
        self.done = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def handle_one_request_body(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                        "body": body})
                try:
                    respond(self)
                except OSError:  # the client hung up
                    pass
                finally:
                    self.close_connection = True
                    server.done.set()

            do_POST = do_GET = handle_one_request_body

            def write(self, data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                server.sent += len(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads, self.httpd.block_on_close = True, False
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(text: str) -> bytes:
    """A chat-completions answer whose message is `text`."""
    return json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()


def verdict_everywhere(text: str = "[[A]]"):
    """Answers any method with a completion saying `text` (a judge a redirect might lead to)."""
    def respond(handler) -> None:
        data = completion(text)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.write(data)
    return respond


def redirecting(code: int, location: str):
    """Answers with HTTP `code` pointing to `location`."""
    def respond(handler) -> None:
        handler.send_response(code)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
    return respond


def dripping(where: str, interval_s: float = 0.5, for_s: float = 12.0):
    """Sends one byte every `interval_s` (under any per-read timeout) for up to `for_s`, in the headers (`where=
    "headers"`), or in the body after whole headers, of a length given (`"body"`) or not (`"body-until-close"`)."""
    def respond(handler) -> None:
        if where.startswith("body"):
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            if where == "body":
                handler.send_header("Content-Length", "100000")
            handler.end_headers()
        else:
            handler.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        began = time.monotonic()
        while time.monotonic() - began < for_s:
            handler.write(b" ")
            time.sleep(interval_s)
    return respond


def streaming(total: int, announced: bool, chunk: int = 65536):
    """Streams `total` bytes of a JSON string (a body far over any cap when large), its length `announced` in
    Content-Length or not (the body then ends when the connection closes)."""
    def respond(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if announced:
            handler.send_header("Content-Length", str(total))
        handler.end_headers()
        block = b" " * chunk
        left = total
        while left > 0:
            handler.write(block[:left])
            left -= min(chunk, left)
    return respond
