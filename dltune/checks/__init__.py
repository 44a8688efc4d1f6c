"""Checks: pure judgements of a Snapshot, registered by id (``<area>.<name>``).

A check takes the snapshot (which carries the roles' manifest as ``snapshot.expected``) and returns
one Result or a list of them (one per subject). No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

from dltune.model import AREAS, Result, Status
from dltune.probes import Snapshot

CheckFn: TypeAlias = Callable[[Snapshot], Result | Sequence[Result]]

_REGISTRY: dict[str, CheckFn] = {}


def check(check_id: str) -> Callable[[CheckFn], CheckFn]:
    area = check_id.split(".", 1)[0]
    if area not in AREAS or "." not in check_id:
        raise ValueError(f"check id {check_id!r} must be <area>.<name> with area one of {AREAS}")

    def register(fn: CheckFn) -> CheckFn:
        if check_id in _REGISTRY:
            raise ValueError(f"check {check_id} registered twice")
        _REGISTRY[check_id] = fn
        return fn

    return register


def registered() -> dict[str, CheckFn]:
    return dict(_REGISTRY)


def run_checks(snapshot: Snapshot, areas: Iterable[str] | None = None) -> list[Result]:
    """Run every registered check of the given areas; one that raises becomes an ``error`` result."""
    wanted = set(areas) if areas is not None else None
    results: list[Result] = []
    for check_id, fn in sorted(_REGISTRY.items()):
        if wanted is not None and check_id.split(".", 1)[0] not in wanted:
            continue
        try:
            outcome = fn(snapshot)
        except Exception as exc:  # one broken check must not hide the others
            results.append(
                Result(
                    id=check_id,
                    status=Status.ERROR,
                    summary=f"check raised {type(exc).__name__}: {exc}",
                    remedy="report this as a dltune bug, with the JSON output",
                )
            )
            continue
        results.extend([outcome] if isinstance(outcome, Result) else outcome)
    return results


# Importing the area modules registers their checks.
from dltune.checks import driver, env, gpu, network, nfs, staging, storage, system  # noqa: E402

__all__ = [
    "check",
    "driver",
    "env",
    "gpu",
    "network",
    "nfs",
    "registered",
    "run_checks",
    "staging",
    "storage",
    "system",
]
