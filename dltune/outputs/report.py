"""The node's machine renderers: the JSON envelope and the Ansible facts, and the one status order and
palette every output uses (the human table: dltune.outputs.human; Prometheus: dltune.outputs.prometheus;
the fleet: dltune.fleet.cluster). Results go to stdout, logs to stderr."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from dltune import SCHEMA_VERSION, __version__
from dltune.model import Result, Status
from dltune.text import visible

# One order and one palette for every output (node table, cluster summary, HTML, Prometheus): findings
# first, worst first. A fail is a judgement that something is wrong; an error, that it could not judge.
STATUS_ORDER: tuple[Status, ...] = (Status.FAIL, Status.ERROR, Status.WARN, Status.PASS, Status.SKIP)
STATUS_STYLE = {
    Status.FAIL: "bold red",
    Status.ERROR: "magenta",
    Status.WARN: "yellow",
    Status.PASS: "green",
    Status.SKIP: "dim",
}
STATUS_COLOUR = {  # HTML
    "fail": "#c62828",
    "error": "#6a1b9a",
    "warn": "#f9a825",
    "pass": "#2e7d32",
    "skip": "#9e9e9e",
    "unreachable": "#000000",
}
FINDINGS = (Status.FAIL, Status.ERROR, Status.WARN)
_RANK = {status.value: rank for rank, status in enumerate(STATUS_ORDER)}


def status_rank(status: str | Status) -> int:
    """Sort key: 0 for the worst status; an unknown one sorts with the worst."""
    return _RANK.get(str(status), 0)


def worst(statuses: Iterable[str | Status]) -> str | None:
    found = {str(s) for s in statuses}
    return next((s.value for s in STATUS_ORDER if s.value in found), None)


def by_status(results: Sequence[Result]) -> list[Result]:
    """Findings first, worst first; checks keep their order within a status."""
    return sorted(results, key=lambda r: status_rank(r.status))


def envelope(
    results: Sequence[Result], host: str, now: datetime, valid_for: timedelta = timedelta(hours=1)
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "host": visible(host),
        "time": now.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "valid_until": (now + valid_for).astimezone(timezone.utc).isoformat(timespec="seconds"),
        "results": [r.to_dict() for r in results],
    }


def render_json(results: Sequence[Result], host: str, now: datetime) -> str:
    """The envelope with one result per line: valid JSON, easy to grep, and written by one call of
    json's C encoder (indent= takes its pure-Python path: 50,000 results took seconds)."""
    text = json.dumps(envelope(results, host, now))
    # Inside a JSON string a quote is escaped, so '}, {"id": ' only ever joins two results.
    return (
        text.replace('"results": [{"id": ', '"results": [\n{"id": ').replace('}, {"id": ', '},\n{"id": ')
        + "\n"
    )


# --- Ansible local facts (the Prometheus textfile: dltune.outputs.prometheus) ------------------------------


def render_facts(
    results: Sequence[Result], host: str, now: datetime, roles_applied: Sequence[str] = ()
) -> str:
    """Ansible local facts (``ansible_local.dltune``): the envelope plus a summary playbooks can test.
    ``passing``: no fail and no error; ``tuned``: passing on a node where at least one role recorded
    what it applied (``roles_applied``, the manifest fragments), so a node no role ever touched is
    never called tuned."""
    doc = envelope(results, host, now)
    passing = not any(r.status in (Status.FAIL, Status.ERROR) for r in results)
    doc["summary"] = {
        "counts": {s.value: sum(1 for r in results if r.status is s) for s in Status},
        "failed": sorted({r.id for r in results if r.status is Status.FAIL}),
        "passing": passing,
        "roles_applied": sorted(roles_applied),
        "tuned": passing and bool(roles_applied),
    }
    return json.dumps(doc, indent=2) + "\n"
