"""`dltune report`: many nodes' audit (and bench) JSON envelopes merged into one answer — which nodes
are tuned and perform, which are not and why. A node that could not be audited stays in the report
as such (``unreachable`` or ``crashed``), never dropped.

Renders a terminal summary, a merged JSON file and one self-contained HTML page, both read top down,
the gravest first: the title line (one count of each kind of node), what to fix first (GPU-hours a
day), the shared dependencies, the findings (by check in the terminal; in the page each with its
summary, remedy and evidence), then the nodes (a table; the page's grid of nodes x areas coloured by the
worst status, stale and unusable reports grey, the nodes with no finding folded into one line), and bar
charts (inline SVG) of the bench figures per node and GPU, so an outlier stands out.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dltune import SCHEMA_VERSION, __version__
from dltune.fleet.node_files import NodeReport
from dltune.model import AREAS, Status
from dltune.outputs.human import table_subject
from dltune.outputs.report import STATUS_COLOUR, STATUS_STYLE, status_rank, worst
from dltune.records import field, record


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
                "shared_dependencies": [
                    {"dependency": dependency, "nodes": hosts, "checks": checks}
                    for dependency, hosts, checks in shared_failures(nodes)
                ],
                "behind_fleet": [
                    {
                        "host": b.host,
                        "device": b.device,
                        "gpu": b.gpu,
                        "figure": b.figure,
                        "unit": b.unit,
                        "value": round(b.value, 3),
                        "fleet_median": round(b.median, 3),
                        "behind": round(b.behind, 4),
                        "nodes": b.nodes,
                    }
                    for b in behind_the_fleet(nodes)
                ],
                "sdc_fleet": [
                    {
                        "host": o.host,
                        "gpu": o.gpu,
                        "devices": o.devices,
                        "agree": o.agree,
                        "digest": o.digest,
                        "fleet_digest": o.fleet_digest,
                        "agreeing": o.agreeing,
                        "nodes": o.nodes,
                        "step": o.step,
                    }
                    for o in sdc_outliers(nodes)
                ],
            },
            indent=2,
            allow_nan=False,  # node files with NaN or Infinity are invalid nodes: none can be here
        )
        + "\n"
    )


# A node's standing, the gravest first: no usable report (unreachable, crashed, invalid: the kind says
# which), then its worst status; a stale report (past its valid_until: what it says is old) after the
# nodes known to fail or err, before the healthy ones, whatever it said then.
NO_REPORT = "no report"
STALE = "stale"
STANDING = (NO_REPORT, "fail", "error", STALE, "warn", "pass", "skip")
FINDING_STATUSES = ("fail", "error", "warn")
# A problem's kind is what precedes its first colon ("unreachable: ssh timed out"); anything else
# (a node's {"problem": ...} file may say anything) is named by what it is.
KIND_CHARS = 24


def standing(node: NodeReport) -> str:
    """One of STANDING: the node as the report ranks it."""
    if node.problem:
        return NO_REPORT
    if node.stale:
        return STALE
    return worst(r["status"] for r in node.results) or "skip"


def problem_kind(node: NodeReport) -> str:
    """ "unreachable", "crashed", "invalid", "not installed": a node without a usable report."""
    kind, colon, _ = (node.problem or "").partition(":")
    return kind.strip() if colon and 0 < len(kind.strip()) <= KIND_CHARS else NO_REPORT


def standing_word(node: NodeReport) -> str:
    """What the node's `worst` column says: its kind in capitals (INVALID, STALE: no status), or its
    worst status."""
    if node.problem:
        return problem_kind(node).upper()
    return STALE.upper() if node.stale else standing(node)


def node_rank(node: NodeReport) -> tuple[int, str]:
    """Sort key, the gravest node first (STANDING), then by name."""
    return (STANDING.index(standing(node)), node.host)


def is_clean(node: NodeReport) -> bool:
    """Valid, current, and no finding at all: the nodes the summary and the page fold into one line."""
    return standing(node) in ("pass", "skip")


def headline(nodes: Sequence[NodeReport]) -> list[str]:
    """The report's first line (nodes, the healthy ones and what they hold: one count of each) and,
    where any node is not healthy, the second: what the others are."""
    count = {s: sum(standing(n) == s for n in nodes) for s in STANDING}
    healthy = sum(n.healthy for n in nodes)
    first = f"dltune report: {len(nodes)} node(s), {healthy} healthy"
    if count["warn"]:
        first += f" ({count['pass'] + count['skip']} with no finding, {count['warn']} with warnings only)"
    kinds: dict[str, int] = {}
    for node in nodes:
        if node.problem:
            kinds[problem_kind(node)] = kinds.get(problem_kind(node), 0) + 1
    others = [
        f"{count['fail'] + count['error']} failing" if count["fail"] + count["error"] else "",
        f"{count[STALE]} stale" if count[STALE] else "",
        *(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))),
    ]
    others = [o for o in others if o]
    return [first, *(["not healthy: " + ", ".join(others)] if others else [])]


# A node file may name any area (a newer dltune, or anyone's JSON): the ones this dltune does not know
# share one column and one summary entry, so a thousand made-up areas cannot widen the page.
OTHER_AREA = "other"


def shown_area(area: str) -> str:
    return area if area in AREAS else OTHER_AREA


def _area_index(area: str) -> int:
    return AREAS.index(area) if area in AREAS else len(AREAS)


def _finding_text(r: dict[str, Any]) -> str:
    return f"{r['status'].upper()} {r['id']}" + (f" [{r['subject']}]" if r.get("subject") else "")


def _finding_said(r: dict[str, Any]) -> str:
    """A finding as the node table shows it: status, check, subject (a GPU by its index), what is wrong."""
    subject = f" [{table_subject(str(r['subject']))}]" if r.get("subject") else ""
    summary = (
        r["summary"] if len(r["summary"]) <= SUMMARY_CHARS else r["summary"][: SUMMARY_CHARS - 1] + "\u2026"
    )
    return f"{r['status'].upper()} {r['id']}{subject}: {summary}"


SHOWN_FINDINGS = 3
SUMMARY_CHARS = 100  # a finding's summary in the node table (the page and the JSON hold it whole)
# Above this many nodes with findings, the summary opens with the findings rolled up by check (one
# cause on many nodes reads as one line) and the node table stops at MAX_NODE_ROWS unless --all.
ROLLUP_ABOVE = 10
# The summary's first lines: the checks that cost the fleet most (GPU-hours a day).
SHOWN_COSTS = 10
NO_COST_ROW = '<tr><td colspan="5">no priced finding</td></tr>'
MAX_NODE_ROWS = 40
STANDING_STYLE = {NO_REPORT: "bold red", STALE: "dim"}


def _style(status: str) -> str:
    return STANDING_STYLE.get(status) or STATUS_STYLE.get(Status(status), "")


def render_summary(nodes: Sequence[NodeReport], console: Console, show_all: bool = False) -> None:
    """The title line (nodes, healthy, the others by kind); what to fix first; the shared dependencies;
    above ROLLUP_ABOVE nodes with findings, the findings by check, the gravest first; then the nodes
    with findings, the gravest first (no report, fail, error, stale, warn), each with its first findings
    and what they say; the nodes with no finding folded into one line unless ``show_all``. Reads at 100
    columns for any number of areas."""
    table, clean = _node_table(nodes, show_all)
    with_findings = table.row_count
    for index, line in enumerate(headline(nodes)):
        console.print(Text(line, style="bold" if index == 0 else ""))
    _print_costs(nodes, console)
    _print_shared(nodes, console)
    if with_findings > ROLLUP_ABOVE:
        _print_rollup(nodes, console)
    if with_findings > MAX_NODE_ROWS and not show_all:
        table = _first_rows(table, MAX_NODE_ROWS)
    if table.row_count:
        console.print(table)
    if with_findings > table.row_count:
        more = with_findings - table.row_count
        console.print(Text(f"+{more} more node(s) with findings: `dltune report --all` lists them"))
    if clean:
        console.print(
            Text(f"{len(clean)} node(s) with no finding: {_listed(clean)} (`dltune report --all` lists them)")
        )
    _print_fleet_notes(nodes, console)


def _node_table(nodes: Sequence[NodeReport], show_all: bool) -> tuple[Table, list[str]]:
    """The nodes' table, the gravest first, and the nodes it folds (no finding; all: none)."""
    table = Table()
    table.add_column("node", no_wrap=True)
    table.add_column("worst", no_wrap=True)
    table.add_column("areas with findings", overflow="fold", max_width=20)
    table.add_column("findings", overflow="fold", ratio=1)
    clean: list[str] = []
    for node in sorted(nodes, key=node_rank):
        word, style = standing_word(node), _style(standing(node))
        if node.problem:
            # The kind in capitals (it is no status); the reason as given: paths keep their case.
            table.add_row(Text(node.host), Text(word, style=style), Text(""), Text(node.problem))
            continue
        findings = sorted(
            (r for r in node.results if r["status"] in FINDING_STATUSES),
            key=lambda r: status_rank(r["status"]),
        )
        if is_clean(node) and not show_all:
            clean.append(node.host)
            continue
        areas: dict[str, str] = {}
        for r in sorted(findings, key=lambda r: _area_index(r["area"])):
            areas.setdefault(shown_area(r["area"]), r["status"])  # sorted: the first is the area's worst
        texts = [_finding_said(r) for r in findings[:SHOWN_FINDINGS]]
        if len(findings) > SHOWN_FINDINGS:
            texts.append(f"+{len(findings) - SHOWN_FINDINGS} more")
        if node.stale:
            texts.insert(0, f"STALE: {node.stale}" + ("; it said then:" if findings else ""))
        table.add_row(
            Text(node.host, style="dim" if node.stale else ""),
            Text(word, style=style),
            Text(", ".join(f"{area} {st}" for area, st in areas.items()), style="dim" if node.stale else ""),
            Text("\n".join(texts), style="dim" if node.stale else ""),
        )
    return table, clean


def _print_costs(nodes: Sequence[NodeReport], console: Console, shown: int = SHOWN_COSTS) -> None:
    """What costs the fleet most in GPU-hours a day, then what no method priced, the gravest first."""
    costs, unpriced = check_costs(nodes)
    if not costs and not unpriced:
        return
    total = sum(c.gpu_hours_per_day for c in costs)
    console.print(Text(f"what to fix first: {total:.1f} GPU-hours a day lost across the fleet", style="bold"))
    for cost in costs[:shown]:
        console.print(Text(f"  {cost.said()}"))
    if len(costs) > shown:
        console.print(Text(f"  +{len(costs) - shown} more priced check(s) (report.html)"))
    if unpriced:
        listed = ", ".join(f"{check} {status} on {len(hosts)}" for check, status, hosts in unpriced[:shown])
        more = f", +{len(unpriced) - shown} more" if len(unpriced) > shown else ""
        console.print(Text(f"  not priced (by severity, nodes): {listed}{more}"))


def rollup(nodes: Sequence[NodeReport]) -> list[tuple[str, str, list[str]]]:
    """(check, status, hosts) for every finding of the current reports, the gravest first, then the
    most widespread: "gpu.ecc fail on 30 nodes". A stale node's findings are old: findings_by_check
    counts the node as stale."""
    found: dict[tuple[str, str], set[str]] = {}
    for node in nodes:
        if node.problem or node.stale:
            continue
        for r in node.results:
            if r["status"] in FINDING_STATUSES:
                found.setdefault((r["id"], r["status"]), set()).add(node.host)
    ordered = sorted(found.items(), key=lambda item: (status_rank(item[0][1]), -len(item[1]), item[0][0]))
    return [(check, status, sorted(hosts)) for (check, status), hosts in ordered]


@record(frozen=True)
class CheckLine:
    """One line of the findings by check: a check's findings of one status, or the nodes of one kind
    with no usable or no current report (INVALID, UNREACHABLE, STALE)."""

    what: str  # the check, or the kind in capitals
    status: str  # its place in STANDING
    hosts: tuple[str, ...]
    gpu_hours_per_day: float | None = None  # the check's price across the fleet, where it has one

    def said(self, shown: int = 5) -> str:
        what = self.what if self.status in (NO_REPORT, STALE) else f"{self.what} {self.status}"
        price = f", {self.gpu_hours_per_day:.1f} GPU-hours a day" if self.gpu_hours_per_day else ""
        return f"{what} on {len(self.hosts)} node(s){price}: {_listed(list(self.hosts), shown)}"


def findings_by_check(nodes: Sequence[NodeReport]) -> list[CheckLine]:
    """Every node that is not healthy or has a warning, counted: each check by status, the nodes with
    no usable report by kind, the stale ones; ordered by severity (STANDING), then by nodes, then by
    GPU-hours a day (check_costs) where priced, then by name."""
    price = {c.check: c.gpu_hours_per_day for c in check_costs(nodes)[0]}
    lines = [
        CheckLine(check, status, tuple(hosts), price.get(check)) for check, status, hosts in rollup(nodes)
    ]
    kinds: dict[tuple[str, str], list[str]] = {}
    for node in nodes:
        if node.problem or node.stale:
            kinds.setdefault((standing_word(node), standing(node)), []).append(node.host)
    lines += [CheckLine(word, status, tuple(sorted(hosts))) for (word, status), hosts in kinds.items()]
    return sorted(
        lines,
        key=lambda line: (
            STANDING.index(line.status),
            -len(line.hosts),
            -(line.gpu_hours_per_day or 0.0),
            line.what,
        ),
    )


def _print_rollup(nodes: Sequence[NodeReport], console: Console, shown: int = 10) -> None:
    lines = findings_by_check(nodes)
    console.print(Text("findings by check, the gravest first (nodes):", style="bold"))
    for line in lines[:shown]:
        console.print(Text(f"  {line.said()}", style=_style(line.status)))
    if len(lines) > shown:
        console.print(Text(f"  +{len(lines) - shown} more check(s) with findings"))


def _first_rows(table: Table, rows: int) -> Table:
    """The same table with its first ``rows`` rows only."""
    cut = Table(title=table.title, title_justify="left")
    for column in table.columns:
        cut.add_column(
            column.header,
            no_wrap=column.no_wrap,
            overflow=column.overflow,
            max_width=column.max_width,
            ratio=column.ratio,
        )
    cells = [list(column.cells) for column in table.columns]
    for index in range(min(rows, table.row_count)):
        cut.add_row(*(column[index] for column in cells))
    return cut


def _print_shared(nodes: Sequence[NodeReport], console: Console) -> None:
    """A shared dependency many nodes fail on: one cause, one line, above the rollup and the nodes."""
    for dependency, hosts, checks in shared_failures(nodes):
        console.print(
            Text(
                f"shared dependency {dependency}: {len(hosts)} node(s) "
                f"({', '.join(checks)}): {_listed(hosts)}",
                style="bold yellow",
            )
        )


def _print_fleet_notes(nodes: Sequence[NodeReport], console: Console) -> None:
    """What no single row shows: GPU firmware that differs, GPU figures behind the fleet's, a node whose
    replay digests differ from the fleet's, what the tunings bought."""
    for host, what in sorted(firmware_outliers(nodes).items()):
        console.print(
            Text(f"firmware differs from the cluster's on {host}: {'; '.join(what)}", style="yellow")
        )
    laggards = behind_the_fleet(nodes)
    for laggard in laggards[:SHOWN_BEHIND]:
        console.print(Text(f"behind the fleet: {laggard.said()}", style="yellow"))
    if len(laggards) > SHOWN_BEHIND:
        more = len(laggards) - SHOWN_BEHIND
        console.print(Text(f"+{more} more GPU figure(s) behind the fleet (report.html)"))
    for odd in sdc_outliers(nodes):
        console.print(Text(f"replay differs from the fleet's: {odd.said()}", style="bold red"))
    for line in tuning_ledger(nodes):
        console.print(Text(f"tuning ledger: {line.said()}"))


def shared_failures(nodes: Sequence[NodeReport]) -> list[tuple[str, list[str], list[str]]]:
    """Findings that name a shared dependency, grouped by it: (dependency, its nodes, its checks), the
    dependency most nodes fail on first. 212 nodes failing nfs.responsive on one server are one cause."""
    groups: dict[str, tuple[set[str], set[str]]] = {}
    for node in nodes:
        for r in node.results:
            dependency = r.get("shared_dependency")
            if isinstance(dependency, str) and dependency and r["status"] in ("fail", "warn", "error"):
                hosts, checks = groups.setdefault(dependency, (set(), set()))
                hosts.add(node.host)
                checks.add(r["id"])
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1][0]), kv[0]))
    return [(dependency, sorted(hosts), sorted(checks)) for dependency, (hosts, checks) in ordered]


def _listed(hosts: Sequence[str], shown: int = 10) -> str:
    return ", ".join(hosts[:shown]) + (f", ... ({len(hosts) - shown} more)" if len(hosts) > shown else "")


SHOWN_BEHIND = 10
SAME_FIRMWARE = "one VBIOS and InfoROM image per GPU model across the nodes (or none reported)"


def firmware_outliers(nodes: Sequence[NodeReport]) -> dict[str, list[str]]:
    """Nodes whose GPUs of a model run another VBIOS or InfoROM image than most nodes with that model
    (from each node's gpu.firmware evidence): node -> what differs."""
    seen: dict[tuple[str, str], dict[str, str]] = {}  # (model, kind) -> node -> versions
    for node in nodes:
        for result in node.results:
            if result.get("id") != "gpu.firmware":
                continue
            models = (result.get("evidence") or {}).get("models")
            for model, kinds in (models if isinstance(models, dict) else {}).items():
                for kind, versions in (kinds if isinstance(kinds, dict) else {}).items():
                    if isinstance(versions, dict) and versions:
                        seen.setdefault((str(model), str(kind)), {})[node.host] = ", ".join(sorted(versions))
    odd: dict[str, list[str]] = {}
    for (model, kind), per_node in sorted(seen.items()):
        counts: dict[str, int] = {}
        for versions in per_node.values():
            counts[versions] = counts.get(versions, 0) + 1
        usual, most = max(counts.items(), key=lambda item: (item[1], item[0]))
        if len(counts) < 2 or most * 2 <= len(per_node):
            if len(counts) > 1:  # no majority: every node is named
                for host, versions in per_node.items():
                    odd.setdefault(host, []).append(f"{model} {kind} {versions} (no version on most nodes)")
            continue
        for host, versions in sorted(per_node.items()):
            if versions != usual:
                odd.setdefault(host, []).append(f"{model} {kind} {versions}, {most} node(s) run {usual}")
    return odd


# Behind the fleet: a GPU's bench figure more than this fraction below the median of the same figure
# over every GPU of its model in the report. gpu-fryer flags a GPU 10% behind its node's best,
# SuperBench 5% below a baseline; two healthy H200 machines measured 3% apart on the same bf16 burst
# (tests/fixtures/real/bench/), so 10% stays clear of that spread. Only figures a GPU sets alone are
# compared: the matmul burst, the device copy, the pinned host copies (training throughput also holds
# the host's CPUs and data path: two healthy H200 machines were 40% apart).
FLEET_BEHIND = 0.10
# A median of fewer nodes names no one: with two, "behind" cannot say which of them is slow.
FLEET_MIN_NODES = 3
FLEET_NONE = (
    f"no GPU more than {FLEET_BEHIND:.0%} below its model's median bench figure "
    f"(compared where at least {FLEET_MIN_NODES} nodes have the model)"
)
_FLEET_FIGURES = {"bench.matmul": ("tflops", "TFLOPS"), "bench.memory": ("gb_s", "GB/s"),
                  "bench.host_transfer": ("gb_s", "GB/s")}  # fmt: skip


@record(frozen=True)
class BehindFleet:
    """One GPU's figure far below its fleet's median for the same GPU model and figure."""

    host: str
    device: str  # "cuda:3"
    gpu: str  # the GPU's model name, as the bench read it
    figure: str  # "matmul bf16", "memory device copy", "host_transfer h2d pinned"
    unit: str
    value: float
    median: float
    nodes: int  # nodes with this GPU model and figure

    @property
    def behind(self) -> float:
        return 1.0 - self.value / self.median

    def said(self) -> str:
        return (
            f"{self.host} {self.device} {self.figure}: {_figure(self.value)} {self.unit}, "
            f"{self.behind:.0%} below the median {_figure(self.median)} of {self.gpu} on {self.nodes} nodes"
        )


def _fleet_samples(nodes: Sequence[NodeReport]) -> dict[tuple[str, str, str], list[tuple[str, str, float]]]:
    """(gpu model, figure, unit) -> [(host, device, value)] from every node's bench results."""
    samples: dict[tuple[str, str, str], list[tuple[str, str, float]]] = {}
    for node in nodes:
        if node.problem or node.stale:
            continue
        for r in node.results:
            metric = _FLEET_FIGURES.get(r.get("id", ""))
            evidence = r.get("evidence") or {}
            subject = str(r.get("subject") or "")
            if metric is None or r.get("status") not in ("pass", "warn", "fail") or ":" not in subject:
                continue
            value = (r.get("metrics") or {}).get(metric[0])
            gpu = evidence.get("name") if isinstance(evidence, dict) else None
            device, _, what = subject.rpartition(":")
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                continue
            if not device.startswith("cuda") or not isinstance(gpu, str):
                continue
            if r["id"] == "bench.host_transfer" and not what.endswith("pinned"):
                continue  # pageable copies measure the host's memory and its load, not the GPU's link
            figure = f"{r['id'].removeprefix('bench.')} {what}"
            samples.setdefault((gpu, figure, metric[1]), []).append((node.host, device, float(value)))
    return samples


def behind_the_fleet(nodes: Sequence[NodeReport], behind: float = FLEET_BEHIND) -> list[BehindFleet]:
    """Every GPU more than ``behind`` below the median of its model's GPUs for the same bench figure,
    over at least FLEET_MIN_NODES nodes; the furthest behind first. A whole node slowed (a lowered power
    limit, a bad riser, another cooling) is invisible to the node's own comparison of its GPUs."""
    found = []
    for (gpu, figure, unit), values in _fleet_samples(nodes).items():
        hosts = {host for host, _, _ in values}
        if len(hosts) < FLEET_MIN_NODES:
            continue
        median = _median([v for _, _, v in values])
        for host, device, value in values:
            if value < median * (1.0 - behind):
                found.append(BehindFleet(host, device, gpu, figure, unit, value, median, len(hosts)))
    return sorted(found, key=lambda b: (-b.behind, b.host, b.device, b.figure))


# Silent data corruption across the fleet (bench.sdc): every node replays the same seeded training on
# its GPUs and records the weights' digest after each step with the replay's key (the replay itself,
# PyTorch, CUDA, cuBLAS, the driver, CUBLAS_WORKSPACE_CONFIG, the GPU model). Nodes whose key is the
# same must compute the same digests. A node whose GPUs agree with each other but not with the
# majority of such nodes computes wrong as a whole (or differs in what the key does not record), which
# its own comparison of its GPUs cannot see; on a node whose GPUs disagree (two GPUs: no majority on
# the node) the fleet's majority names the GPU that differs. Each node whose GPUs agree is one vote;
# naming a GPU of a node that disagrees takes a majority of at least two such nodes. GPUs only: a CPU's
# result also depends on its microarchitecture (MKL and oneDNN pick kernels by it), which the key does
# not name.
SDC_NONE = (
    "every node's GPUs replayed the seeded training as the other nodes with the same key did "
    "(compared where 2 or more nodes share a key)"
)
SDC_ARBITERS = 2


@record(frozen=True)
class SdcOutlier:
    """GPUs of one node whose bench.sdc digests differ from the fleet's for the same replay key."""

    host: str
    gpu: str
    devices: list[str]  # the node's GPUs of this model that differ from the fleet's majority
    agree: bool  # the node's GPUs agree with each other (else: its own bench.sdc failed)
    digest: str  # the weights' digest of the first of them after the last step
    fleet_digest: str | None  # the majority's, None where the nodes with the key have no majority
    agreeing: int  # nodes with the majority's digests (0: no majority)
    nodes: int  # nodes with this key whose GPUs agree with each other
    step: int  # the first step at which these digests leave the majority's (or part, without one)

    def said(self) -> str:
        where = "before training" if self.step == 0 else f"from step {self.step}"
        if not self.agree:
            return (
                f"{self.host} {', '.join(self.devices)} ({self.gpu}; the node's GPUs disagree): differs "
                f"{where} from what {self.agreeing} of the {self.nodes} nodes with the same replay key "
                "computed: computes wrong (silent data corruption)"
            )
        gpus = f"its {len(self.devices)} {self.gpu} GPU(s) agree with each other"
        if self.fleet_digest is None:
            return (
                f"{self.host}: {gpus}, but the {self.nodes} nodes with the same replay key have no majority "
                f"(they part {where}): at least one computes wrong"
            )
        return (
            f"{self.host}: {gpus}, but not with {self.agreeing} of the {self.nodes} nodes with the same "
            f"replay key, {where}: the node computes wrong (silent data corruption), or differs in what the "
            "key does not record"
        )


def _sdc_traces(result: dict[str, Any]) -> tuple[str, str, dict[str, tuple[str, ...]]] | None:
    """(fleet key, GPU model, device -> digests per step) of one bench.sdc result, its GPUs only; None
    for a result that is not one, or holds no well-formed digests."""
    evidence = result.get("evidence")
    if result.get("id") != "bench.sdc" or not isinstance(evidence, dict):
        return None
    key, devices = evidence.get("key"), evidence.get("devices")
    if not isinstance(key, dict) or not isinstance(devices, dict) or not isinstance(key.get("gpu"), str):
        return None
    traces = {}
    for device, replay in devices.items():
        steps = replay.get("steps") if isinstance(replay, dict) else None
        well_formed = isinstance(steps, list) and steps and all(isinstance(s, str) for s in steps)
        if str(device).startswith("cuda") and well_formed:
            traces[str(device)] = tuple(steps)  # type: ignore[arg-type]
    if not traces:
        return None
    return json.dumps(key, sort_keys=True), key["gpu"], traces


def _parting(one: Sequence[str], other: Sequence[str]) -> int:
    """The first step (0: before training) at which two replays' digests differ."""
    return next(
        (i for i, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), min(len(one), len(other))
    )


@record
class _SdcKey:
    """One replay key's nodes: each node's GPUs of that key with their digests per step, from every
    report of the node (`dltune check` and `dltune bench` both replay: a GPU may appear twice)."""

    gpu: str
    replays: dict[str, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)  # host -> replays

    def votes(self) -> dict[str, tuple[str, ...]]:
        """The nodes whose GPUs agree with each other in every report, with their one trace."""
        distinct = {host: {trace for _, trace in replays} for host, replays in self.replays.items()}
        return {host: next(iter(traces)) for host, traces in distinct.items() if len(traces) == 1}

    def devices(self, host: str, unlike: tuple[str, ...] | None = None) -> list[str]:
        """The node's GPUs of this key (those whose digests are not `unlike`'s, if given)."""
        return sorted({device for device, trace in self.replays[host] if trace != unlike})


def _sdc_keys(nodes: Sequence[NodeReport]) -> list[_SdcKey]:
    keys: dict[str, _SdcKey] = {}
    for node in nodes:
        if node.problem or node.stale:
            continue
        for r in node.results:
            found = _sdc_traces(r)
            if found is not None:
                key, gpu, traces = found
                keys.setdefault(key, _SdcKey(gpu)).replays.setdefault(node.host, []).extend(traces.items())
    return list(keys.values())


def sdc_outliers(nodes: Sequence[NodeReport]) -> list[SdcOutlier]:
    """For each replay key: the nodes whose GPUs agree with each other but not with the majority of
    such nodes (with no majority, every one of them), and the GPUs of nodes that disagree within which
    differ from a majority of at least SDC_ARBITERS nodes. Stale reports are not compared."""
    found = []
    for key in _sdc_keys(nodes):
        votes = key.votes()
        counts: dict[tuple[str, ...], int] = {}
        for trace in votes.values():
            counts[trace] = counts.get(trace, 0) + 1
        majority, agreeing = max(counts.items(), key=lambda item: item[1], default=((), 0))
        has_majority = agreeing * 2 > len(votes)
        if len(counts) > 1:
            parting = min(_parting(a, b) for a in counts for b in counts if a != b)
            for host, trace in votes.items():
                if not (has_majority and trace == majority):
                    step = _parting(trace, majority) if has_majority else parting
                    shown = majority[-1] if has_majority else None
                    found.append(
                        SdcOutlier(
                            host,
                            key.gpu,
                            key.devices(host),
                            True,
                            trace[-1],
                            shown,
                            agreeing if has_majority else 0,
                            len(votes),
                            step,
                        )
                    )
        if not has_majority or agreeing < SDC_ARBITERS:
            continue
        for host, replays in key.replays.items():
            odd = [trace for _, trace in sorted(replays) if trace != majority]
            if host in votes or not odd:
                continue
            step = min(_parting(t, majority) for t in odd)
            devices = key.devices(host, unlike=majority)
            found.append(
                SdcOutlier(
                    host, key.gpu, devices, False, odd[0][-1], majority[-1], agreeing, len(votes), step
                )
            )
    return sorted(found, key=lambda o: (o.host, o.gpu, o.devices))


# A chart draws at most this many bars (the lowest: the ones to look at); every value is also one tick
# on a strip above them, so 200 nodes x 8 GPUs stay one screen high.
MAX_BARS = 20
LABEL_CHARS = 38
OUTLIER_SHARE = 0.85  # below 85% of the best bar: an outlier, as the bench judges it (a warn)


def _figure(value: float) -> str:
    """2,998 rather than 3e+03; small figures keep three significant digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "\u2026"


def _svg_bars(title: str, bars: Sequence[tuple[str, float]], unit: str) -> str:
    """Bars for the lowest values (all of them up to MAX_BARS), above them a strip with one tick per
    value, outliers in the bench's warn colour; labels cut to fit, whole in their tooltip."""
    if not bars:
        return ""
    esc = html.escape
    top = max(v for _, v in bars)
    top = top if top > 0 else 1.0  # a node's file may hold any finite number, negative ones too
    row, width, label_w = 22, 420, 270
    lowest = sorted(bars, key=lambda bar: bar[1])[:MAX_BARS]
    strip = 34 if len(bars) > MAX_BARS else 0
    height = 24 + strip + row * len(lowest) + 6
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + width + 190}" height="{height}" '
        f'role="img"><title>{esc(title)}</title>'
        f'<text x="0" y="14" font-size="13" font-weight="bold">{esc(title)}</text>'
    ]

    def colour(value: float) -> str:
        return STATUS_COLOUR["pass"] if value >= OUTLIER_SHARE * top else STATUS_COLOUR["warn"]

    def x_of(value: float) -> float:
        return min(float(width), max(1.0, value / top * width))

    if strip:
        outliers = sum(1 for _, v in bars if v < OUTLIER_SHARE * top)
        middle = 30 + strip // 2
        parts.append(
            f'<text x="0" y="44" font-size="12">all {len(bars)}: {outliers} below '
            f"{OUTLIER_SHARE:.0%} of the best</text>"
            f'<line x1="{label_w}" y1="{middle}" x2="{label_w + width}" y2="{middle}" stroke="#ccc"/>'
        )
        for label, value in bars:
            x = label_w + x_of(value)
            parts.append(
                f'<line x1="{x:.1f}" y1="30" x2="{x:.1f}" y2="{30 + strip - 6}" stroke="{colour(value)}" '
                f'stroke-width="1.5"><title>{esc(label)}: {_figure(value)} {unit}</title></line>'
            )
        parts.append(
            f'<text x="{label_w + width + 4}" y="44" font-size="12">best {_figure(top)} {unit}</text>'
        )
    for i, (label, value) in enumerate(lowest):
        y = 24 + strip + i * row
        w = x_of(value)
        parts.append(
            f'<text x="0" y="{y + 14}" font-size="12"><title>{esc(label)}</title>{esc(_short(label))}</text>'
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{row - 6}" fill="{colour(value)}"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 14}" font-size="12">{_figure(value)} {unit}</text>'
        )
    parts.append("</svg>")
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


TIP_LINES = 20
# The page breaks host text only at its spaces and after a "/", never inside a word: a node's name, a
# check's id or a status is one unbreakable token, and a word with a hyphen (a UUID, a host name) is kept
# whole, where a browser would break after the hyphen.
_SPACES = re.compile(r"(\s+)")
_AFTER_SLASH = re.compile(r"(?<=[^/]/)")
BREAK_PATHS_OVER = 24  # a shorter path (/mnt/datasets) stays whole


def _tok(text: str) -> str:
    """A name, an id or a status: never broken across lines."""
    return f'<span class="tok">{html.escape(text)}</span>'


def _breakable(text: str) -> str:
    """Host text, escaped, that wraps at its spaces and after each "/" only."""
    out = []
    for chunk in _SPACES.split(text):
        if not chunk or chunk.isspace():
            out.append(html.escape(chunk))
            continue
        pieces = [p for p in _AFTER_SLASH.split(chunk) if p] if len(chunk) > BREAK_PATHS_OVER else [chunk]
        out.append("<wbr>".join(_tok(p) if "-" in p else html.escape(p) for p in pieces))
    return "".join(out)


def _checks_tip(results: Sequence[dict[str, Any]]) -> str:
    """Every check of a node with no finding, one per line: id, status, summary."""
    return "\n".join(f"{_finding_text(r)}: {r['summary']}" for r in results)


def _area_cell(node_anchor: str, mine: Sequence[dict[str, Any]], grey: bool = False) -> str:
    """One node x area cell: its worst status, every check of the area on hover, a link to the node's
    findings on click; no status colour on a node whose report is stale (``grey``)."""
    esc = html.escape
    if not mine:
        return "<td></td>"
    status = worst(r["status"] for r in mine) or "skip"
    ordered = sorted(mine, key=lambda r: status_rank(r["status"]))
    tip = "\n".join(f"{_finding_text(r)}: {r['summary']}" for r in ordered[:TIP_LINES])
    if len(ordered) > TIP_LINES:
        tip += f"\n... {len(ordered) - TIP_LINES} more"
    colour = "" if grey else f' style="background:{STATUS_COLOUR.get(status, "#fff")}"'
    return f'<td{colour} title="{esc(tip)}"><a href="#{node_anchor}">{esc(status)}</a></td>'


# Evidence as key: value lines (nested keys joined with "."), at most EVIDENCE_ITEMS of them, each value
# cut at EVIDENCE_CHARS: the merged JSON holds it whole.
EVIDENCE_ITEMS = 12
EVIDENCE_CHARS = 160


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _evidence_items(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict) and value:
        for name, inner in value.items():
            yield from _evidence_items(inner, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list) and not any(isinstance(v, dict | list) for v in value):
        yield key, ", ".join(_scalar(v) for v in value)
    else:
        yield key, _scalar(value)


def _evidence_html(evidence: Any) -> str:
    if evidence in (None, {}):
        return ""
    items = list(itertools.islice(_evidence_items(evidence), EVIDENCE_ITEMS + 1))
    lines = [
        (f'<span class="k">{_breakable(key)}</span>: ' if key else "")
        + _breakable(value if len(value) <= EVIDENCE_CHARS else value[: EVIDENCE_CHARS - 1] + "\u2026")
        for key, value in items[:EVIDENCE_ITEMS]
    ]
    if len(items) > EVIDENCE_ITEMS:
        lines.append("\u2026 (the merged JSON holds the rest)")
    return "".join(f"<div>{line}</div>" for line in lines)


def _finding_row(host: str, r: dict[str, Any], head: str, grey: bool) -> str:
    """One finding of the page's findings table (``head``: the row's class and anchor)."""
    status = html.escape(r["status"])
    if not grey:
        status = f'<span style="color:{STATUS_COLOUR.get(r["status"], "#000")}">{status}</span>'
    subject = str(r.get("subject") or "")
    columns = [
        _tok(host),
        f'<span class="tok">{status}</span>',
        _tok(r["id"]),
        f'<span title="{html.escape(subject)}">{_breakable(table_subject(subject))}</span>',
        _breakable(r["summary"]),
        _breakable(str(r.get("remedy") or "")),
    ]
    cells = "".join(f"<td>{c}</td>" for c in columns)
    return f'<tr{head}>{cells}<td class="ev">{_evidence_html(r.get("evidence"))}</td></tr>'


def _findings_html(ordered: Sequence[NodeReport], anchors: dict[int, str]) -> str:
    """Every node that is not clean, the gravest first: its problem, or that its report is stale (grey),
    then each finding, the worst first, with its summary, remedy and evidence."""
    rows = []
    for node in ordered:
        if is_clean(node):
            continue
        grey = bool(node.problem or node.stale)
        head = f' class="finding{" grey" if grey else ""}" id="{anchors[id(node)]}"'
        findings = sorted(
            (r for r in node.results if r["status"] in FINDING_STATUSES),
            key=lambda r: status_rank(r["status"]),
        )
        note = node.problem or (
            f"{node.stale}" + ("; it said then:" if findings else "") if node.stale else ""
        )
        if note:
            word = problem_kind(node) if node.problem else STALE
            cells = f'<td>{_tok(node.host)}</td><td>{_tok(word)}</td><td colspan="5">{_breakable(note)}</td>'
            rows.append(f"<tr{head}>{cells}</tr>")
            head = ' class="finding grey"'
        for r in findings:
            rows.append(_finding_row(node.host, r, head, grey))
            head = ' class="finding grey"' if grey else ' class="finding"'
    return "".join(rows) or '<tr><td colspan="7">none</td></tr>'


def _matrix_html(ordered: Sequence[NodeReport], anchors: dict[int, str], areas: Sequence[str]) -> str:
    """Nodes x areas for the nodes with a finding, the gravest first, stale and unusable reports grey;
    the nodes with no finding folded into one line."""
    esc = html.escape
    rows, clean = [], []
    for node in ordered:
        if node.problem:
            problem = f'<td colspan="{len(areas)}">{_breakable(node.problem)}</td>'
            rows.append(f'<tr class="grey"><th>{_tok(node.host)}</th>{problem}</tr>')
            continue
        if is_clean(node):
            clean.append(node)
            continue
        cells = "".join(
            _area_cell(
                anchors[id(node)], [r for r in node.results if shown_area(r["area"]) == a], bool(node.stale)
            )
            for a in areas
        )
        stale = f'<br><span class="stale" title="{esc(node.stale)}">stale</span>' if node.stale else ""
        grey = ' class="grey"' if node.stale else ""
        rows.append(f"<tr{grey}><th>{_tok(node.host)}{stale}</th>{cells}</tr>")
    head = "".join(f"<th>{esc(a)}</th>" for a in areas)
    # Each folded node names its checks on hover, as a grid cell does (a pass, e.g. the multi-node bench,
    # stays findable on the page).
    listed = ", ".join(
        f'<span class="tok" title="{esc(_checks_tip(node.results))}">{esc(node.host)}</span>'
        for node in clean
    )
    folded = (
        f'<details class="clean"><summary>{len(clean)} node(s) with no finding: '
        f"{_breakable(_listed([n.host for n in clean], 5))}</summary><p>{listed}</p></details>"
        if clean
        else ""
    )
    return f'<table class="matrix"><tr><th>node</th>{head}</tr>{"".join(rows)}</table>{folded}'


# The first section stays short above the findings: the costliest checks, then "+N more".
HTML_COST_ROWS = 20


def _more_row(more: int, columns: int) -> str:
    return f'<tr><td colspan="{columns}">+{more} more (the findings below)</td></tr>' if more > 0 else ""


def _first_section_html(nodes: Sequence[NodeReport]) -> str:
    """The page's first section: what to fix first, by GPU-hours a day, then the gravest unpriced."""
    esc = html.escape
    costs, unpriced = check_costs(nodes)
    cost_rows = "".join(
        f"<tr><td>{esc(c.check)}</td><td>{c.gpu_hours_per_day:.1f}</td><td>{len(c.hosts)}</td>"
        f"<td>{esc(', '.join(c.bases))}</td><td>{_breakable(_listed(list(c.hosts)))}</td></tr>"
        for c in costs[:HTML_COST_ROWS]
    ) + _more_row(len(costs) - HTML_COST_ROWS, 5)
    # The gravest unpriced first, few of them: the findings and the grid below list every one.
    unpriced_rows = "".join(
        f"<tr><td>{esc(check)}</td><td>{esc(status)}</td><td>{len(hosts)}</td><td>{_breakable(_listed(hosts))}</td></tr>"
        for check, status, hosts in unpriced[:SHOWN_COSTS]
    ) + _more_row(len(unpriced) - SHOWN_COSTS, 4)
    return (
        f"<h2>What to fix first</h2><p>{sum(c.gpu_hours_per_day for c in costs):.1f} GPU-hours a day lost "
        "across the fleet, by check (each node's loss counted once; a node out of scheduling: all its "
        "GPUs).</p>"
        '<table class="costs"><tr><th>check</th><th>GPU-hours a day</th><th>nodes</th><th>priced</th>'
        f"<th>which</th></tr>{cost_rows or NO_COST_ROW}</table>"
        + (
            "<p>Not priced (no method, or no measurement), the gravest first:</p>"
            '<table class="costs"><tr><th>check</th><th>status</th><th>nodes</th><th>which</th></tr>'
            f"{unpriced_rows}</table>"
            if unpriced_rows
            else ""
        )
    )


PAGE_STYLE = f"""
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; font-size: 13px; vertical-align: top; }}
td, th, li, summary, p {{ overflow-wrap: normal; word-break: keep-all; }}
.tok, table.costs td:first-child {{ white-space: nowrap; }}
tr.grey td, tr.grey th {{ background: #eeeeee !important; color: #757575 !important; }}
tr.grey a, tr.grey span {{ color: #757575 !important; }}
span.stale {{ color: {STATUS_COLOUR["fail"]}; font-weight: normal; }}
table.matrix td {{ text-align: center; }}
table.matrix td a {{ color: #fff; text-decoration: none; display: block; }}
table.findings td {{ max-width: 32em; }}
td.ev {{ font-family: monospace; font-size: 12px; min-width: 14em; }}
td.ev span.k {{ color: #555; }}
details.clean {{ margin-bottom: 1.5em; }}
details.clean summary {{ cursor: pointer; }}
"""


# long: the page template is one f-string
def render_html(nodes: Sequence[NodeReport], generated: str) -> str:
    """The title (nodes, healthy, the others by kind); what to fix first; the shared dependencies; every
    finding, the gravest node first, with its summary, remedy and evidence as key: value lines; nodes x
    areas for the nodes with findings (hover a cell for the area's checks, a click jumps to the node's
    findings), the nodes with no finding folded into one line; stale reports and nodes without a usable
    report grey. Host text breaks between words, never inside one; then the fleet's notes and charts."""
    esc = html.escape
    ordered = sorted(nodes, key=node_rank)
    anchors = {id(node): f"node-{i}" for i, node in enumerate(ordered)}
    present = {shown_area(r["area"]) for n in nodes for r in n.results}
    areas = [a for a in (*AREAS, OTHER_AREA) if a in present]
    shared = "".join(
        f"<li><b>{esc(dependency)}: {len(hosts)} node(s)</b> ({esc(', '.join(checks))}): "
        f"{_breakable(_listed(hosts))}</li>"
        for dependency, hosts, checks in shared_failures(nodes)
    )
    charts = "".join(f"<div>{c}</div>" for c in bench_charts(nodes))
    outliers = "".join(
        f"<li>{_breakable(host)}: {_breakable('; '.join(what))}</li>"
        for host, what in sorted(firmware_outliers(nodes).items())
    )
    laggards = "".join(f"<li>{_breakable(b.said())}</li>" for b in behind_the_fleet(nodes))
    replays = "".join(f"<li>{_breakable(o.said())}</li>" for o in sdc_outliers(nodes))
    ledger = "".join(f"<li>{_breakable(line.said())}</li>" for line in tuning_ledger(nodes))
    title = "<br>".join(esc(line) for line in headline(nodes))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dltune report</title>
<style>{PAGE_STYLE}</style></head><body>
<h1>dltune report</h1>
<p><b>{title}</b></p>
<p>Generated {esc(generated)} by dltune {esc(__version__)}. Healthy: no fail, no error, reachable, valid and
current. The findings come first, the gravest node first; stale reports and nodes without a usable report
are grey. In the grid below them, hover a cell for its area's checks, click it for the node's findings.</p>
{_first_section_html(nodes)}
{f"<h2>Shared dependencies failing</h2><ul>{shared}</ul>" if shared else ""}
<h2>Findings</h2>
<table class="findings"><tr><th>node</th><th>status</th><th>check</th><th>subject</th><th>summary</th>
<th>remedy</th><th>evidence</th></tr>{_findings_html(ordered, anchors)}</table>
<h2>Nodes x areas</h2>
{_matrix_html(ordered, anchors, areas)}
<h2>GPU firmware</h2>{f"<ul>{outliers}</ul>" if outliers else f"<p>{SAME_FIRMWARE}</p>"}
<h2>Tuning ledger</h2>{f"<ul>{ledger}</ul>" if ledger else f"<p>{LEDGER_NONE}</p>"}
<h2>Behind the fleet</h2>{f"<ul>{laggards}</ul>" if laggards else f"<p>{FLEET_NONE}</p>"}
<h2>Silent data corruption across the fleet</h2>{f"<ul>{replays}</ul>" if replays else f"<p>{SDC_NONE}</p>"}
<h2>Benchmarks</h2>{charts or "<p>no bench results in these reports</p>"}
</body></html>
"""


# What costs the fleet most: each node's priced findings (dltune.costs.impact) added up by check, a node's
# one loss counted once (its scope at its largest price, attributed to the check that priced it so), a
# node out of scheduling counted as all its GPUs. Clock-class findings a node could not price (no
# matmul of that GPU on the node: the bench ran on the CPU, or not on that GPU) are priced here against
# the fleet's median matmul for the same device and dtype, over at least FLEET_MIN_NODES nodes.


@record(frozen=True)
class CheckCost:
    """One check's loss across the fleet: GPU-hours a day, the nodes, how it was priced."""

    check: str
    gpu_hours_per_day: float
    hosts: tuple[str, ...]
    bases: tuple[str, ...]

    def said(self) -> str:
        return (
            f"{self.check}: {self.gpu_hours_per_day:.1f} GPU-hours a day on {len(self.hosts)} node(s) "
            f"({', '.join(self.bases)}): {_listed(list(self.hosts))}"
        )


def _matmul_figures(results: Sequence[dict[str, Any]]) -> list[tuple[str, str, str, str | None, float]]:
    """(device, device name, dtype, uuid, TFLOPS) of a node's measured matmuls."""
    found = []
    for r in results:
        evidence, value = r.get("evidence") or {}, (r.get("metrics") or {}).get("tflops")
        if r.get("id") != "bench.matmul" or r.get("status") not in ("pass", "warn", "fail"):
            continue
        name, dtype = evidence.get("name"), evidence.get("dtype")
        if not (isinstance(name, str) and isinstance(dtype, str) and isinstance(value, int | float)):
            continue
        if isinstance(value, bool) or not value > 0:
            continue
        uuid = evidence.get("uuid") if isinstance(evidence.get("uuid"), str) else None
        found.append((str(r.get("subject") or "").rpartition(":")[0], name, dtype, uuid, float(value)))
    return found


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def fleet_priced(nodes: Sequence[NodeReport]) -> list[NodeReport]:
    """The nodes with their unpriced clock-class findings priced against the fleet's matmul figure."""
    from dltune.costs.impact import CLOCK_CLASS, MEASURED, PRICING_DTYPES, priced, uuid_of

    usable = [n for n in nodes if not n.problem and not n.stale]
    figures = {id(n): _matmul_figures(n.results) for n in usable}
    by_kind: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for node in usable:
        for _device, name, dtype, _uuid, value in figures[id(node)]:
            by_kind.setdefault((name, dtype), []).append((node.host, value))
    medians = {
        kind: (_median([v for _, v in values]), len({h for h, _ in values}))
        for kind, values in by_kind.items()
        if len({h for h, _ in values}) >= FLEET_MIN_NODES
    }
    out = []
    for node in nodes:
        mine = figures.get(id(node), [])
        results = []
        for r in node.results:
            impact = r.get("impact") or {}
            if r.get("id") in CLOCK_CLASS and impact.get("basis") == "unpriced" and mine:
                uuid = uuid_of(r.get("subject"))
                candidates = [f for f in mine if f[3] == uuid] or [f for f in mine if f[0] == "cpu"]
                ranked = sorted(
                    (f for f in candidates if (f[1], f[2]) in medians),
                    key=lambda f: (
                        PRICING_DTYPES.index(f[2]) if f[2] in PRICING_DTYPES else len(PRICING_DTYPES)
                    ),
                )
                if ranked:
                    device, name, dtype, _uuid, value = ranked[0]
                    median, count = medians[(name, dtype)]
                    method = (
                        f"{dtype} matmul {value:.2f} TFLOPS on {device}, {value / median:.1%} of the median "
                        f"{median:.2f} of {name} on {count} nodes (dltune report: the fleet's figure)"
                    )
                    if device == "cpu":
                        method += "; the bench ran on the CPU, whose figure stands for the node's GPUs"
                    gpus = impact["gpus"] if isinstance(impact.get("gpus"), int) else 1
                    use = float(impact["use"]) if isinstance(impact.get("use"), int | float) else 1.0
                    r = {**r, "impact": priced(1.0 - value / median, "matmul", f"matmul:{uuid or device}",
                                               gpus, use, MEASURED, method)}  # fmt: skip
            results.append(r)
        out.append(NodeReport(node.host, results, node.problem, node.sources, node.stale))
    return out


def check_costs(nodes: Sequence[NodeReport]) -> tuple[list[CheckCost], list[tuple[str, str, list[str]]]]:
    """The checks by GPU-hours a day lost across the fleet, most first; and the findings no method
    priced, by severity then by how many nodes have them (rollup's order)."""
    from dltune.costs.impact import ESTIMATED, MEASURED

    hours: dict[str, float] = {}
    hosts: dict[str, set[str]] = {}
    bases: dict[str, set[str]] = {}
    priced_checks: dict[str, set[str]] = {}
    for node in nodes:
        if node.problem or node.stale:
            continue
        best: dict[str, tuple[float, dict[str, Any]]] = {}
        for r in node.results:
            impact = r.get("impact") or {}
            value = impact.get("gpu_hours_per_day")
            if impact.get("basis") not in (MEASURED, ESTIMATED) or isinstance(value, bool):
                continue
            if not isinstance(value, int | float):
                continue
            priced_checks.setdefault(node.host, set()).add(r["id"])
            scope = str(impact.get("scope"))
            if scope not in best or value > best[scope][0]:
                best[scope] = (float(value), r)
        chosen = {"node": best["node"]} if "node" in best else best
        for value, r in chosen.values():
            hours[r["id"]] = hours.get(r["id"], 0.0) + value
            hosts.setdefault(r["id"], set()).add(node.host)
            bases.setdefault(r["id"], set()).add(str(r["impact"]["basis"]))
    costs = [
        CheckCost(check, round(total, 2), tuple(sorted(hosts[check])), tuple(sorted(bases[check])))
        for check, total in hours.items()
    ]
    costs.sort(key=lambda c: (-c.gpu_hours_per_day, c.check))
    unpriced = [
        (check, status, [h for h in found if check not in priced_checks.get(h, set())])
        for check, status, found in rollup(nodes)
    ]
    return costs, [(c, s, h) for c, s, h in unpriced if h and c not in hours]


LEDGER_NONE = "no node reports a tuning ledger (dltune.cluster.site with dltune_ledger: true measures one)"


@record(frozen=True)
class LedgerLine:
    """One role's measured effect across the fleet: the median change of its nodes and their spread."""

    role: str
    kind: str  # "small-file reads", "scratch files in /tmp"
    changes: tuple[float, ...]  # each node's relative change (before: measured)
    within_noise: int  # nodes whose change is within their measurement's noise
    not_before: int  # nodes with nothing to measure before the role (a new mount)

    def said(self) -> str:
        measured = len(self.changes)
        if not measured:
            return f"{self.role}: {self.kind}: nothing measured before the role on {self.not_before} node(s)"
        median = _median(list(self.changes))
        spread = f"spread {min(self.changes):+.0%}..{max(self.changes):+.0%}"
        noise = f"; within noise on {self.within_noise} of them" if self.within_noise else ""
        if self.within_noise * 2 > measured:
            return (
                f"{self.role}: {self.kind}: within the measurement's noise on {self.within_noise} of "
                f"{measured} node(s) (median {median:+.0%}, {spread}): no gain shown"
            )
        return f"{self.role}: {self.kind} {median:+.0%} (median of {measured} node(s), {spread}{noise})"


def tuning_ledger(nodes: Sequence[NodeReport]) -> list[LedgerLine]:
    """Each role's effect over the nodes whose audit reports a tuning ledger (system.tuning_ledger)."""
    from dltune.costs.ledger import NOT_BEFORE, WITHIN_NOISE

    found: dict[tuple[str, str], tuple[list[float], list[int]]] = {}
    for node in nodes:
        if node.problem or node.stale:
            continue
        for r in node.results:
            evidence = r.get("evidence") or {}
            if r.get("id") != "system.tuning_ledger" or r.get("status") != "pass":
                continue
            for change in evidence.get("changes") or []:
                if not isinstance(change, dict):
                    continue
                changes, counts = found.setdefault(
                    (str(r.get("subject")), str(change.get("kind"))), ([], [0, 0])
                )
                value = change.get("change")
                if change.get("verdict") == NOT_BEFORE or not isinstance(value, int | float):
                    counts[1] += 1
                    continue
                changes.append(float(value))
                counts[0] += change.get("verdict") == WITHIN_NOISE
    return [
        LedgerLine(role, kind, tuple(changes), counts[0], counts[1])
        for (role, kind), (changes, counts) in sorted(found.items())
    ]
