"""What a person reads: the node table and the cluster summary put findings first, fold what does not
apply into one line (`--all` shows it), and read at 100 columns; `dltune check` decides when its
bench part must not run."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from dltune.bench.judge import bench_gate
from dltune.checks import run_checks
from dltune.cluster import load, render_summary
from dltune.model import Result, Status
from dltune.probes import collect_snapshot
from dltune.report import STATUS_ORDER, render_human
from tests.conftest import FIXTURES

WIDTH = 100
STATUS_WORDS = "|".join(s.value.upper() for s in Status)


def rendered(results: list[Result], show_all: bool = False) -> str:
    out = io.StringIO()
    render_human(results, Console(file=out, width=WIDTH), "node1", show_all=show_all)
    return out.getvalue()


def row_statuses(text: str) -> list[str]:
    return re.findall(rf"^│ ({STATUS_WORDS}) ", text, flags=re.MULTILINE)


def test_the_node_table_puts_findings_first_folds_skips_and_reads_at_100_columns() -> None:
    results = run_checks(collect_snapshot(FIXTURES / "data_relatime_managed"))
    skipped = sum(r.status is Status.SKIP for r in results)
    assert skipped and any(r.status is Status.FAIL for r in results)
    text = rendered(results)
    order = [s.value.upper() for s in STATUS_ORDER]
    statuses = row_statuses(text)
    assert statuses[:2] == ["FAIL", "FAIL"] and statuses == sorted(statuses, key=order.index)
    assert "SKIP" not in statuses
    assert f"{skipped} skipped (not applicable on this node): `dltune audit --all` lists them" in text
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    # Check ids never fold mid-name, and each finding's remedy is under it.
    assert "storage.data_noatime" in text and "fix: apply role data_disks" in text
    every = rendered(results, show_all=True)
    assert row_statuses(every).count("SKIP") == skipped and "--all" not in every


def node_file(directory: Path, host: str, statuses: list[str]) -> None:
    results = [
        {"id": f"storage.check{i}", "area": "storage", "status": s, "subject": f"/d{i}", "summary": s}
        for i, s in enumerate(statuses)
    ] + [{"id": "gpu.persistence", "area": "gpu", "status": "pass", "summary": "ok"}]
    document = {
        "schema_version": 1,
        "host": host,
        "valid_until": "2999-01-01T00:00:00+00:00",
        "results": results,
    }
    (directory / f"{host}.audit.json").write_text(json.dumps(document))


def test_the_cluster_summary_lists_nodes_with_findings_first_and_folds_the_clean_ones(tmp_path: Path) -> None:
    for i in range(40):
        node_file(tmp_path, f"ok{i:02d}", ["pass"])
    node_file(tmp_path, "awarn", ["warn", "pass"])
    node_file(tmp_path, "zfail", ["pass", "fail", "warn", "fail", "fail", "fail"])
    (tmp_path / "gone.audit.json").write_text('{"problem": "unreachable: ssh timed out"}')
    out = io.StringIO()
    render_summary(load([tmp_path]), Console(file=out, width=WIDTH))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    rows = [line for line in text.splitlines() if line.startswith("│ ")]
    assert [r.split()[1] for r in rows if r.split()[1] in ("gone", "zfail", "awarn")] == [
        "gone",
        "zfail",
        "awarn",
    ]
    assert "storage fail" in text and "+2 more" in text
    assert "ok00" not in "".join(rows) and "40 node(s) with no finding: ok00, ok01" in text
    every = io.StringIO()
    render_summary(load([tmp_path]), Console(file=every, width=WIDTH), show_all=True)
    assert "ok39" in every.getvalue()


def test_the_bench_gate_names_why_the_bench_does_not_run() -> None:
    critical = Result("gpu.xid", Status.FAIL, "GPU fell off the bus", critical=True)
    minor = Result("storage.tmp_tmpfs", Status.FAIL, "not a tmpfs")
    assert bench_gate([minor], {}, torch_installed=True, asked_not_to=False) is None
    gate = bench_gate([minor, critical], {}, torch_installed=True, asked_not_to=False)
    assert gate is not None and gate.status is Status.SKIP and "gpu.xid" in gate.summary
    busy = bench_gate([minor], {1: (4000, 4001)}, torch_installed=True, asked_not_to=False)
    assert busy is not None and "GPU 1: pid 4000, 4001" in busy.summary and "job" in busy.summary
    no_torch = bench_gate([], {}, torch_installed=False, asked_not_to=False)
    assert no_torch is not None and "pip install 'dltune[bench]'" in (no_torch.remedy or "")
    assert bench_gate([], {}, torch_installed=True, asked_not_to=True) is not None
