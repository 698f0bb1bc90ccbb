"""Login throttling: failed logins are counted per user name and per client address; past a few free failures
each further one locks that name (or address) out for an exponentially growing time, capped. Attempts are refused
while locked, without checking the password; a successful login clears the name's count. Pure bookkeeping: the
caller passes the time (`now`, seconds on a monotonic clock), so tests drive it by hand.

    throttle = LoginThrottle()
    wait = throttle.admit("alice", "10.0.0.7", now)     # 0: check the password; else refuse, "try again in N s"
    throttle.finish("alice", "10.0.0.7", ok, now)
"""

from __future__ import annotations

from dataclasses import dataclass

from app.door.limits import LOGIN_BACKOFF_MAX_S

FREE_FAILURES_PER_NAME = 5
FREE_FAILURES_PER_ADDRESS = 20  # an office behind one address shares it
BACKOFF_BASE_S = 1.0
FORGET_AFTER_S = 15 * 60.0  # a name or address quiet this long past its lock-out starts afresh
MAX_RECORDS = 10_000  # records kept at most (a spray of made-up names cannot grow memory without bound)
BUSY_RETRY_S = 1.0  # answer to an attempt refused because an earlier one for the same key is still being checked


@dataclass(frozen=True)
class Backoff:
    """How long a key is locked out after its n-th failure: nothing for the first `free - 1`, then `base_s`,
    doubling with each further failure, at most `max_s`."""

    free: int
    base_s: float = BACKOFF_BASE_S
    max_s: float = LOGIN_BACKOFF_MAX_S

    def delay(self, failures: int) -> float:
        if failures < self.free:
            return 0.0
        return min(self.max_s, self.base_s * 2.0 ** min(failures - self.free, 64))


@dataclass
class Record:
    failures: int = 0
    locked_until: float = 0.0
    last_failure: float = 0.0
    checking: int = 0  # attempts admitted whose password is being checked now


class LoginThrottle:
    """Failure counts by user name and by address. An attempt is admitted when neither is locked out; while a key
    is past its free failures, only one of its attempts is checked at a time (so concurrent guesses cannot slip
    past a lock-out that the first of them would set)."""

    def __init__(self, max_s: float = LOGIN_BACKOFF_MAX_S, forget_after_s: float = FORGET_AFTER_S):
        self.rules = {"name": Backoff(FREE_FAILURES_PER_NAME, max_s=max_s),
                      "address": Backoff(FREE_FAILURES_PER_ADDRESS, max_s=max_s)}
        self.forget_after_s = forget_after_s
        self.records: dict[tuple[str, str], Record] = {}

    def _keys(self, name: str, address: str) -> list[tuple[str, str]]:
        return [("name", name), ("address", address)]

    def _record(self, key: tuple[str, str], now: float) -> Record:
        """The key's record; one quiet for `forget_after_s` past its lock-out starts afresh."""
        record = self.records.get(key)
        if record is None or (not record.checking and record.locked_until <= now
                              and now - record.last_failure > self.forget_after_s):
            record = self.records[key] = Record()
        return record

    def _wait(self, key: tuple[str, str], now: float) -> float:
        record = self._record(key, now)
        if record.locked_until > now:
            return record.locked_until - now
        if record.checking and record.failures + record.checking >= self.rules[key[0]].free:
            return BUSY_RETRY_S
        return 0.0

    def admit(self, name: str, address: str, now: float) -> float:
        """0 when the attempt may be checked (it is then counted as in progress until `finish`); otherwise the
        seconds to wait before trying again."""
        self._prune(now)
        wait = max(self._wait(key, now) for key in self._keys(name, address))
        if wait == 0:
            for key in self._keys(name, address):
                self.records[key].checking += 1
        return wait

    def finish(self, name: str, address: str, ok: bool, now: float) -> None:
        """Record the outcome of an admitted attempt: a failure counts against the name and the address and may
        lock them out; a success clears the name's record."""
        for key in self._keys(name, address):
            record = self.records.setdefault(key, Record())
            record.checking = max(0, record.checking - 1)
            if not ok:
                record.failures += 1
                record.last_failure = now
                record.locked_until = max(record.locked_until, now + self.rules[key[0]].delay(record.failures))
        if ok:
            self.records.pop(("name", name), None)

    def _prune(self, now: float) -> None:
        """Past MAX_RECORDS, forget the records that have been quiet longest (never one being checked)."""
        if len(self.records) < MAX_RECORDS:
            return
        idle = sorted((r.last_failure, key) for key, r in self.records.items()
                      if not r.checking and r.locked_until <= now)
        for _, key in idle[:len(self.records) - MAX_RECORDS // 2]:
            del self.records[key]
