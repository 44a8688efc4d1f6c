"""The one renderer: human table (rich), JSON envelope. Results go to stdout, logs to stderr."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dltune import SCHEMA_VERSION, __version__
from dltune.model import Result, Status
from dltune.text import visible

STATUS_STYLE = {
    Status.PASS: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.SKIP: "dim",
    Status.ERROR: "magenta",
}


def console(*, stderr: bool = False, width: int | None = None, soft_wrap: bool = False) -> Console:
    """A console that never reads markup or highlights: the text it prints comes from the host."""
    return Console(stderr=stderr, width=width, soft_wrap=soft_wrap, markup=False, highlight=False)


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


# More results than this of one check with one status (a host with thousands of container bind
# mounts) take one row in the table; JSON and Prometheus keep one result per subject.
GROUP_ABOVE = 5


def _rows(results: Sequence[Result]) -> list[tuple[Result, dict[str, Any], str, str]]:
    """(result, its shown form, subject text, summary text) per table row, grouping large runs of one
    check/status."""
    groups: dict[tuple[str, Status], list[Result]] = {}
    for r in results:
        groups.setdefault((r.id, r.status), []).append(r)
    rows: list[tuple[Result, dict[str, Any], str, str]] = []
    emitted: set[tuple[str, Status]] = set()
    for r in results:
        key = (r.id, r.status)
        members = groups[key]
        if len(members) <= GROUP_ABOVE:
            shown = r.to_dict()
            rows.append((r, shown, shown["subject"] or "", shown["summary"]))
        elif key not in emitted:
            emitted.add(key)
            shown = r.to_dict()
            examples = ", ".join(visible(m.subject or "") for m in members[:3])
            rows.append(
                (
                    r,
                    shown,
                    f"{len(members)} subjects ({examples}, ...)",
                    f"{shown['summary']} (and {len(members) - 1} more)",
                )
            )
    return rows


def render_human(results: Sequence[Result], console: Console, host: str, what: str = "audit") -> None:
    """Every cell is plain Text: data such as a mount point /data/[bold]x is never read as markup."""
    table = Table(title=Text(f"dltune {what} of {visible(host)}"), show_lines=False)
    table.add_column("status")
    table.add_column("check")
    table.add_column("subject")
    table.add_column("summary", overflow="fold")
    table.add_column("remedy", overflow="fold")
    for r, shown, subject, summary in _rows(results):
        table.add_row(
            Text(r.status.value.upper(), style=STATUS_STYLE[r.status]),
            Text(r.id),
            Text(subject),
            Text(summary),
            Text(shown["remedy"] if r.status not in (Status.PASS, Status.SKIP) and shown["remedy"] else ""),
        )
    console.print(table)
    counts = {s: sum(1 for r in results if r.status is s) for s in Status}
    console.print(Text(", ".join(f"{n} {s.value}" for s, n in counts.items() if n) or "no checks ran"))


# --- Prometheus textfile (node_exporter's textfile collector) and Ansible local facts ------------


def _label(value: str | None) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prometheus(results: Sequence[Result], now: datetime) -> str:
    """One gauge per check and subject (1 for its status, labelled), plus each check's numbers."""
    lines = [
        "# HELP dltune_check_status Result of a dltune audit check: 1, labelled with its status.",
        "# TYPE dltune_check_status gauge",
    ]
    shown = [r.to_dict() for r in results]
    for r in shown:
        lines.append(
            f'dltune_check_status{{id="{_label(r["id"])}",area="{_label(r["area"])}",'
            f'subject="{_label(r["subject"])}",status="{r["status"]}",'
            f'critical="{str(r["critical"]).lower()}"}} 1'
        )
    lines += [
        "# HELP dltune_check_metric A number a dltune check measured (see the metric label).",
        "# TYPE dltune_check_metric gauge",
    ]
    for r in shown:
        for name, value in sorted(r["metrics"].items()):
            lines.append(
                f'dltune_check_metric{{id="{_label(r["id"])}",subject="{_label(r["subject"])}",'
                f'metric="{_label(name)}"}} {float(value)!r}'
            )
    counts = {s: sum(1 for r in results if r.status is s) for s in Status}
    lines += [
        "# HELP dltune_checks Number of dltune check results by status.",
        "# TYPE dltune_checks gauge",
        *(f'dltune_checks{{status="{s.value}"}} {n}' for s, n in counts.items()),
        "# HELP dltune_audit_timestamp_seconds When the audit ran.",
        "# TYPE dltune_audit_timestamp_seconds gauge",
        f"dltune_audit_timestamp_seconds {now.timestamp():.3f}",
    ]
    return "\n".join(lines) + "\n"


def render_facts(results: Sequence[Result], host: str, now: datetime) -> str:
    """Ansible local facts (``ansible_local.dltune``): the envelope plus a summary playbooks can test."""
    doc = envelope(results, host, now)
    doc["summary"] = {
        "counts": {s.value: sum(1 for r in results if r.status is s) for s in Status},
        "failed": sorted({r.id for r in results if r.status is Status.FAIL}),
        "tuned": not any(r.status in (Status.FAIL, Status.ERROR) for r in results),
    }
    return json.dumps(doc, indent=2) + "\n"


def write_atomically(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    """Readers (node_exporter, Ansible) never see a half-written file: write a sibling, then rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".dltune.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
