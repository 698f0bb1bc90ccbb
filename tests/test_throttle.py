"""Login throttling as bookkeeping, on a clock driven by hand: free failures, the doubling lock-out and its cap,
per name and per address, a success clearing the name, concurrent attempts, forgetting quiet keys."""

import pytest

from app.door.throttle import (
    BUSY_RETRY_S,
    FORGET_AFTER_S,
    FREE_FAILURES_PER_ADDRESS,
    FREE_FAILURES_PER_NAME,
    Backoff,
    LoginThrottle,
)


def test_the_backoff_doubles_from_the_fifth_failure_up_to_the_cap():
    backoff = Backoff(free=5, base_s=1.0, max_s=120.0)
    assert [backoff.delay(n) for n in range(1, 14)] == [0, 0, 0, 0, 1, 2, 4, 8, 16, 32, 64, 120, 120]
    assert Backoff(free=2, base_s=0.5, max_s=3).delay(10**6) == 3  # no overflow far past the cap
    assert (FREE_FAILURES_PER_NAME, FREE_FAILURES_PER_ADDRESS) == (5, 20)


def fail(throttle: LoginThrottle, name: str, address: str, now: float) -> float:
    """One attempt with a wrong password: 0 when it was checked (and failed), else the wait it was refused with."""
    wait = throttle.admit(name, address, now)
    if wait == 0:
        throttle.finish(name, address, False, now)
    return wait


def test_wrong_passwords_for_one_name_are_refused_until_the_lockout_passes():
    throttle, now, refused = LoginThrottle(), 1000.0, []
    for _ in range(5):
        assert fail(throttle, "owner", "10.0.0.9", now) == 0
    assert throttle.admit("owner", "10.0.0.9", now) == pytest.approx(1.0)  # the 5th failure locked it for 1 s
    assert throttle.admit("owner", "10.0.0.66", now + 0.5) == pytest.approx(0.5)  # from any address
    for lock in (1, 2, 4, 8, 16, 32, 64, 120, 120):
        now += lock  # just when the lock-out ends, one more wrong password
        refused.append(throttle.admit("owner", "10.0.0.9", now - 0.01) > 0)
        assert fail(throttle, "owner", "10.0.0.9", now) == 0
    assert refused == [True] * 9
    assert throttle.admit("owner", "10.0.0.9", now + 119) == pytest.approx(1.0)
    assert throttle.admit("alice", "10.0.0.7", now) == 0  # another name, another address: untouched
    throttle.finish("alice", "10.0.0.7", True, now)
    assert throttle.admit("owner", "10.0.0.9", now + 120) == 0  # the right password after the lock-out...
    throttle.finish("owner", "10.0.0.9", True, now + 120)
    assert fail(throttle, "owner", "10.0.0.9", now + 121) == 0  # ...clears the name: four more free failures
    assert throttle.records[("name", "owner")].failures == 1


def test_many_names_from_one_address_lock_the_address():
    throttle, now = LoginThrottle(max_s=30), 50.0
    for i in range(20):
        assert fail(throttle, f"user{i}", "10.0.0.66", now) == 0  # a spray: one guess per name
    assert throttle.admit("user99", "10.0.0.66", now) == pytest.approx(1.0)
    assert throttle.admit("user99", "10.0.0.7", now) == 0  # the name is fine from elsewhere
    throttle.finish("user99", "10.0.0.7", True, now)
    for _ in range(10):
        now += 30
        fail(throttle, "x", "10.0.0.66", now)
    assert throttle.admit("y", "10.0.0.66", now) == pytest.approx(30)  # capped at max_s


def test_concurrent_guesses_past_the_free_failures_are_checked_one_at_a_time():
    throttle, now = LoginThrottle(), 0.0
    for _ in range(3):
        fail(throttle, "owner", "a", now)
    assert throttle.admit("owner", "b", now) == 0  # the 4th and 5th may be checked together...
    assert throttle.admit("owner", "c", now) == 0
    assert throttle.admit("owner", "d", now) == BUSY_RETRY_S  # ...a 6th waits for them
    throttle.finish("owner", "b", False, now)
    throttle.finish("owner", "c", False, now)
    assert throttle.admit("owner", "d", now) == pytest.approx(1.0)  # and meets the lock-out they set


def test_a_quiet_name_starts_afresh():
    throttle, now = LoginThrottle(), 0.0
    for _ in range(4):
        fail(throttle, "alice", "a", now)
    now += FORGET_AFTER_S + 1
    for _ in range(4):
        assert fail(throttle, "alice", "a", now) == 0
    assert throttle.admit("alice", "a", now) == 0
