"""Launching the studio: port checks, the auth file, marking orphaned jobs, then Gradio's server."""

from __future__ import annotations

import errno
import math
import socket
import sys

from storage import Store
from storage.errors import Conflict, InvalidInput

from trainers.launcher import reap_orphans

from .auth import Users
from .limits import MAX_UPLOAD_MB
from .ui import build_app, launch_options

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def check_port(host: str, port: int) -> None:
    """Fail with one clear line when the port is taken, before any store is touched."""
    if not 0 < port < 65536:
        raise InvalidInput(f"port {port} is out of range; choose a port between 1 and 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise Conflict(f"port {port} on {host} is already in use; pass --port with a free port") from None
            raise InvalidInput(f"cannot serve on {host}:{port} ({exc.strerror}); check --host and --port") from None


def check_upload_cap(max_upload_mb: float) -> None:
    """Fail with one clear line when the upload size cap is not a positive, finite number of megabytes."""
    if not (max_upload_mb > 0 and math.isfinite(max_upload_mb)):
        raise InvalidInput(f"--max-upload-mb {max_upload_mb:g} must be a positive number of megabytes, e.g. 200")


def serve(store: Store, host: str, port: int, users: Users | None = None, block: bool = True,
          max_upload_mb: float = MAX_UPLOAD_MB):
    """Build the UI and serve it, refusing uploads over `max_upload_mb`; returns the running Blocks when `block` is
    False (tests)."""
    if host not in LOCAL_HOSTS and users is None:
        print(f"warning: serving on {host} without --auth: anyone who can reach this machine can label and train",
              file=sys.stderr)
    reap_orphans(store)  # jobs whose worker died while the studio was down are offered for resume
    blocks = build_app(store, users)
    blocks.launch(server_name=host, server_port=port, prevent_thread_lock=not block, quiet=False,
                  auth=users.check if users else None, **launch_options(max_upload_mb))
    return blocks
