"""`dltune report`: many nodes' audit (and bench) JSON envelopes merged into one answer — which nodes
are tuned and perform, which are not and why. A node that could not be audited stays in the report
as such (``unreachable`` or ``crashed``), never dropped.

Renders a terminal summary (nodes x areas), a merged JSON file and one self-contained HTML page:
a nodes x checks matrix coloured by the worst status, every finding with its evidence and remedy,
and bar charts (inline SVG) of the bench figures per node and GPU, so an outlier stands out.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dltune import SCHEMA_VERSION, __version__
from dltune.model import AREAS

ORDER = ("error", "fail", "warn", "pass", "skip")  # worst first
COLOURS = {
    "pass": "#2e7d32",
    "warn": "#f9a825",
    "fail": "#c62828",
    "error": "#6a1b9a",
    "skip": "#9e9e9e",
    "unreachable": "#000000",
}
RICH = {"pass": "green", "warn": "yellow", "fail": "bold red", "error": "magenta", "skip": "dim"}


@dataclass
class NodeReport:
    host: str
    results: list[dict[str, Any]] = field(default_factory=list)
    problem: str | None = None  # "unreachable: ..." or "crashed: ..." when no results came back
    sources: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.problem is None and not any(r["status"] in ("fail", "error") for r in self.results)


def worst(statuses: Iterable[str]) -> str | None:
    found = set(statuses)
    return next((s for s in ORDER if s in found), None)


def node_name(file: Path) -> str:
    """The node a report file belongs to: its name without .audit.json / .bench.json / .json (the name
    the inventory knows; containers and clones often share one hostname). A multi-node bench
    (<node>.multinode.bench.json) belongs to the node that led it: its results name every node."""
    for suffix in (".audit.json", ".multinode.bench.json", ".bench.json", ".json"):
        if file.name.endswith(suffix):
            return file.name[: -len(suffix)]
    return file.name


def load(paths: Sequence[Path]) -> list[NodeReport]:
    """Envelopes from files or directories of *.json; a node's files (<node>.audit.json and
    <node>.bench.json) merge. A file of the form {"problem": "..."} marks a node that could not be audited."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.json")) if path.is_dir() else [path]
    nodes: dict[str, NodeReport] = {}
    for file in files:
        try:
            data = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            host = node_name(file)
            nodes.setdefault(
                host, NodeReport(host)
            ).problem = f"crashed: unreadable report {file.name} ({exc})"
            continue
        if isinstance(data, dict) and "nodes" in data and "results" not in data:
            continue  # an earlier merged report (cluster.json) in the same directory, not a node
        host = node_name(file)
        node = nodes.setdefault(host, NodeReport(host))
        node.sources.append(file.name)
        if "results" in data:
            node.results += list(data["results"])
        else:
            node.problem = str(data.get("problem") or "crashed: no results in the report")
    return [nodes[h] for h in sorted(nodes)]


def merged_json(nodes: Sequence[NodeReport], generated: str) -> str:
    return (
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "tool_version": __version__,
                "time": generated,
                "nodes": [
                    {"host": n.host, "healthy": n.healthy, "problem": n.problem, "results": n.results}
                    for n in nodes
                ],
            },
            indent=2,
        )
        + "\n"
    )


def render_summary(nodes: Sequence[NodeReport], console: Console) -> None:
    areas = [a for a in AREAS if any(r["area"] == a for n in nodes for r in n.results)]
    table = Table(
        title=f"dltune report: {len(nodes)} node(s), {sum(n.healthy for n in nodes)} healthy",
        title_justify="left",
    )
    table.add_column("node")
    for area in areas:
        table.add_column(area)
    table.add_column("findings", overflow="fold")
    for node in nodes:
        if node.problem:
            table.add_row(Text(node.host), *["" for _ in areas], Text(node.problem.upper(), style="bold red"))
            continue
        cells = []
        for area in areas:
            status = worst(r["status"] for r in node.results if r["area"] == area)
            cells.append(Text(status or "", style=RICH.get(status or "", "")))
        findings = [
            f"{r['status'].upper()} {r['id']}" + (f" [{r['subject']}]" if r.get("subject") else "")
            for r in node.results
            if r["status"] in ("fail", "error")
        ]
        table.add_row(Text(node.host), *cells, Text("; ".join(findings)))
    console.print(table)


def _svg_bars(title: str, bars: Sequence[tuple[str, float]], unit: str) -> str:
    if not bars:
        return ""
    top = max(v for _, v in bars) or 1.0
    row, width, label_w = 22, 420, 260
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + width + 90}" '
        f'height="{row * len(bars) + 30}" role="img"><title>{html.escape(title)}</title>'
    ]
    for i, (label, value) in enumerate(bars):
        y = 24 + i * row
        w = max(1.0, value / top * width)
        # Below 85% of the best bar: the outlier colour.
        colour = COLOURS["pass"] if value >= 0.85 * top else COLOURS["fail"]
        parts.append(
            f'<text x="0" y="{y + 14}" font-size="12">{html.escape(label)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{row - 6}" fill="{colour}"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 14}" font-size="12">{value:.3g} {unit}</text>'
        )
    parts.append(f'<text x="0" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text></svg>')
    return "".join(parts)


def bench_charts(nodes: Sequence[NodeReport]) -> list[str]:
    matmul: dict[str, list[tuple[str, float]]] = {}
    training: list[tuple[str, float]] = []
    for node in nodes:
        for r in node.results:
            if r["id"] == "bench.matmul" and "tflops" in r.get("metrics", {}):
                dtype = str(r.get("subject", "")).rsplit(":", 1)[-1]
                device = str(r.get("subject", "")).rsplit(":", 1)[0]
                matmul.setdefault(dtype, []).append((f"{node.host} {device}", float(r["metrics"]["tflops"])))
            elif r["id"] == "bench.train_synthetic" and "images_per_s" in r.get("metrics", {}):
                training.append((node.host, float(r["metrics"]["images_per_s"])))
    charts = [_svg_bars(f"matmul {dtype} per GPU", bars, "TFLOPS") for dtype, bars in sorted(matmul.items())]
    charts.append(_svg_bars("training throughput (synthetic data) per node", training, "images/s"))
    return [c for c in charts if c]


def render_html(nodes: Sequence[NodeReport], generated: str) -> str:
    check_ids = sorted({r["id"] for n in nodes for r in n.results})
    esc = html.escape
    head = "".join(f'<th class="v">{esc(c)}</th>' for c in check_ids)
    rows = []
    for node in nodes:
        if node.problem:
            rows.append(
                f'<tr><th>{esc(node.host)}</th><td colspan="{len(check_ids)}" class="unreachable">'
                f"{esc(node.problem)}</td></tr>"
            )
            continue
        cells = []
        for check_id in check_ids:
            mine = [r for r in node.results if r["id"] == check_id]
            status = worst(r["status"] for r in mine)
            tip = "\n".join(f"{r['status']}: {r['summary']}" for r in mine)
            cells.append(
                f'<td style="background:{COLOURS.get(status or "", "#fff")}" title="{esc(tip)}">'
                f"{esc(status or '')}</td>"
            )
        rows.append(f"<tr><th>{esc(node.host)}</th>{''.join(cells)}</tr>")
    findings = []
    for node in nodes:
        for r in node.results:
            if r["status"] in ("fail", "error", "warn"):
                evidence = json.dumps(r.get("evidence", {}), sort_keys=True)[:600]
                cells = [
                    esc(node.host),
                    f'<span style="color:{COLOURS[r["status"]]}">{esc(r["status"])}</span>',
                    esc(r["id"]),
                    esc(str(r.get("subject") or "")),
                    esc(r["summary"]),
                    esc(str(r.get("remedy") or "")),
                    f"<code>{esc(evidence)}</code>",
                ]
                findings.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    healthy = sum(n.healthy for n in nodes)
    charts = "".join(f"<div>{c}</div>" for c in bench_charts(nodes))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dltune report</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; font-size: 13px; }}
th.v {{ writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; }}
td.unreachable {{ background: #000; color: #fff; }}
table.matrix td {{ color: #fff; }}
</style></head><body>
<h1>dltune report</h1>
<p>{len(nodes)} node(s), {healthy} healthy (no fail, no error, reachable). Generated {esc(generated)}
by dltune {esc(__version__)}. Hover a cell for the summaries.</p>
<table class="matrix"><tr><th>node</th>{head}</tr>{"".join(rows)}</table>
<h2>Findings</h2>
<table><tr><th>node</th><th>status</th><th>check</th><th>subject</th><th>summary</th><th>remedy</th>
<th>evidence</th></tr>{"".join(findings) or '<tr><td colspan="7">none</td></tr>'}</table>
<h2>Benchmarks</h2>{charts or "<p>no bench results in these reports</p>"}
</body></html>
"""
