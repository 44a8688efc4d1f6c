"""The one renderer: human table (rich), JSON envelope. Results go to stdout, logs to stderr."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dltune import SCHEMA_VERSION, __version__
from dltune.model import Result, Status

STATUS_STYLE = {
    Status.PASS: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.SKIP: "dim",
    Status.ERROR: "magenta",
}


def envelope(
    results: Sequence[Result], host: str, now: datetime, valid_for: timedelta = timedelta(hours=1)
) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "host": host,
        "time": now.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "valid_until": (now + valid_for).astimezone(timezone.utc).isoformat(timespec="seconds"),
        "results": [r.to_dict() for r in results],
    }


def render_json(results: Sequence[Result], host: str, now: datetime) -> str:
    return json.dumps(envelope(results, host, now), indent=2, sort_keys=False) + "\n"


def render_human(results: Sequence[Result], console: Console, host: str) -> None:
    table = Table(title=f"dltune audit of {host}", show_lines=False)
    table.add_column("status")
    table.add_column("check")
    table.add_column("subject")
    table.add_column("summary", overflow="fold")
    table.add_column("remedy", overflow="fold")
    for r in results:
        table.add_row(
            Text(r.status.value.upper(), style=STATUS_STYLE[r.status]),
            r.id,
            r.subject or "",
            r.summary,
            r.remedy if r.status not in (Status.PASS, Status.SKIP) and r.remedy else "",
        )
    console.print(table)
    counts = {s: sum(1 for r in results if r.status is s) for s in Status}
    console.print(", ".join(f"{n} {s.value}" for s, n in counts.items() if n) or "no checks ran")
