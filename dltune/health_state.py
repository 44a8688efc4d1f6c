"""What the Slurm health check keeps and tells about one node, as plain data: its profile, its history
across runs (the debounce's and the recovery's runs, the counters of drains and resumes) and the
report of one run for the metrics: the contract between the health check (dltune.fleet.slurm_health,
which decides with it) and the metrics (dltune.outputs.prometheus, which renders it)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any

from dltune.records import field, record, replace

# The health check's defaults, here beside its other plain data: the options of `dltune audit` and
# `dltune healthcheck` show them without loading the health check itself (it costs every audit's
# start-up otherwise).
DEFAULT_DRAIN_LIMIT = "10%"
DEFAULT_FLAP_COUNT = 3
DEFAULT_FLAP_WINDOW_S = 24 * 3600.0
DEFAULT_HISTORY_FILE = "/var/lib/dltune/slurm-health.json"
DEFAULT_TRANSIENT_RUNS = 3
DEFAULT_RECOVERY_RUNS = 3
DEFAULT_RECOVERY_WINDOW_S = 15 * 60.0


class Profile(enum.Enum):
    """What the health check may do on a node group: sites roll it out in stages."""

    OBSERVE = "observe"  # judge, report and export metrics; never drain or resume
    DRAIN = "drain"  # drain and resume within the bounds
    REMEDIATE = "remediate"  # drain, and playbooks/remediate.yml may act on the node


@record(frozen=True)
class History:
    """What dltune saw and did on this node, kept across runs (the node's history file)."""

    resumes: tuple[float, ...] = ()  # when dltune resumed the node lately (epoch seconds): flap damping
    drained_reason: str = ""  # the reason dltune last drained it with, while it should still be drained
    # Consecutive runs each critical check has failed (debounce), and runs passed since the last fail.
    failing_runs: Mapping[str, int] = field(default_factory=dict)
    passing_runs: int = 0
    passing_since: float | None = None
    # Counters for the fleet's history (Prometheus): never reset by dltune.
    drains: int = 0
    check_drains: Mapping[str, int] = field(default_factory=dict)
    resumes_total: int = 0
    drained_seconds: float = 0.0
    last_drain: float | None = None
    last_resume: float | None = None
    drained_since: float | None = None  # the drain under way, whose time is counted when it ends

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 2,
            "resumes": list(self.resumes),
            "drained_reason": self.drained_reason,
            "failing_runs": dict(self.failing_runs),
            "passing_runs": self.passing_runs,
            "passing_since": self.passing_since,
            "drains": self.drains,
            "check_drains": dict(self.check_drains),
            "resumes_total": self.resumes_total,
            "drained_seconds": self.drained_seconds,
            "last_drain": self.last_drain,
            "last_resume": self.last_resume,
            "drained_since": self.drained_since,
        }

    @classmethod
    def from_json(cls, data: Any) -> History:
        """Schema 1 (resumes and drained_reason only) and 2 read alike."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        resumes = data.get("resumes", [])
        reason = data.get("drained_reason", "")
        if not isinstance(resumes, list) or not all(_is_number(t) for t in resumes):
            raise ValueError("resumes is not a list of times")
        if not isinstance(reason, str):
            raise ValueError("drained_reason is not text")
        numbers: dict[str, float] = {
            key: data[key]
            for key in ("passing_runs", "drains", "resumes_total", "drained_seconds")
            if data.get(key) is not None
        }
        stamps = {
            key: data.get(key) for key in ("passing_since", "last_drain", "last_resume", "drained_since")
        }
        if not all(_is_number(v) and v >= 0 for v in numbers.values()):
            raise ValueError(f"one of {', '.join(numbers)} is not a count")
        if not all(v is None or _is_number(v) for v in stamps.values()):
            raise ValueError(f"one of {', '.join(stamps)} is not a time")
        counts = {key: _counts(data.get(key, {}), key) for key in ("failing_runs", "check_drains")}
        return cls(
            tuple(float(t) for t in resumes[-100:]),
            reason,
            counts["failing_runs"],
            int(numbers.get("passing_runs", 0)),
            None if stamps["passing_since"] is None else float(stamps["passing_since"]),
            int(numbers.get("drains", 0)),
            counts["check_drains"],
            int(numbers.get("resumes_total", 0)),
            float(numbers.get("drained_seconds", 0.0)),
            None if stamps["last_drain"] is None else float(stamps["last_drain"]),
            None if stamps["last_resume"] is None else float(stamps["last_resume"]),
            None if stamps["drained_since"] is None else float(stamps["drained_since"]),
        )

    def observed(self, failing: Sequence[str], now: float) -> History:
        """This run seen: each failing check's run of fails one longer (the others' ended), the passing
        run one longer when nothing critical fails."""
        runs = {c: self.failing_runs.get(c, 0) + 1 for c in failing}
        if failing:
            return replace(self, failing_runs=runs, passing_runs=0, passing_since=None)
        return replace(
            self,
            failing_runs={},
            passing_runs=self.passing_runs + 1,
            passing_since=self.passing_since if self.passing_since is not None else now,
        )

    def drained(self, checks: Sequence[str], reason: str, now: float) -> History:
        """A new drain by dltune, counted."""
        per_check = dict(self.check_drains)
        for check_id in checks:
            per_check[check_id] = per_check.get(check_id, 0) + 1
        return replace(
            self,
            drained_reason=reason,
            drains=self.drains + 1,
            check_drains=per_check,
            last_drain=now,
            drained_since=now,
        )

    def ended_drain(self, now: float, by_dltune: bool) -> History:
        """The drain ended now (dltune resumed the node, or someone else did): its time counted."""
        spent = max(0.0, now - self.drained_since) if self.drained_since is not None else 0.0
        return replace(
            self,
            drained_reason="",
            resumes=(*self.resumes, now) if by_dltune else (),
            resumes_total=self.resumes_total + (1 if by_dltune else 0),
            last_resume=now if by_dltune else self.last_resume,
            drained_seconds=self.drained_seconds + spent,
            drained_since=None,
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _counts(value: Any, key: str) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in value.items()
    ):
        raise ValueError(f"{key} is not a map of check to count")
    return dict(list(value.items())[:500])


@record(frozen=True)
class HealthReport:
    """What one health-check run knows beyond the audit, for the metrics (dltune.outputs.prometheus)."""

    profile: Profile
    drained_by_dltune: bool
    pending: Mapping[str, tuple[int, int]]  # check -> (failing runs, runs needed) before a drain
    recovery: tuple[int, int, float, float] | None  # passing runs, runs needed, seconds, window
    history: History
