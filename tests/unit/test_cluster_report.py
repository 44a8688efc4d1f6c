"""`dltune report`: nodes' envelopes merged; unreachable and crashed nodes kept; an outlier GPU and a
failing node stand out in the summary, the JSON and the HTML."""

from __future__ import annotations

import io
import json
import re
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from dltune.cli import app
from dltune.fleet.cluster import (
    EVIDENCE_ITEMS,
    SUMMARY_CHARS,
    NodeReport,
    bench_charts,
    findings_by_check,
    firmware_outliers,
    fleet_priced,
    headline,
    merged_json,
    node_rank,
    render_html,
    render_summary,
    standing_word,
)
from dltune.fleet.node_files import load
from dltune.outputs.report import STATUS_COLOUR
from tests import report_fleet
from tests.fuzzing import FUZZ

NOW = datetime.now(timezone.utc)


def result(check_id: str, status: str, subject: str | None = None, **metrics: float) -> dict[str, object]:
    return {
        "id": check_id,
        "area": check_id.split(".")[0],
        "subject": subject,
        "status": status,
        "summary": f"{check_id} {status}",
        "evidence": {"x": 1},
        "remedy": "apply role data_disks",
        "metrics": metrics,
        "critical": False,
    }


def envelope(host: str, results: list[dict[str, object]]) -> dict[str, object]:
    return {
        "schema_version": 1,
        "tool_version": "0.1.0",
        "host": host,
        "time": NOW.isoformat(timespec="seconds"),
        "valid_until": (NOW + timedelta(hours=1)).isoformat(timespec="seconds"),
        "results": results,
    }


def write_fleet(tmp_path: Path) -> Path:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "node1.json").write_text(
        json.dumps(envelope("node1", [result("storage.data_noatime", "pass")]))
    )
    (reports / "node2.audit.json").write_text(
        json.dumps(envelope("node2", [result("storage.data_noatime", "fail", "/data")]))
    )
    (reports / "node2.bench.json").write_text(
        json.dumps(
            envelope(
                "node2",
                [
                    result("bench.matmul", "pass", "cuda:0:bf16", tflops=800.0),
                    result("bench.matmul", "warn", "cuda:1:bf16", tflops=500.0),
                ],
            )
        )
    )
    (reports / "node3.json").write_text(
        json.dumps({"host": "node3", "problem": "unreachable: ssh timed out"})
    )
    (reports / "node4.json").write_text("Traceback (most recent call last):")
    return reports


def test_every_node_is_kept_and_judged(tmp_path: Path) -> None:
    nodes = {n.host: n for n in load([write_fleet(tmp_path)])}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node1"].healthy and not nodes["node2"].healthy
    assert len(nodes["node2"].results) == 3  # audit and bench of one host merged
    assert nodes["node3"].problem == "unreachable: ssh timed out" and not nodes["node3"].healthy
    assert (nodes["node4"].problem or "").startswith("crashed")


class Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.open_tags = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.open_tags += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_cli_writes_summary_json_and_html(tmp_path: Path) -> None:
    reports = write_fleet(tmp_path)
    outcome = CliRunner().invoke(
        app, ["report", str(reports), "--html", str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json")]
    )
    assert outcome.exit_code == 1, outcome.output  # node2 fails, node3/node4 missing
    assert "4 node(s), 1 healthy" in outcome.output and "UNREACHABLE" in outcome.output
    # Each finding with what is wrong (the console may be 80 columns: the findings cell wraps).
    cells = " ".join(
        line.split("│")[-2].strip() for line in outcome.output.splitlines() if line.startswith("│")
    )
    assert "FAIL storage.data_noatime [/data]: storage.data_noatime fail" in cells
    merged = json.loads((tmp_path / "r.json").read_text())
    assert [n["host"] for n in merged["nodes"]] == ["node1", "node2", "node3", "node4"]
    page = (tmp_path / "r.html").read_text()
    parser = Cells()
    parser.feed(page)
    text = " ".join(parser.text)
    assert "unreachable: ssh timed out" in text and "apply role data_disks" in text
    assert "node4" in text and "crashed" in text


def test_an_outlier_gpu_is_drawn_in_the_colour_of_its_verdict(tmp_path: Path) -> None:
    """The bench calls an outlier a warn: its bar is the warn colour (it was the fail red)."""
    charts = bench_charts(load([write_fleet(tmp_path)]))
    bf16 = next(c for c in charts if "matmul bf16" in c)
    assert (
        bf16.count(f'fill="{STATUS_COLOUR["warn"]}"') == 1
        and bf16.count(f'fill="{STATUS_COLOUR["pass"]}"') == 1
    )
    assert STATUS_COLOUR["fail"] not in bf16


def test_200_nodes_of_8_gpus_stay_one_screen_high_and_the_slow_gpus_are_named() -> None:
    """1,600 GPUs grew the chart 22 px each (35,000 px): now the 20 lowest are bars, named, and every
    GPU is one tick on a strip above them; long labels are cut to fit and whole in their tooltip."""
    nodes = []
    for n in range(200):
        results = [
            {
                "id": "bench.matmul",
                "area": "bench",
                "status": "pass",
                "subject": f"cuda:{g}:bf16",
                "summary": "x",
                "metrics": {"tflops": 700.0 - (300.0 if (n, g) in ((17, 3), (150, 0)) else 0.0) + g},
            }
            for g in range(8)
        ]
        nodes.append(NodeReport(f"gpu-node-with-a-long-site-name-{n:03d}.cluster.example.org", results))
    (chart,) = bench_charts(nodes)
    height = int(re.search(r'height="(\d+)"', chart).group(1))  # type: ignore[union-attr]
    assert height < 600
    assert chart.count("<rect") == 20 and chart.count("<line") == 1600 + 1
    assert "all 1600: 2 below 85% of the best" in chart
    bars = re.findall(r'<text x="0" y="\d+" font-size="12"><title>([^<]*)</title>([^<]*)</text>', chart)
    assert len(bars) == 20
    site = "gpu-node-with-a-long-site-name-{}.cluster.example.org"
    assert [full for full, _ in bars[:2]] == [site.format("150") + " cuda:0", site.format("017") + " cuda:3"]
    assert bars[0][1] == (site.format("150") + " cuda:0")[:37] + "\u2026"
    assert chart.count(f'fill="{STATUS_COLOUR["warn"]}"') == 2


def test_all_healthy_exits_zero(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(envelope("a", [result("system.reboot_required", "pass")])))
    assert CliRunner().invoke(app, ["report", str(tmp_path / "a.json")]).exit_code == 0


def test_a_merged_report_in_the_same_directory_is_not_a_node(tmp_path: Path) -> None:
    """audit.yml and bench.yml write cluster.json into the directory they merge: the next run must not
    read that earlier merge as a node."""
    reports = write_fleet(tmp_path)
    first = CliRunner().invoke(app, ["report", str(reports), "--json", str(reports / "cluster.json")])
    assert first.exit_code == 1, first.output
    again = CliRunner().invoke(app, ["report", str(reports), "--json", str(reports / "cluster.json")])
    assert "4 node(s)" in again.output
    assert [n["host"] for n in json.loads((reports / "cluster.json").read_text())["nodes"]] == [
        "node1",
        "node2",
        "node3",
        "node4",
    ]


def test_a_multi_node_bench_joins_the_row_of_the_node_that_led_it(tmp_path: Path) -> None:
    """bench.yml saves `dltune bench --multi-node` as <leader>.multinode.bench.json: it is one more set
    of results on that node (its own columns), not a node of its own."""
    reports = write_fleet(tmp_path)
    (reports / "node1.multinode.bench.json").write_text(
        json.dumps(envelope("node1", [result("bench.multinode_allreduce", "pass", "nccl", busbw_gb_s=40.0)]))
    )
    nodes = {n.host: n for n in load([reports])}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert [r["id"] for r in nodes["node1"].results] == ["storage.data_noatime", "bench.multinode_allreduce"]
    assert nodes["node1"].sources == ["node1.json", "node1.multinode.bench.json"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("[1, 2]", "an object expected, found list"),
        (
            json.dumps(
                envelope("bad", [{k: v for k, v in result("gpu.ecc", "pass").items() if k != "status"}])
            ),
            "required key 'status' is missing",
        ),
        (
            json.dumps(envelope("bad", [{**result("gpu.ecc", "pass"), "summary": 42}])),
            "$.results[0].summary: a string expected, found an integer",
        ),
        (json.dumps(envelope("bad", [result("gpu.ecc", "healthy")])), "'healthy' is not one of"),
        (json.dumps({**envelope("bad", []), "results": {"id": "x"}}), "$.results: a list expected"),
        (json.dumps({"problem": 7}), "$.problem: a string expected"),
    ],
    ids=["array", "no-status", "number-for-string", "unknown-status", "results-object", "problem-number"],
)
def test_one_malformed_node_file_is_that_node_invalid_and_the_fleet_still_reports(
    tmp_path: Path, content: str, reason: str
) -> None:
    """One node's bad file used to crash the whole report (or, for an unknown status, count as
    healthy): now that node is `invalid` with the reason, every other node is rendered, and the
    report exits 1."""
    reports = write_fleet(tmp_path)
    (reports / "bad.json").write_text(content)
    nodes = {n.host: n for n in load([reports])}
    assert sorted(nodes) == ["bad", "node1", "node2", "node3", "node4"]
    bad = nodes["bad"]
    assert not bad.healthy and (bad.problem or "").startswith("invalid: bad.json: "), bad.problem
    assert reason in (bad.problem or "")
    assert nodes["node1"].healthy
    outcome = CliRunner().invoke(app, ["report", str(reports), "--html", str(tmp_path / "r.html")])
    assert outcome.exit_code == 1, outcome.output
    # The kind in capitals, the reason as given: the file's name keeps its case (it was upper-cased).
    assert "INVALID" in outcome.output and "invalid: bad.json" in outcome.output
    assert "BAD.JSON" not in outcome.output
    assert "invalid: bad.json" in (tmp_path / "r.html").read_text()


def test_a_report_past_its_valid_until_is_stale_not_healthy(tmp_path: Path) -> None:
    old = {**envelope("old", [result("gpu.ecc", "pass")]), "valid_until": "2020-01-01T00:00:00+00:00"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(envelope("new", [result("gpu.ecc", "pass")])))
    nodes = {n.host: n for n in load([tmp_path])}
    assert nodes["new"].healthy
    assert not nodes["old"].healthy and "valid until 2020-01-01" in (nodes["old"].stale or "")
    assert nodes["old"].results  # still shown
    outcome = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert outcome.exit_code == 1 and "STALE" in outcome.output


def test_an_envelope_of_a_newer_schema_is_named_not_misread(tmp_path: Path) -> None:
    (tmp_path / "future.json").write_text(json.dumps({**envelope("future", []), "schema_version": 2}))
    (node,) = load([tmp_path])
    assert "schema_version 2, this dltune reads up to 1" in (node.problem or "") and not node.healthy


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
RESULT_KEYS = ("id", "area", "status", "subject", "summary", "evidence", "remedy", "metrics", "critical")
RESULTS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            **{key: JSON_VALUES for key in RESULT_KEYS},
            "status": st.sampled_from(["pass", "warn", "fail", "error", "skip", "healthy", ""]) | JSON_VALUES,
            "id": st.sampled_from(["gpu.ecc", "bench.matmul", "bench.train_synthetic"]) | JSON_VALUES,
            "metrics": st.dictionaries(st.sampled_from(["tflops", "images_per_s"]), JSON_VALUES, max_size=2),
        },
    ),
    max_size=5,
)
ENVELOPES = st.fixed_dictionaries(
    {},
    optional={
        "schema_version": st.sampled_from([1, 2, 0, "1"]) | JSON_VALUES,
        "host": JSON_VALUES,
        "valid_until": st.sampled_from(["2020-01-01T00:00:00", "2999-01-01T00:00:00+00:00", "soon"])
        | JSON_VALUES,
        "results": RESULTS | JSON_VALUES,
        "problem": JSON_VALUES,
        "nodes": JSON_VALUES,
    },
)


@FUZZ
@given(documents=st.lists(ENVELOPES | JSON_VALUES, min_size=1, max_size=3))
def test_no_node_file_crashes_the_report(
    tmp_path_factory: pytest.TempPathFactory, documents: list[Any]
) -> None:
    """Random envelopes, right and wrong in every field: loading and every renderer finish, each node is
    either valid or names its problem, and no node with an unknown status is healthy."""
    directory = tmp_path_factory.mktemp("fuzz")
    for index, document in enumerate(documents):
        (directory / f"n{index}.json").write_text(json.dumps(document))
    nodes = load([directory])
    merged_json(nodes, "now")
    render_html(nodes, "now")
    render_summary(nodes, Console(file=io.StringIO(), width=120))
    for node in nodes:
        assert node.problem or all(
            r["status"] in ("pass", "warn", "fail", "error", "skip") for r in node.results
        )


def test_text_a_node_did_not_escape_is_escaped_in_the_merged_outputs(tmp_path: Path) -> None:
    """A node on an older dltune writes a mount point with a byte that is not UTF-8 into its JSON: the
    merged JSON and the HTML page stay valid UTF-8."""
    document = json.dumps(envelope("old", [result("storage.data_space", "pass", "/data/PLACEHOLDER")]))
    (tmp_path / "old.json").write_bytes(document.encode().replace(b"PLACEHOLDER", b"caf\xff"))
    html_file, json_file = tmp_path / "r.html", tmp_path / "r.json"
    outcome = CliRunner().invoke(
        app, ["report", str(tmp_path / "old.json"), "--html", str(html_file), "--json", str(json_file)]
    )
    assert outcome.exit_code in (0, 1), outcome.output
    merged = json.loads(json_file.read_bytes().decode("utf-8"))
    assert merged["nodes"][0]["results"][0]["subject"] == "/data/caf\\xff"
    html_file.read_bytes().decode("utf-8")


def firmware_result(vbios: str, inforom: str = "G520.0200.00.05") -> dict[str, object]:
    """gpu.firmware as a node writes it: versions by model, each with the GPUs that run it."""
    found = result("gpu.firmware", "pass")
    found["evidence"] = {
        "models": {
            "NVIDIA H100 80GB HBM3": {"vbios": {vbios: [0, 1, 2, 3]}, "inforom": {inforom: [0, 1, 2, 3]}}
        }
    }
    return found


def test_nodes_whose_gpu_firmware_differs_from_the_clusters_are_named(tmp_path: Path) -> None:
    for node, vbios in (("n1", "96.00.99.00.01"), ("n2", "96.00.99.00.01"), ("n3", "96.00.61.00.01")):
        (tmp_path / f"{node}.audit.json").write_text(json.dumps(envelope(node, [firmware_result(vbios)])))
    nodes = load(sorted(tmp_path.glob("*.json")))
    assert firmware_outliers(nodes) == {
        "n3": ["NVIDIA H100 80GB HBM3 vbios 96.00.61.00.01, 2 node(s) run 96.00.99.00.01"]
    }
    out = io.StringIO()
    render_summary(nodes, Console(file=out, width=100))
    assert "firmware differs from the cluster's on n3" in out.getvalue()
    page = render_html(nodes, "2026-11-24T00:00:00Z")
    assert "<h2>GPU firmware</h2><ul><li>n3: NVIDIA H100 80GB HBM3 vbios 96.00.61.00.01" in page


def test_one_firmware_everywhere_or_no_majority() -> None:
    from dltune.fleet.cluster import NodeReport

    same = [NodeReport(f"n{i}", [firmware_result("96.00.99.00.01")]) for i in range(3)]
    assert firmware_outliers(same) == {}
    split = [NodeReport("a", [firmware_result("1")]), NodeReport("b", [firmware_result("2")])]
    assert set(firmware_outliers(split)) == {"a", "b"}, "with no majority every node is named"


def test_findings_of_one_shared_dependency_are_one_line_not_n_nodes(tmp_path: Path) -> None:
    """212 nodes failing nfs.responsive on one NFS server, 3 on another, one time-source warning: the
    summary, the merged JSON and the HTML name each dependency once with its node count, largest
    first; a node whose only finding is its own (no dependency) is not grouped."""
    reports = tmp_path / "reports"
    reports.mkdir()

    def shared(check_id: str, status: str, dependency: str | None) -> dict[str, object]:
        return {**result(check_id, status, "/mnt/nfs"), "shared_dependency": dependency}

    for i in range(212):
        (reports / f"gpu{i:03d}.json").write_text(
            json.dumps(envelope(f"gpu{i:03d}", [shared("nfs.responsive", "fail", "NFS server 10.0.0.5")]))
        )
    for i in range(3):
        (reports / f"cpu{i}.json").write_text(
            json.dumps(
                envelope(
                    f"cpu{i}",
                    [
                        shared("nfs.vip_mounts", "fail", "NFS server 10.0.1.7"),
                        shared("system.time_sync", "fail", "time source (NTP servers)"),
                    ],
                )
            )
        )
    (reports / "lone.json").write_text(json.dumps(envelope("lone", [shared("gpu.ecc", "fail", None)])))
    nodes = load([reports])
    out = io.StringIO()
    render_summary(nodes, Console(file=out, width=400))
    text = out.getvalue()
    lines = [line for line in text.splitlines() if line.startswith("shared dependency")]
    assert lines[0].startswith("shared dependency NFS server 10.0.0.5: 212 node(s) (nfs.responsive): gpu000")
    assert "(202 more)" in lines[0] and len(lines) == 3
    assert lines[1].startswith("shared dependency NFS server 10.0.1.7: 3 node(s)")
    merged = json.loads(merged_json(nodes, "now"))["shared_dependencies"]
    assert [(g["dependency"], len(g["nodes"])) for g in merged] == [
        ("NFS server 10.0.0.5", 212),
        ("NFS server 10.0.1.7", 3),
        ("time source (NTP servers)", 3),
    ]
    page = render_html(nodes, "now")
    assert "NFS server 10.0.0.5: 212 node(s)" in page and "lone" not in str(merged)


# Issue 46: the report as an administrator reads it, on the generated fleets (tests/report_fleet.py).


@pytest.fixture(scope="module")
def fleet_200(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[NodeReport], dict[str, list[str]]]:
    directory = tmp_path_factory.mktemp("fleet")
    kinds = report_fleet.write_fleet(directory, 200)
    return fleet_priced(load([directory])), kinds


def summary(nodes: list[NodeReport], width: int = 160, show_all: bool = False) -> str:
    out = io.StringIO()
    render_summary(nodes, Console(file=out, width=width), show_all=show_all)
    return out.getvalue()


def node_rows(text: str) -> list[tuple[str, str]]:
    """(node, worst) of each row of the summary's node table."""
    return re.findall(r"^│ (\S+)\s+│ (\S+)\s+│", text, flags=re.MULTILINE)


def test_the_summary_reads_title_costs_shared_dependency_rollup_then_nodes(
    fleet_200: tuple[list[NodeReport], dict[str, list[str]]],
) -> None:
    """200 generated nodes: the title line first, with one count of the healthy nodes and what they
    hold (the fold line's count is the title's), what the others are; then what to fix first, the
    shared dependency (it came after the 40-row table), the findings by check (above the title, it
    was), and the nodes."""
    nodes, kinds = fleet_200
    text = summary(nodes)
    lines = text.splitlines()
    assert lines[0] == "dltune report: 200 node(s), 173 healthy (155 with no finding, 18 with warnings only)"
    assert lines[1] == "not healthy: 20 failing, 4 stale, 2 invalid, 1 unreachable"
    assert lines[2].startswith("what to fix first: ")
    shared = text.index("shared dependency NFS server 10.0.0.5: 8 node(s) (nfs.responsive)")
    assert lines[2] in text[:shared] and shared < text.index("findings by check") < text.index("┃ node")
    assert f"{len(kinds['clean'])} node(s) with no finding: gpu" in text and len(kinds["clean"]) == 155
    assert len(kinds["warn_only"]) == 18


def test_findings_by_check_count_every_node_the_gravest_first(
    fleet_200: tuple[list[NodeReport], dict[str, list[str]]],
) -> None:
    """Severity first (no usable report, fail, error, stale, warn), then nodes, then GPU-hours a day:
    the 8-node NFS fail and the 7-node ECC fail above the two 20-node warnings (node count first put
    them below); of the two warnings on 20 nodes the priced one first (by name, env.* came first);
    invalid, unreachable and stale nodes are lines of their own (they were left out)."""
    nodes, kinds = fleet_200
    lines = findings_by_check(nodes)
    assert [(line.what, line.status, len(line.hosts)) for line in lines] == [
        ("INVALID", "no report", 2),
        ("UNREACHABLE", "no report", 1),
        ("nfs.responsive", "fail", 8),
        ("gpu.ecc", "fail", 7),
        ("storage.tmp_tmpfs", "fail", 5),
        ("STALE", "stale", 4),
        ("gpu.clocks", "warn", 20),
        ("env.cublas_workspace", "warn", 20),
    ]
    assert lines[3].gpu_hours_per_day == 7 * 192 and lines[-1].gpu_hours_per_day is None
    counted = {host for line in lines for host in line.hosts}
    assert counted == {host for kind, hosts in kinds.items() if kind != "clean" for host in hosts}
    text = summary(nodes)
    rollup = text[text.index("findings by check") : text.index("┏")].splitlines()[1:]
    assert [line.split(" on ")[0].strip() for line in rollup] == [
        "INVALID",
        "UNREACHABLE",
        "nfs.responsive fail",
        "gpu.ecc fail",
        "storage.tmp_tmpfs fail",
        "STALE",
        "gpu.clocks warn",
        "env.cublas_workspace warn",
    ]
    assert rollup[3].startswith("  gpu.ecc fail on 7 node(s), 1344.0 GPU-hours a day: ")


def test_nodes_with_as_many_findings_order_by_price_only_after_severity_and_nodes() -> None:
    def node(host: str, *findings: tuple[str, str, float | None]) -> NodeReport:
        results = []
        for check, status, hours in findings:
            impact = {"basis": "unpriced", "why": "x"}
            if hours is not None:
                impact = {"basis": "measured", "scope": check, "gpus": 1, "gpu_hours_per_day": hours}
            results.append({**result(check, status), "impact": impact})
        return NodeReport(host, results)

    nodes = [
        node("a", ("gpu.cheap", "warn", 1.0), ("gpu.dear", "warn", 9.0), ("system.odd", "warn", None)),
        node("b", ("gpu.cheap", "warn", 1.0), ("gpu.dear", "warn", 9.0), ("system.odd", "warn", None)),
        node("c", ("system.odd", "warn", None), ("storage.x", "error", None)),
        node("d", ("gpu.lone", "fail", 50.0)),
    ]
    assert [line.what for line in findings_by_check(nodes)] == [
        "gpu.lone",  # fail before error before warn, whatever the nodes
        "storage.x",
        "system.odd",  # 3 nodes before 2, priced or not
        "gpu.dear",  # 2 nodes each: the dearer first
        "gpu.cheap",
    ]


def test_nodes_rank_as_what_they_are_and_their_worst_says_it() -> None:
    """A stale report ranks after the nodes that fail or err and before the ones that warn, and its
    worst says STALE (it sorted with the failing ones while saying warn); a node without a usable report
    first, its kind in capitals."""
    stale_until = "2020-01-01T00:00:00+00:00"
    nodes = [
        NodeReport("a-warn", [result("system.time_sync", "warn")]),
        NodeReport(
            "b-stale-warn",
            [result("system.time_sync", "warn")],
            stale=f"b.json was valid until {stale_until}",
        ),
        NodeReport(
            "c-stale-fail", [result("gpu.ecc", "fail")], stale=f"c.json was valid until {stale_until}"
        ),
        NodeReport("d-error", [result("gpu.dcgm", "error")]),
        NodeReport("e-fail", [result("gpu.ecc", "fail")]),
        NodeReport("f-invalid", problem="invalid: f.json: $: an object expected, found list"),
        NodeReport("g-pass", [result("gpu.ecc", "pass")]),
    ]
    expected = [
        ("f-invalid", "INVALID"),
        ("e-fail", "fail"),
        ("d-error", "error"),
        ("b-stale-warn", "STALE"),
        ("c-stale-fail", "STALE"),
        ("a-warn", "warn"),
        ("g-pass", "pass"),
    ]
    assert [(n.host, standing_word(n)) for n in sorted(nodes, key=node_rank)] == expected
    assert node_rows(summary(nodes, show_all=True)) == expected
    text = summary(nodes)
    assert "g-pass" not in "".join(line for line in text.splitlines() if line.startswith("│"))
    assert "STALE: c.json was valid until 2020-01-01T00:00:00+00:00; it said then:" in text


def test_each_finding_in_the_node_table_says_what_is_wrong(
    fleet_200: tuple[list[NodeReport], dict[str, list[str]]],
) -> None:
    """The findings column showed check ids only ("FAIL gpu.ecc [GPU 3]"): now each with its summary, a
    GPU named by its index; a long summary cut at SUMMARY_CHARS (the page and the JSON hold it whole)."""
    nodes, kinds = fleet_200
    text = summary(nodes, width=200)
    assert re.search(r"FAIL gpu\.ecc \[GPU \d\]: GPU \d: 2 uncorrected ECC errors \(volatile", text)
    assert "FAIL nfs.responsive [/mnt/datasets]: /mnt/datasets (NFS server 10.0.0.5) did not answer" in text
    long = NodeReport("n", [{**result("gpu.ecc", "fail"), "summary": "x" * (SUMMARY_CHARS + 50)}])
    cut = summary([long], width=400)
    assert "x" * (SUMMARY_CHARS - 1) + "\u2026" in cut and "x" * SUMMARY_CHARS not in cut
    assert (node_rows(text)[0], node_rows(text)[3]) == (
        (kinds["invalid"][0], "INVALID"),
        (kinds["ecc"][0], "fail"),
    )


def test_the_headline_counts_each_node_once() -> None:
    """healthy = no finding + warnings only; the others by what they are; a fleet with no warning says
    no parenthesis, a healthy fleet no second line."""
    nodes = [NodeReport("a", [result("gpu.ecc", "pass")]), NodeReport("b", [result("gpu.ecc", "pass")])]
    assert headline(nodes) == ["dltune report: 2 node(s), 2 healthy"]
    nodes.append(NodeReport("c", problem="not installed: dltune is not on the PATH"))
    nodes.append(NodeReport("d", problem="the node said something without a colon"))
    assert headline(nodes) == [
        "dltune report: 4 node(s), 2 healthy",
        "not healthy: 1 no report, 1 not installed",
    ]


def test_the_page_puts_findings_first_folds_the_clean_nodes_and_greys_the_stale_and_invalid(
    fleet_200: tuple[list[NodeReport], dict[str, list[str]]],
) -> None:
    nodes, kinds = fleet_200
    page = render_html(nodes, "now")
    order = [
        "<b>dltune report: 200 node(s)",
        "<h2>What to fix first</h2>",
        "<h2>Shared dependencies failing</h2>",
        "<h2>Findings</h2>",
        '<table class="matrix">',
        '<details class="clean"><summary>155 node(s) with no finding: ',
    ]
    assert [page.index(part) for part in order] == sorted(page.index(part) for part in order)
    matrix = page[
        page.index('<table class="matrix">') : page.index("</table>", page.index('<table class="matrix">'))
    ]
    rows = dict(re.findall(r'<tr( class="grey")?><th><span class="tok">([^<]+)</span>', matrix)[::-1])
    rows = {
        host: grey
        for grey, host in re.findall(r'<tr( class="grey")?><th><span class="tok">([^<]+)</span>', matrix)
    }
    assert set(rows) == {host for kind, hosts in kinds.items() if kind != "clean" for host in hosts}
    greyed = set(kinds["stale"] + kinds["invalid"] + kinds["unreachable"])
    assert {host for host, grey in rows.items() if grey} == greyed
    # A stale node's cells carry no status colour; a failing node's do.
    stale_row = matrix[matrix.index(f'<span class="tok">{kinds["stale"][0]}</span>') :].split("</tr>")[0]
    ecc_row = matrix[matrix.index(f'<span class="tok">{kinds["ecc"][0]}</span>') :].split("</tr>")[0]
    assert "background:" not in stale_row and f"background:{STATUS_COLOUR['fail']}" in ecc_row
    findings = page[page.index("<h2>Findings</h2>") : page.index('<table class="matrix">')]
    assert findings.count('<tr class="finding grey" id=') == len(greyed)
    first = re.search(r'<tr class="finding[^"]*" id="node-0"><td><span class="tok">([^<]+)<', findings)
    assert first and first.group(1) == kinds["invalid"][0]


def test_evidence_reads_as_key_value_lines_and_ids_never_break() -> None:
    evidence = {
        "uncorrected": {"volatile": 2},
        "reasons": ["hw_slowdown", "power_brake"],
        "flag": True,
        "path": "/data/volume-3/with/a/rather/long/path",
        **{f"k{i}": i for i in range(EVIDENCE_ITEMS)},
    }
    node = NodeReport(
        "gpu-node-017.example.org", [{**result("env.cublas_workspace", "warn"), "evidence": evidence}]
    )
    page = render_html([node], "now")
    cell = page[page.index('<td class="ev">') :].split("</td>")[0]
    assert '<span class="k">uncorrected.volatile</span>: 2' in cell
    assert '<span class="k">reasons</span>: hw_slowdown, power_brake' in cell and "flag</span>: true" in cell
    assert '/data/<wbr><span class="tok">volume-3/</span><wbr>with/' in cell  # a long path breaks at "/"
    assert "{" not in cell and "the merged JSON holds the rest" in cell
    # Node names and check ids are tokens the page never breaks; a word with a hyphen is kept whole.
    assert '<td><span class="tok">gpu-node-017.example.org</span></td>' in page
    assert '<td><span class="tok">env.cublas_workspace</span></td>' in page
    assert ".tok, table.costs td:first-child { white-space: nowrap; }" in page
    assert "overflow-wrap: anywhere" not in page
