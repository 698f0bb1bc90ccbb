"""One bounded HTTP POST, the endpoint judge's only way out: no redirect followed, one deadline per request, an answer
read up to a cap.

Python's `urllib` follows a redirect with every header (the judge's `Authorization` too) to whatever host `Location`
names, from https to http too; its timeout bounds each socket operation, so a server sending a byte a second holds the
caller for ever; and it reads an answer whole. Here, with the standard library's `http.client`:

- a 3xx answer is never followed: `EndpointRefused`, one line naming where it pointed; nothing is sent there;
- `timeout_s` is the whole request's deadline, from connecting to the answer's last byte: a watchdog shuts the socket
  when it passes and the request raises `TimeoutError` (resolving the host's name is the one step it cannot cut);
- at most `max_bytes` of an answer are read: one announced larger (`Content-Length`), or found larger once that many
  bytes came, is `EndpointRefused` without reading the rest.

The endpoint is called directly (proxy variables such as `http_proxy` are not used).

    status, body = post_json("http://127.0.0.1:8000/v1/chat/completions", b"{...}", headers, 60.0, 1_000_000)
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import urllib.parse

from storage.errors import StudioError

SHOWN_CHARS = 200  # of a Location quoted in an error line


class EndpointRefused(StudioError):
    """The judge endpoint answered with something the client will not take: a redirect, or an answer over the cap."""


def shown(text: str) -> str:
    """Server-chosen text fit to quote in one line: control characters as `?`, cut to SHOWN_CHARS."""
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def post_json(url: str, data: bytes, headers: dict[str, str], timeout_s: float, max_bytes: int) -> tuple[int, bytes]:
    """POST `data` to `url`: (the HTTP status, the answer's body; empty unless the status is 2xx). Raises
    `TimeoutError` past the deadline, `EndpointRefused` for a redirect or an answer over `max_bytes`, `OSError` or
    `http.client.HTTPException` when the endpoint cannot be reached or breaks the protocol."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout_s,
                                                 context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    expired = threading.Event()
    handles: list[socket.socket] = []  # our own handle on the connection, whatever wraps (TLS) or takes over its socket

    def expire() -> None:
        expired.set()
        for handle in handles:  # shuts the connection itself: a read blocked on it (handshake, headers, body) returns
            try:
                handle.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def create_connection(address, timeout, source_address=None) -> socket.socket:
        sock = socket.create_connection(address, timeout, source_address)
        handles.append(sock.dup())
        if expired.is_set():  # connected as the watchdog fired, before it could shut anything
            expire()
        return sock

    connection._create_connection = create_connection  # http.client's hook for making the socket
    watchdog = threading.Timer(timeout_s, expire)
    watchdog.daemon = True
    watchdog.start()
    response = None
    try:
        connection.connect()
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("POST", path, body=data, headers=headers)
        response = connection.getresponse()
        if 300 <= response.status < 400:
            where = shown(response.getheader("Location") or "nowhere (no Location header)")
            raise EndpointRefused(f"the judge endpoint {shown(url)} redirected (HTTP {response.status}) to {where}; "
                                  "the judge client follows no redirect, so the key goes nowhere else: give the URL "
                                  "it should call as --judge")
        if not 200 <= response.status < 300:
            return response.status, b""
        if response.length is not None and response.length > max_bytes:
            raise _too_large(max_bytes)
        body = response.read(max_bytes + 1)
        if len(body) > max_bytes:
            raise _too_large(max_bytes)
        if expired.is_set():
            raise TimeoutError
        return response.status, body
    except (OSError, http.client.HTTPException, ValueError):
        if expired.is_set():
            raise TimeoutError from None
        raise
    finally:
        watchdog.cancel()
        if response is not None:
            response.close()
        connection.close()
        for handle in handles:
            handle.close()


def _too_large(max_bytes: int) -> EndpointRefused:
    return EndpointRefused(f"the judge endpoint's answer is over {max_bytes / 1e6:g} MB, the most the judge client "
                           "reads; it was refused, not read further (raise --judge-max-mb if the endpoint must "
                           "answer more)")
