"""The node's human output: the findings table and its one summary line (rich), and the one console
factory every command writes through, which escapes at the sink whatever a caller forgot
(``HumanConsole``). Imported only where a person reads the output: JSON, the facts and Prometheus
(dltune.outputs.report, dltune.outputs.prometheus) never load rich."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Span, Text

from dltune.model import Result, Status, counted
from dltune.outputs.report import FINDINGS, STATUS_ORDER, STATUS_STYLE, by_status
from dltune.text import terminal_safe, visible


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
