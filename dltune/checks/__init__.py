"""Checks: pure judgements of a Snapshot, registered by id (``<area>.<name>``).

A check takes the snapshot (which carries the roles' manifest as ``snapshot.expected``) and returns
one Result or a list of them (one per subject). No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeAlias

from dltune.model import AREAS, FailureClass, Result, Status
from dltune.snapshot import Snapshot

CheckFn: TypeAlias = Callable[[Snapshot], Result | Sequence[Result]]

_REGISTRY: dict[str, CheckFn] = {}
_NEEDS: dict[str, tuple[str, ...]] = {}
_FAILURE: dict[str, FailureClass] = {}
# Inputs a check may declare: the host's tables, by path, and roles' manifest fragments.
TABLES = {"mountinfo": "/proc/self/mountinfo", "fstab": "/etc/fstab"}
MANIFEST_PREFIX = "manifest:"


def counter_rises(
    snap: Snapshot, check_id: str, subject: str, now: Mapping[str, int], reset_is_new: bool = False
) -> dict[str, int]:
    """How much each counter rose since the previous audit (``--previous``). A counter below its previous
    value was reset since (a reboot, a driver reload): with ``reset_is_new`` all it holds now came after
    the previous audit (errors counted since boot); without, it is left out (link counters, where the
    reboot itself counts events). A check records its counters as ``evidence["counters"]`` for the next
    audit to read."""
    before = snap.previous.get(f"{check_id}|{subject}", {})
    rises = {}
    for name, value in now.items():
        if name not in before:
            continue
        if value >= before[name]:
            rises[name] = value - before[name]
        elif reset_is_new:
            rises[name] = value
    return {name: rise for name, rise in rises.items() if rise > 0}


def check(
    check_id: str, needs: Sequence[str] = (), failure: FailureClass = FailureClass.HARD
) -> Callable[[CheckFn], CheckFn]:
    """Register a check. ``needs`` names what it cannot judge without (``mountinfo``, ``fstab``,
    ``manifest:<role>``): when one is unreadable or corrupt, the check is not run and fails naming
    the cause, so a broken input never reads as "nothing configured" or "nothing wrong".
    ``failure`` says how the health check treats its critical fail: HARD drains at the first one,
    TRANSIENT only after several consecutive runs (a condition that often clears by itself)."""
    area = check_id.split(".", 1)[0]
    if area not in AREAS or "." not in check_id:
        raise ValueError(f"check id {check_id!r} must be <area>.<name> with area one of {AREAS}")
    for need in needs:
        if need not in TABLES and not need.startswith(MANIFEST_PREFIX):
            raise ValueError(f"check {check_id}: unknown input {need!r}")

    def register(fn: CheckFn) -> CheckFn:
        if check_id in _REGISTRY:
            raise ValueError(f"check {check_id} registered twice")
        _REGISTRY[check_id] = fn
        _NEEDS[check_id] = tuple(needs)
        _FAILURE[check_id] = failure
        return fn

    return register


def blockers(snapshot: Snapshot, needs: Sequence[str]) -> dict[str, str]:
    """The inputs among ``needs`` that could not be used, with why."""
    found: dict[str, str] = {}
    for need in needs:
        if need in TABLES:
            path = TABLES[need]
            if path in snapshot.errors:
                found[path] = snapshot.errors[path]
            continue
        role = need.removeprefix(MANIFEST_PREFIX)
        problem = snapshot.manifest_problems.get(role) or snapshot.manifest_problems.get("*")
        if problem:
            found[f"{snapshot.manifest_dir}/{role}.json"] = problem
    return found


def _cannot_judge(check_id: str, found: dict[str, str]) -> Result:
    return Result(
        id=check_id,
        status=Status.FAIL,
        summary=f"cannot judge: {'; '.join(found.values())}",
        evidence={"unusable_inputs": found},
        remedy="repair or remove the file named (a role's fragment: apply that role again); "
        "dltune never judges without it",
    )


def registered() -> dict[str, CheckFn]:
    return dict(_REGISTRY)


def failure_classes() -> dict[str, FailureClass]:
    """Each registered check's failure class (the health check's debounce reads it)."""
    return dict(_FAILURE)


def run_checks(snapshot: Snapshot, areas: Iterable[str] | None = None) -> list[Result]:
    """Run every registered check of the given areas; one that raises becomes an ``error`` result."""
    wanted = set(areas) if areas is not None else None
    results: list[Result] = []
    for check_id, fn in sorted(_REGISTRY.items()):
        if wanted is not None and check_id.split(".", 1)[0] not in wanted:
            continue
        found = blockers(snapshot, _NEEDS.get(check_id, ()))
        if found:
            results.append(_cannot_judge(check_id, found))
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
from dltune.checks import dcgm, driver, env, fabric, gpu, job_scratch, network, nfs, storage, system  # noqa: E402

__all__ = [
    "check",
    "dcgm",
    "driver",
    "env",
    "fabric",
    "failure_classes",
    "gpu",
    "job_scratch",
    "network",
    "nfs",
    "registered",
    "run_checks",
    "storage",
    "system",
]
