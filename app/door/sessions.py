"""The door of a studio served with `--auth`: an ASGI middleware in front of Gradio's app (`login_middleware`).

- `POST /login` is answered here, never by Gradio (which calls its auth function synchronously inside its async
  route, and keeps every token forever). Attempts are throttled per user name and per client address
  (`app.door.throttle`): while locked out the answer is HTTP 429 "try again in N s", with nothing checked. The password
  hash is computed in a small pool of low-priority threads, so the event loop keeps serving everyone else. An
  unknown name and a wrong password get the same answer (Gradio's "Incorrect credentials.", HTTP 400) after the
  same work. A success issues the session token the way Gradio does (its `tokens` table and cookies), so every
  Gradio route knows the user; over HTTPS (TLS here, or a proxy on this machine saying `X-Forwarded-Proto: https`)
  both cookies are `Secure`, so a browser never sends them over plain HTTP.
- Every other request: a session unused for the idle timeout, or whose user has been removed from the auth file or
  given a new password since the login, is ended (its token dropped from Gradio's table): Gradio then answers 401
  and the browser shows the login page. Any request counts as use, the tabs' automatic refreshes included.

Behind a reverse proxy the client address comes from `X-Forwarded-For` when the proxy runs on this machine
(uvicorn trusts 127.0.0.1 by default; `FORWARDED_ALLOW_IPS` names others). Time is `time.monotonic()` read through
this module's `time`, which tests replace.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse

from app.auth import MAX_NAME_CHARS, AuthFile
from app.door.throttle import LoginThrottle
from labeling.files.text_fields import surrogate_field, surrogate_message
from labeling.queue.annotation import normal_name

LOGIN_PATHS = ("/login", "/login/")
INCORRECT = "Incorrect credentials."  # Gradio's own answer: its login page shows a wrong password on HTTP 400
MAX_LOGIN_BODY = 16 * 1024  # bytes; a bigger login form is refused unread (HTTP 413)
HASH_THREADS = 2  # logins checked at once; more wait their turn, off the event loop
HASH_NICENESS = 10  # hashing threads yield the CPU to serving: a burst of logins barely slows labeling


@dataclass
class Session:
    user: str
    entry: str  # the user's password hash at login: a new one ends the session
    last_seen: float


async def read_body(receive, limit: int) -> bytes | None:
    """The request's body, or None once it passes `limit` bytes (the rest is never read)."""
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if message["type"] != "http.request" or not message.get("more_body"):
            return bytes(body)


def replay(body: bytes):
    """An ASGI `receive` that hands over a body already read."""
    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}
    return receive


def lower_priority() -> None:
    """Give the calling thread a lower CPU priority than the server's threads (Linux prioritises threads one by
    one; elsewhere the call would renice the whole process, so nothing is done)."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HASH_NICENESS)


def route_path(scope: dict) -> str:
    """The path as Gradio's routes see it: under `--root-path /studio`, `/studio/login` is `/login`."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root + "/") else path


def login_message(backoff_max_s: float) -> str:
    """The line above the login form (Gradio shows no text of ours when a login is refused for throttling)."""
    return (f"Sign in with the name and password your studio admin gave you. After repeated failed attempts, "
            f"sign-ins pause for a while (at most {backoff_max_s:g} s); wait, then try again.")


class LoginGate:
    """The middleware; Starlette builds it with the keywords of `login_middleware`."""

    def __init__(self, app, auth: AuthFile, idle_timeout_s: float, backoff_max_s: float):
        self.app = app
        self.auth = auth
        self.idle_timeout_s = idle_timeout_s
        self.throttle = LoginThrottle(max_s=backoff_max_s)
        self.sessions: dict[str, Session] = {}
        self.hashing = ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="login-hash", initializer=lower_priority)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        gradio_app = scope["app"]
        if scope["method"] == "POST" and route_path(scope) in LOGIN_PATHS:
            response = await self.login(scope, receive, gradio_app)
            await response(scope, receive, send)
            return
        self.check_session(HTTPConnection(scope), gradio_app)
        await self.app(scope, receive, send)

    async def login(self, scope, receive, gradio_app) -> JSONResponse:
        body = await read_body(receive, MAX_LOGIN_BODY)
        if body is None:
            return JSONResponse({"detail": f"a login form is at most {MAX_LOGIN_BODY} bytes"}, status_code=413)
        request = Request(scope, replay(body))
        try:
            form = await request.form(max_files=0, max_fields=8)
        except HTTPException:  # a malformed multipart body, or one with files or too many fields
            return JSONResponse({"detail": "send `username` and `password` as form fields"}, status_code=400)
        name, password = (form.get(key) or "" for key in ("username", "password"))
        if isinstance(name, UploadFile) or isinstance(password, UploadFile):
            return JSONResponse({"detail": "send `username` and `password` as form fields"}, status_code=400)
        field = surrogate_field({"the user name": name, "the password": password})
        if field is not None:  # a form in UTF-7 can carry one: no name has it, no hash takes it
            return JSONResponse({"detail": surrogate_message(field)}, status_code=400)
        name, address = normal_name(name), request.client.host if request.client else ""
        key = name[:MAX_NAME_CHARS + 1]  # longer names cannot exist: they share one count (and bounded memory)
        wait = self.throttle.admit(key, address, time.monotonic())
        if wait > 0:
            seconds = math.ceil(wait)
            return JSONResponse({"detail": f"too many failed logins; try again in {seconds} s"}, status_code=429,
                                headers={"Retry-After": str(seconds)})
        users, ok = self.auth.users(), False
        try:
            ok = await asyncio.get_running_loop().run_in_executor(self.hashing, users.verify, name, password)
        finally:  # an attempt whose client went away meanwhile counts as failed
            self.throttle.finish(key, address, ok, time.monotonic())
        if not ok:
            return JSONResponse({"detail": INCORRECT}, status_code=400)
        return self.open_session(gradio_app, name, users.entries[name], request.url.scheme == "https")

    def open_session(self, gradio_app, name: str, entry: str, https: bool) -> JSONResponse:
        """Issue a token as Gradio's own login route does (its table, its two cookies); over `https` the second
        cookie (Gradio's for plain HTTP, where a browser refuses `SameSite=none` without `Secure`) is `Secure` too."""
        now = time.monotonic()
        for token, session in list(self.sessions.items()):  # forget sessions that have ended meanwhile
            if token not in gradio_app.tokens or now - session.last_seen > self.idle_timeout_s:
                self.end(gradio_app, token)
        token = secrets.token_urlsafe(16)
        gradio_app.tokens[token] = name
        self.sessions[token] = Session(name, entry, now)
        response = JSONResponse({"success": True})
        response.set_cookie(f"access-token-{gradio_app.cookie_id}", token, httponly=True, samesite="none", secure=True)
        response.set_cookie(f"access-token-unsecure-{gradio_app.cookie_id}", token, httponly=True, secure=https)
        return response

    def check_session(self, connection: HTTPConnection, gradio_app) -> None:
        """End the request's session when idle too long, or when its user's line changed or went away."""
        cookie_names = (f"access-token-{gradio_app.cookie_id}", f"access-token-unsecure-{gradio_app.cookie_id}")
        tokens = {connection.cookies.get(name) for name in cookie_names} - {None}
        if not tokens:
            return
        now, entries = time.monotonic(), self.auth.users().entries
        for token in tokens:
            session = self.sessions.get(token)
            if (session is None or entries.get(session.user) != session.entry
                    or now - session.last_seen > self.idle_timeout_s):
                self.end(gradio_app, token)
            else:
                session.last_seen = now

    def end(self, gradio_app, token: str) -> None:
        gradio_app.tokens.pop(token, None)
        self.sessions.pop(token, None)


def login_middleware(auth: AuthFile, idle_timeout_s: float, backoff_max_s: float) -> Middleware:
    """The gate, for Gradio's `launch(app_kwargs={"middleware": [...]})`."""
    return Middleware(LoginGate, auth=auth, idle_timeout_s=idle_timeout_s, backoff_max_s=backoff_max_s)
