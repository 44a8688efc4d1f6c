"""The audit's deadline at its boundaries, with its clock set by hand (start is a monotonic time)."""

from __future__ import annotations

import time

from dltune.probes.watchdog import Deadline


def test_a_deadline_expires_when_its_time_is_spent_and_not_before() -> None:
    now = time.monotonic()
    assert not Deadline(30.0, start=now).expired()
    assert Deadline(30.0, start=now - 30.0).expired()
    assert Deadline(30.0, start=now - 31.0).expired()
    assert not Deadline(None, start=now - 10_000.0).expired(), "no --timeout: never expires"


def test_limit_is_the_lesser_of_a_probe_s_own_timeout_and_what_is_left() -> None:
    now = time.monotonic()
    assert Deadline(30.0, start=now - 28.0).limit(5.0) <= 2.0
    assert Deadline(30.0, start=now).limit(5.0) == 5.0
    assert Deadline(30.0, start=now - 40.0).limit(5.0) == 0.0
    assert Deadline(None).limit(5.0) == 5.0
