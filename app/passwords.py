"""Salted, slow password hashes: `hashlib.scrypt` with its cost stored beside the salt, so a cost raised later
leaves older entries valid. An entry reads `scrypt$N$r$p$SALT$HASH` (SALT and HASH in base64).

    entry = hash_password("s3cret")           # 'scrypt$16384$8$1$...$...'
    verify_password("s3cret", entry)          # True, compared in constant time
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass

SCHEME = "scrypt"
SALT_BYTES = 16
KEY_BYTES = 32
MAX_MEMORY_BYTES = 256 * 2**20  # an entry asking scrypt for more memory than this is refused, not computed


@dataclass(frozen=True)
class ScryptCost:
    """scrypt's work factors: N (a power of two: CPU and memory), r (block size), p (parallelism)."""

    n: int
    r: int
    p: int

    @property
    def memory_bytes(self) -> int:
        return 128 * self.r * self.n

    def check(self) -> None:
        """Raise ValueError unless scrypt can run with these factors within MAX_MEMORY_BYTES."""
        if self.n < 2 or self.n & (self.n - 1) or self.r < 1 or self.p < 1 or self.r * self.p >= 2**30:
            raise ValueError(f"scrypt cost N={self.n} r={self.r} p={self.p} is invalid: N must be a power of two")
        if self.memory_bytes > MAX_MEMORY_BYTES:
            raise ValueError(f"scrypt cost N={self.n} r={self.r} needs {self.memory_bytes // 2**20} MB; "
                             f"keep it under {MAX_MEMORY_BYTES // 2**20} MB")


# 16 MB and 50-100 ms per hash on the 2-core development machine (more while it is busy): slow for a guesser,
# unnoticed by a person logging in. Measure with `python bench/login_throttle.py`.
DEFAULT_COST = ScryptCost(n=2**14, r=8, p=1)


def _derive(password: str, salt: bytes, cost: ScryptCost) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=cost.n, r=cost.r, p=cost.p, dklen=KEY_BYTES,
                          maxmem=cost.memory_bytes + 2**20)


def hash_password(password: str, cost: ScryptCost = DEFAULT_COST) -> str:
    """A new entry for `password` with a fresh random salt."""
    cost.check()
    salt = os.urandom(SALT_BYTES)
    key = _derive(password, salt, cost)
    return "$".join([SCHEME, str(cost.n), str(cost.r), str(cost.p), _b64(salt), _b64(key)])


def parse_entry(entry: str) -> tuple[ScryptCost, bytes, bytes]:
    """(cost, salt, key) of an entry; ValueError naming what is wrong."""
    parts = entry.split("$")
    if len(parts) != 6 or parts[0] != SCHEME:
        raise ValueError(f"not a `{SCHEME}$N$r$p$salt$hash` entry")
    try:
        cost = ScryptCost(*(int(part) for part in parts[1:4]))
        salt, key = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
    except (ValueError, binascii.Error):
        raise ValueError("N, r and p must be whole numbers and the salt and hash base64") from None
    cost.check()
    if not salt or not key:
        raise ValueError("the salt and the hash must not be empty")
    return cost, salt, key


def is_hashed(secret: str) -> bool:
    """Whether an auth file's secret is a hash entry (anything else is taken for a plain-text password)."""
    return secret.startswith(SCHEME + "$")


def verify_password(password: str, entry: str) -> bool:
    """Whether `password` matches `entry`: one scrypt computation, then a constant-time comparison."""
    cost, salt, key = parse_entry(entry)
    return hmac.compare_digest(_derive(password, salt, cost), key)


def dummy_entry(cost: ScryptCost) -> str:
    """A fixed entry that no password matches, at `cost`: checking an unknown name costs the same as a known one."""
    return "$".join([SCHEME, str(cost.n), str(cost.r), str(cost.p), _b64(bytes(SALT_BYTES)), _b64(bytes(KEY_BYTES))])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
