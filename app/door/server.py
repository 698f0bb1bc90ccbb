"""Launching the studio: checks of the serve options, marking orphaned jobs, then Gradio's server, under `--auth`
behind the login gate (`app.door.sessions`); optionally under a reverse proxy's root path and with TLS."""

from __future__ import annotations

import errno
import math
import socket
import sys
from pathlib import Path

from app.auth import AuthFile
from app.door.limits import IDLE_TIMEOUT_MIN, LOGIN_BACKOFF_MAX_S, MAX_UPLOAD_MB
from app.door.sessions import login_message, login_middleware
from app.door.ui import build_app, launch_options
from storage import Store
from storage.errors import Conflict, InvalidInput
from trainers.jobs.launcher import reap_orphans

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def check_port(host: str, port: int) -> None:
    """Fail with one clear line when the port is taken, before any store is touched. The check binds as uvicorn
    does (`SO_REUSEADDR`): a connection of a studio that just died, left in TIME-WAIT, does not count, only a
    server listening there."""
    if not 0 < port < 65536:
        raise InvalidInput(f"port {port} is out of range; choose a port between 1 and 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise Conflict(f"port {port} on {host} is already in use; pass --port with a free port") from None
            raise InvalidInput(f"cannot serve on {host}:{port} ({exc.strerror}); check --host and --port") from None


def check_positive(option: str, value: float, unit: str, example: float) -> None:
    """Fail with one clear line when a size or duration option is not a positive, finite number of `unit`."""
    if not (value > 0 and math.isfinite(value)):
        raise InvalidInput(f"{option} {value:g} must be a positive number of {unit}, e.g. {example:g}")


def check_upload_cap(max_upload_mb: float) -> None:
    check_positive("--max-upload-mb", max_upload_mb, "megabytes", MAX_UPLOAD_MB)


def check_root_path(root_path: str) -> str:
    """The path a reverse proxy serves the studio under, e.g. `/studio` (normalised: no trailing slash)."""
    if root_path and (not root_path.startswith("/") or any(c in root_path for c in " ?#\\") or "//" in root_path):
        raise InvalidInput(f"--root-path {root_path!r} must be a URL path starting with `/`, e.g. /studio")
    return root_path.rstrip("/")


def check_tls(certfile: str | None, keyfile: str | None) -> None:
    """Both TLS files or neither, and both readable."""
    if (certfile is None) != (keyfile is None):
        raise InvalidInput("pass both --ssl-certfile and --ssl-keyfile to serve over HTTPS")
    for option, path in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile)):
        if path is not None and not Path(path).is_file():
            raise InvalidInput(f"{option} {path} does not exist; give the PEM file of your certificate and its key")


def refuse_gradio_login(name: str, password: str) -> bool:
    """Gradio's own login route: never reached (the login gate answers every login), refuses if it ever is."""
    return False


def serve(store: Store, host: str, port: int, users: AuthFile | None = None, block: bool = True,
          max_upload_mb: float = MAX_UPLOAD_MB, root_path: str = "", ssl_certfile: str | None = None,
          ssl_keyfile: str | None = None, idle_timeout_s: float = IDLE_TIMEOUT_MIN * 60.0,
          backoff_max_s: float = LOGIN_BACKOFF_MAX_S, accelerate_config: str | None = None,
          judge: dict | None = None):
    """Build the UI and serve it, refusing uploads over `max_upload_mb`; under `users`, logins go through the gate
    (throttled, hashed off the event loop) and sessions end after `idle_timeout_s` unused; the Train tab's jobs run
    their training phases under `accelerate_config` when given. Returns the running Blocks when `block` is False
    (tests)."""
    if host not in LOCAL_HOSTS and users is None:
        print(f"warning: serving on {host} without --auth: anyone who can reach this machine can label and train",
              file=sys.stderr)
    reap_orphans(store)  # jobs whose worker died while the studio was down are offered for resume
    blocks = build_app(store, users, accelerate_config, judge)
    login = {}
    if users is not None:
        login = {"auth": refuse_gradio_login, "auth_message": login_message(backoff_max_s),
                 "app_kwargs": {"middleware": [login_middleware(users, idle_timeout_s, backoff_max_s)]}}
    # ssl_verify=False concerns only Gradio's start-up request to its own local URL (127.0.0.1), which a
    # certificate issued for the public host name cannot match; browsers still check the certificate
    blocks.launch(server_name=host, server_port=port, prevent_thread_lock=not block, quiet=False,
                  root_path=check_root_path(root_path), ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
                  ssl_verify=False, **login, **launch_options(max_upload_mb))
    return blocks
