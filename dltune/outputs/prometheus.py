"""The audit as Prometheus metrics, for node_exporter's textfile collector, in the conventions of
node_exporter and NVIDIA's DCGM exporter so that dltune's series join theirs:

- a check's status is a state set (node_exporter's ``node_systemd_unit_state``): one series per status,
  1 for the current one and 0 for the others, so a change of status is a change of value, not of series;
- each measurement is a metric of its own with its unit in the name, in base units
  (``dltune_gpu_power_watts``, ``dltune_nfs_statfs_seconds``);
- the thing a result is about becomes the labels the exporters use for it: ``gpu`` and ``UUID`` (DCGM
  exporter), ``mountpoint`` (node_exporter's filesystem collector), ``device`` (its nvme collector),
  ``vip`` for a storage VIP; anything else keeps ``subject``;
- ``dltune_build_info`` and the time of the last audit and of the last one without an error.

METRICS_VERSION counts changes of these names and labels: dashboards and rules depend on them, so a
change is made on purpose, with a CHANGELOG entry and docs/metrics.md updated."""

from __future__ import annotations

import platform
import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from dltune import SCHEMA_VERSION, __version__
from dltune.costs.impact import node_loss
from dltune.model import Result, Status

if TYPE_CHECKING:
    from dltune.health_state import HealthReport

METRICS_VERSION = 3
STATUSES: tuple[Status, ...] = (Status.PASS, Status.WARN, Status.FAIL, Status.ERROR, Status.SKIP)
LAST_SUCCESS = "dltune_audit_last_success_timestamp_seconds"

# A measurement's key suffix -> (the base unit's suffix, the factor to that unit). Longest first.
UNITS: tuple[tuple[str, str, float], ...] = (
    ("images_per_s", "images_per_second", 1.0),
    ("_gb_s", "_bytes_per_second", 1e9),
    ("gb_s", "bytes_per_second", 1e9),
    ("_gbps", "_bits_per_second", 1e9),
    ("_percent", "_ratio", 0.01),
    ("_seconds", "_seconds", 1.0),
    ("_bytes", "_bytes", 1.0),
    ("tflops", "flops", 1e12),
    ("_mhz", "_hertz", 1e6),
    ("_ms", "_seconds", 1e-3),
    ("_mb", "_bytes", float(1 << 20)),
    ("_w", "_watts", 1.0),
    ("_c", "_celsius", 1.0),
)
_UUID = re.compile(r"^(?P<gpu>\d+):(?P<UUID>(?:GPU|MIG)-[0-9A-Fa-f-]+)$")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")


def measurement_name(area: str, key: str) -> tuple[str, float]:
    """``("gpu", "power_w")`` -> ``("dltune_gpu_power_watts", 1.0)``: the metric and the factor that
    brings the value to the unit its name says."""
    for suffix, unit, factor in UNITS:
        if key.endswith(suffix):
            return _NOT_NAME.sub("_", f"dltune_{area}_{key[: -len(suffix)]}{unit}"), factor
    return _NOT_NAME.sub("_", f"dltune_{area}_{key}"), 1.0


def entity_labels(subject: str | None) -> dict[str, str]:
    """The labels that name what a result is about, as the exporters beside dltune name it."""
    if subject is None:
        return {}
    if subject.isdigit():
        return {"gpu": subject}
    found = _UUID.match(subject)
    if found:
        return found.groupdict()
    if subject.startswith("/dev/"):
        return {"device": subject.removeprefix("/dev/")}
    if subject.startswith("/"):
        return {"mountpoint": subject}
    if _IPV4.match(subject):
        return {"vip": subject}
    return {"subject": subject}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _series(name: str, labels: dict[str, str], value: float) -> str:
    inside = ",".join(f'{key}="{_escape(str(text))}"' for key, text in labels.items())
    return f"{name}{{{inside}}} {value!r}" if inside else f"{name} {value!r}"


def _family(name: str, help_text: str, samples: list[str], kind: str = "gauge") -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples] if samples else []


PROFILES = ("observe", "drain", "remediate")


def render_health_textfile(report: HealthReport) -> str:
    """The health check's series as a textfile of their own (dltune-health.prom, beside dltune.prom)."""
    return "\n".join(render_health(report)) + "\n"


# long: one family after the other
def render_health(report: HealthReport) -> list[str]:
    """The Slurm health check's own series (`dltune healthcheck`): its profile, the debounce and
    recovery under way, and counters of what it did on this node (kept in the node's history file;
    a counter starts again at 0 only when that file is removed). They give the fleet's history
    (failures per node and check, time between failures, time to repair) to Prometheus's rules."""
    history = report.history
    lines = _family(
        "dltune_health_profile",
        "The health check's profile on this node: 1 for it, 0 for the others.",
        [
            _series("dltune_health_profile", {"profile": p}, 1.0 if report.profile.value == p else 0.0)
            for p in PROFILES
        ],
    )
    lines += _family(
        "dltune_health_drained",
        "1 while dltune keeps this node drained (its own drain), 0 otherwise.",
        [_series("dltune_health_drained", {}, 1.0 if report.drained_by_dltune else 0.0)],
    )
    failing = sorted(history.failing_runs.items())
    lines += _family(
        "dltune_health_failing_runs",
        "Consecutive health-check runs a critical check has failed (debounce).",
        [_series("dltune_health_failing_runs", {"check": c}, float(n)) for c, n in failing],
    )
    needed = [(c, report.pending.get(c, (n, n))[1]) for c, n in failing]
    lines += _family(
        "dltune_health_needed_runs",
        "Consecutive failing runs the check needs before it drains the node.",
        [_series("dltune_health_needed_runs", {"check": c}, float(n)) for c, n in needed],
    )
    if report.recovery is not None:
        runs, runs_needed, seconds, window = report.recovery
        for name, help_text, value in (
            ("dltune_health_recovery_passing_runs", "Runs passed since a transient drain.", runs),
            ("dltune_health_recovery_needed_runs", "Passing runs needed before the resume.", runs_needed),
            ("dltune_health_recovery_passing_seconds", "Seconds passing since a transient drain.", seconds),
            ("dltune_health_recovery_window_seconds", "Seconds passing needed before the resume.", window),
        ):
            lines += _family(name, help_text, [_series(name, {}, float(value))])
    counters = (
        ("dltune_health_drains_total", "Drains of this node by dltune.", float(history.drains)),
        ("dltune_health_resumes_total", "Resumes of this node by dltune.", float(history.resumes_total)),
        (
            "dltune_health_drained_seconds_total",
            "Seconds this node spent drained by dltune, counted when each drain ended.",
            round(history.drained_seconds, 3),
        ),
    )
    for name, help_text, value in counters:
        lines += _family(name, help_text, [_series(name, {}, value)], kind="counter")
    lines += _family(
        "dltune_health_check_drains_total",
        "Drains of this node by dltune that named the check.",
        [
            _series("dltune_health_check_drains_total", {"check": c}, float(n))
            for c, n in sorted(history.check_drains.items())
        ],
        kind="counter",
    )
    for name, help_text, stamp in (
        (
            "dltune_health_last_drain_timestamp_seconds",
            "When dltune last drained the node.",
            history.last_drain,
        ),
        ("dltune_health_last_resume_timestamp_seconds", "When dltune last resumed it.", history.last_resume),
    ):
        if stamp is not None:
            lines += _family(name, help_text + " Unix time.", [_series(name, {}, round(stamp, 3))])
    return lines


def last_success_of(previous: str) -> float | None:
    """The last-success time a previous textfile recorded (carried over an audit with an error)."""
    found = re.search(rf"^{LAST_SUCCESS} (\S+)$", previous, re.M)
    try:
        return float(found.group(1)) if found else None
    except ValueError:
        return None


# long: one family after the other, in the order the module docstring gives
def render_prometheus(
    results: Sequence[Result],
    now: datetime,
    previous_success: float | None = None,
    health: HealthReport | None = None,
) -> str:
    """The textfile for one audit. ``previous_success``: the last success a former textfile recorded,
    kept when this audit had an error (no verdict from some check). ``health``: the Slurm health
    check's run (`dltune healthcheck`), whose series follow the audit's."""
    build = {
        "version": __version__,
        "schema_version": str(SCHEMA_VERSION),
        "metrics_version": str(METRICS_VERSION),
        "python": platform.python_version(),
    }
    lines = _family(
        "dltune_build_info",
        "dltune's version, as the metric's labels; always 1.",
        [_series("dltune_build_info", build, 1.0)],
    )
    status: list[str] = []
    critical: list[str] = []
    acknowledged: list[str] = []
    ack_until: list[str] = []
    measured: dict[str, list[str]] = {}
    costs: list[str] = []
    for r in results:
        # Every text from the host as every output shows it (dltune.text.visible, in to_dict).
        shown = r.to_dict()
        entity = entity_labels(shown["subject"])
        identity = {"check": shown["id"], "area": shown["area"], **entity}
        for s in STATUSES:
            is_it = 1.0 if r.status is s else 0.0
            status.append(_series("dltune_check_status", {**identity, "status": s.value}, is_it))
        critical.append(_series("dltune_check_critical", identity, 1.0 if r.critical else 0.0))
        if r.acknowledged is not None:
            acknowledged.append(_series("dltune_check_acknowledged", identity, 1.0))
            until = r.acknowledged.get("until_timestamp")
            if isinstance(until, (int, float)):
                ack_until.append(
                    _series("dltune_check_acknowledged_until_timestamp_seconds", identity, until)
                )
        impact = shown["impact"] or {}
        if impact.get("basis") in ("measured", "estimated"):
            labels = {**identity, "basis": str(impact["basis"]), "of": str(impact.get("of", ""))}
            costs.append(
                _series(
                    "dltune_finding_lost_gpu_seconds_per_day",
                    labels,
                    float(impact["gpu_hours_per_day"]) * 3600,
                )
            )
        for key, value in sorted(shown["metrics"].items()):
            name, factor = measurement_name(shown["area"], key)
            labels = {"check": shown["id"], **entity}
            measured.setdefault(name, []).append(_series(name, labels, float(value) * factor))
    lines += _family(
        "dltune_check_status", "State of a dltune check's result: 1 for its status, 0 for the others.", status
    )
    lines += _family(
        "dltune_check_critical", "1 where the result is critical (the node should not run jobs).", critical
    )
    lines += _family(
        "dltune_check_acknowledged",
        "1 where an operator acknowledged the result's finding (dltune ack): no drain, no alert.",
        acknowledged,
    )
    lines += _family(
        "dltune_check_acknowledged_until_timestamp_seconds",
        "When the acknowledgement ends (Unix time).",
        ack_until,
    )
    lines += _family(
        "dltune_finding_lost_gpu_seconds_per_day",
        "What a finding costs: GPU-seconds a day lost at the node's use (GPU-hours x 3600; "
        "dltune.costs.impact; basis measured or estimated, of: what the lost fraction is of).",
        costs,
    )
    lines += _family(
        "dltune_node_lost_gpu_seconds_per_day",
        "The node's loss in GPU-seconds a day: each loss once (findings of one scope counted once).",
        [_series("dltune_node_lost_gpu_seconds_per_day", {}, node_loss(r.to_dict() for r in results) * 3600)],
    )
    for name in sorted(measured):
        lines += _family(
            name, "A measurement a dltune check made (the check label names it).", measured[name]
        )
    counts = [
        _series("dltune_checks", {"status": s.value}, float(sum(1 for r in results if r.status is s)))
        for s in STATUSES
    ]
    lines += _family("dltune_checks", "Number of the audit's results by status.", counts)
    succeeded = not any(r.status is Status.ERROR for r in results)
    last_success = now.timestamp() if succeeded else previous_success
    lines += _family(
        "dltune_audit_last_run_timestamp_seconds",
        "When the audit last ran (Unix time).",
        [_series("dltune_audit_last_run_timestamp_seconds", {}, round(now.timestamp(), 3))],
    )
    if last_success is not None:
        lines += _family(
            LAST_SUCCESS,
            "When an audit last ran without an error (every check gave a verdict), Unix time.",
            [_series(LAST_SUCCESS, {}, round(last_success, 3))],
        )
    if health is not None:
        lines += render_health(health)
    return "\n".join(lines) + "\n"
