"""`dltune report`: nodes' envelopes merged; unreachable and crashed nodes kept; an outlier GPU and a
failing node stand out in the summary, the JSON and the HTML."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from typer.testing import CliRunner

from dltune.cli import app
from dltune.cluster import bench_charts, load


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
        "time": "t",
        "valid_until": "t",
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
    assert "FAIL storage.data_noatime [/data]" in outcome.output
    merged = json.loads((tmp_path / "r.json").read_text())
    assert [n["host"] for n in merged["nodes"]] == ["node1", "node2", "node3", "node4"]
    page = (tmp_path / "r.html").read_text()
    parser = Cells()
    parser.feed(page)
    text = " ".join(parser.text)
    assert "unreachable: ssh timed out" in text and "apply role data_disks" in text
    assert "node4" in text and "crashed" in text


def test_an_outlier_gpu_is_drawn_in_the_outlier_colour(tmp_path: Path) -> None:
    charts = bench_charts(load([write_fleet(tmp_path)]))
    bf16 = next(c for c in charts if "matmul bf16" in c)
    assert bf16.count('fill="#c62828"') == 1 and bf16.count('fill="#2e7d32"') == 1


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
