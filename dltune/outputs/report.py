"""The node's renderers: human table (rich), JSON envelope, Prometheus, Ansible facts (cluster.py
renders the fleet). Results go to stdout, logs to stderr."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Span, Text

from dltune import SCHEMA_VERSION, __version__
from dltune.model import Result, Status, counted
from dltune.text import terminal_safe, visible

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


class HumanConsole(Console):
    """The console every human output of dltune is written through (``console``): what it prints passes
    ``terminal_safe`` whatever it is, so no control or format character from the host reaches a
    terminal even where a renderer forgot ``visible``. The guard sits here, at the sink, because only
    here is all text known to be text: rich adds its own escape sequences (colours, the progress bar's
    cursor moves) after rendering, as styles and control segments this never touches. A ``Text`` is
    made safe before it is wrapped, every other segment as it is rendered; both keep dltune's own
    newlines, and ``visible``'s output passes unchanged. (Rich itself drops BEL, backspace, VT, FF and
    CR from a ``Text``.) The guard is the last line, not the rule: a table measures its columns on the
    text before this, so a cell nobody escaped may be cut short in a narrow column, and a newline in it
    is kept; renderers escape data with ``visible`` where they format it."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        if isinstance(renderable, Text) and not renderable.plain.isprintable():
            renderable = _safe_text(renderable)
        elif isinstance(renderable, str):
            renderable = terminal_safe(renderable)
        for segment in super().render(renderable, options):  # nested renderables come back through here
            if segment.control is None and not segment.text.isprintable() and segment.text != "\n":
                segment = segment._replace(text=terminal_safe(segment.text))
            yield segment


def _safe_text(text: Text) -> Text:
    """``text`` through ``terminal_safe``, its styled spans moved with the characters they cover."""
    if terminal_safe(text.plain) == text.plain:  # dltune's own newlines only
        return text
    pieces = [terminal_safe(ch) for ch in text.plain]
    starts = [0]
    for piece in pieces:
        starts.append(starts[-1] + len(piece))
    end = len(pieces)
    safe = text.blank_copy("".join(pieces))
    safe.spans = [Span(starts[min(s.start, end)], starts[min(s.end, end)], s.style) for s in text.spans]
    return safe


def console(*, stderr: bool = False, width: int | None = None, soft_wrap: bool = False) -> Console:
    """A console that never reads markup or highlights: the text it prints comes from the host, and it
    writes no control character from there (``HumanConsole``)."""
    return HumanConsole(stderr=stderr, width=width, soft_wrap=soft_wrap, markup=False, highlight=False)


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
            others = ", ".join(table_subject(visible(m.subject or "")) for m in members[1:4])
            rows.append(
                (
                    r,
                    shown,
                    f"{len(members)} subjects",
                    f"{shown['summary']} (and {len(members) - 1} more: {others}, ...)",
                )
            )
    return rows


_GPU_SUBJECT = re.compile(r"^(\d+):(?:GPU|MIG)-[0-9A-Fa-f-]+$")


def table_subject(subject: str) -> str:
    """A subject as the table shows it: a GPU as "GPU 3" (its UUID takes a third of the width on an
    8-GPU node; JSON and Prometheus keep it)."""
    found = _GPU_SUBJECT.match(subject)
    return f"GPU {found.group(1)}" if found else subject


def render_human(
    results: Sequence[Result],
    console: Console,
    host: str,
    what: str = "audit",
    show_all: bool = False,
    asked: frozenset[str] = frozenset(),
) -> None:
    """Findings first (fail, error, warn); passes and skips folded into the one closing line
    (``summary_line``) unless ``show_all``, except the checks in ``asked`` (what the user asked for
    by name: `dltune check`'s bench, `--dcgm`), whose reason is always a row. The remedy sits under
    its summary, so the table reads at 100 columns. Every cell is plain Text: data such as a mount
    point /data/[bold]x is never read as markup."""
    folded = () if show_all else (Status.PASS, Status.SKIP)
    shown = by_status([r for r in results if r.status not in folded or r.id in asked])
    table = Table(title=Text(f"dltune {what} of {visible(host)}"), show_lines=False, title_justify="left")
    table.add_column("status", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("subject", overflow="fold", max_width=28)
    table.add_column("summary", overflow="fold", ratio=1)
    for r, as_dict, subject, summary in _rows(shown):
        cell = Text(summary)
        if r.status in FINDINGS and as_dict["remedy"]:
            cell.append("\nfix: " + as_dict["remedy"], style="italic")
        if as_dict["impact"] and as_dict["impact"].get("basis") in PRICED:
            cell.append("\ncost: " + cost_text(as_dict["impact"]), style="italic")
        table.add_row(
            Text(r.status.value.upper(), style=STATUS_STYLE[r.status]),
            Text(r.id),
            Text(table_subject(subject)),
            cell,
        )
    if shown:
        console.print(table)
    console.print(Text(summary_line(results, host, what, folded=len(shown) < len(results))))


# How the one summary line counts each status, in the table's order.
_COUNTED = {
    Status.FAIL: ("failed", "failed"),
    Status.ERROR: ("error", "errors"),
    Status.WARN: ("warning", "warnings"),
    Status.PASS: ("passed", "passed"),
    Status.SKIP: ("skipped", "skipped"),
}


def summary_line(results: Sequence[Result], host: str, what: str = "audit", folded: bool = False) -> str:
    """The table's one closing line: every result counted by status in the table's order ("1 failed,
    2 warnings, 30 passed, 4 skipped"), opened by "no findings" when nothing needs a look, and
    naming `--all` when rows were folded into it."""
    counts = [(s, sum(1 for r in results if r.status is s)) for s in STATUS_ORDER]
    said = ", ".join(counted(n, *_COUNTED[s]) for s, n in counts if n)
    if not said:
        return f"dltune {what} of {visible(host)}: no checks ran"
    if not any(n for s, n in counts if s in FINDINGS):
        said = f"dltune {what} of {visible(host)}: no findings; {said}"
    return said + (f": `dltune {what} --all` lists every check" if folded else "")


PRICED = ("measured", "estimated")


def cost_text(impact: Mapping[str, Any]) -> str:
    """A price as one line: "4.8 GPU-hours a day (20% of matmul on 1 GPU, measured)", or why none."""
    if impact.get("basis") not in PRICED:
        return f"not priced: {impact.get('why', 'no method')}"
    fraction, gpus = impact.get("fraction", 0), impact.get("gpus", 0)
    return (
        f"{impact.get('gpu_hours_per_day', 0):g} GPU-hours a day ({fraction:.1%} of {impact.get('of')} on "
        f"{gpus} GPU{'s' if gpus != 1 else ''}, {impact['basis']})"
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
