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
from dltune.fleet.cluster import render_summary
from dltune.fleet.node_files import load
from dltune.model import Result, Status
from dltune.outputs.human import render_human
from dltune.outputs.report import STATUS_ORDER
from dltune.probes import collect_snapshot
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
    assert text.rstrip().endswith(f"{skipped} skipped: `dltune audit --all` lists every check")
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


def test_gpus_show_as_their_index_and_passes_fold_into_one_line() -> None:
    """On an 8-GPU node the idx:UUID subject took a third of the width and PASS rows filled the screen:
    the table names a GPU by index (JSON keeps the UUID) and folds passes as it folds skips."""
    uuid = "GPU-416fcfbe-0a03-edba-6935-b6410d25ea7e"
    results = [
        Result("gpu.ecc", Status.PASS, "no uncorrected ECC errors", subject=f"{i}:{uuid[:-1]}{i}")
        for i in range(8)
    ]
    results.append(Result("gpu.thermal_power", Status.WARN, "91 C, throttled", subject=f"3:{uuid}"))
    results.append(Result("storage.nvme_health", Status.SKIP, "no NVMe data disk"))
    text = rendered(results)
    assert row_statuses(text) == ["WARN"] and "│ GPU 3 " in text and "GPU-" not in text
    assert "1 warning, 8 passed, 1 skipped: `dltune audit --all` lists every check" in text
    every = rendered(results, show_all=True)
    # Eight passes of one check take one row ("8 subjects"), its others named by index too.
    assert row_statuses(every) == ["WARN", "PASS", "SKIP"] and "--all" not in every
    assert "8 subjects" in every and "more: GPU 1, GPU 2," in every and "GPU-" not in every
    clean = rendered([r for r in results if r.status is Status.PASS])
    assert row_statuses(clean) == []
    assert clean == "dltune audit of node1: no findings; 8 passed: `dltune audit --all` lists every check\n"


def test_check_never_folds_the_bench_it_was_asked_to_run() -> None:
    """`dltune check` with no PyTorch: the bench's own skip reason is a row, not part of "N skipped"."""
    results = [
        Result("gpu.ecc", Status.PASS, "no uncorrected ECC errors", subject="0"),
        Result("storage.nvme_health", Status.SKIP, "no NVMe data disk"),
        Result("bench.run", Status.SKIP, "bench not run: PyTorch is not installed (pip install torch)"),
    ]
    out = io.StringIO()
    render_human(
        results, Console(file=out, width=WIDTH), "node1", what="check", asked=frozenset({"bench.run"})
    )
    text = out.getvalue()
    assert row_statuses(text) == ["SKIP"] and "PyTorch is not installed" in text
    assert "no findings; 1 passed, 2 skipped: `dltune check --all` lists every check" in text
    assert "PyTorch" not in rendered(results)  # not asked for: folded like any skip


def test_at_scale_the_summary_rolls_findings_up_by_check_and_bounds_the_node_table(tmp_path: Path) -> None:
    """300 nodes, 60 of them with the same ECC failure and a few with their own finding: the summary
    opens with "gpu.ecc fail on 60 node(s)", shows at most 40 node rows, and says how many more."""
    for i in range(240):
        node_file(tmp_path, f"ok{i:03d}", ["pass"])
    for i in range(60):
        node = {
            "schema_version": 1,
            "host": f"gpu{i:03d}",
            "valid_until": "2999-01-01T00:00:00+00:00",
            "results": [{"id": "gpu.ecc", "area": "gpu", "status": "fail", "subject": "0", "summary": "ECC"}]
            + (
                [{"id": "storage.tmp_tmpfs", "area": "storage", "status": "warn", "summary": "x"}]
                if i < 3
                else []
            ),
        }
        (tmp_path / f"gpu{i:03d}.audit.json").write_text(json.dumps(node))
    out = io.StringIO()
    render_summary(load([tmp_path]), Console(file=out, width=WIDTH))
    text = out.getvalue()
    assert "  gpu.ecc fail on 60 node(s): gpu000, gpu001, gpu002, gpu003, gpu004, ... (55 more)" in text
    assert "  storage.tmp_tmpfs warn on 3 node(s): gpu000, gpu001, gpu002" in text
    assert text.index("gpu.ecc fail on 60") < text.index("┃ node")
    node_rows = [line for line in text.splitlines() if line.startswith("│ gpu")]
    assert len(node_rows) == 40 and "+20 more node(s) with findings: `dltune report --all` lists them" in text
    assert len(text.splitlines()) < 70
    every = io.StringIO()
    render_summary(load([tmp_path]), Console(file=every, width=WIDTH), show_all=True)
    assert len([line for line in every.getvalue().splitlines() if line.startswith("│ gpu")]) == 60


def test_the_table_ends_with_one_summary_line_that_counts_every_status_once() -> None:
    """Issue 46: the table ended with "8 passed, 1 skipped (...): --all lists them" and then "1 warn,
    8 pass, 1 skip", the same counts said twice in two vocabularies. One line now, in the table's
    order, each count with its noun in its number; `--all` is named only when it would show more."""
    results = [
        Result("gpu.ecc", Status.FAIL, "uncorrected ECC errors", subject="0"),
        Result("gpu.xid", Status.ERROR, "bug"),
        Result("gpu.xid2", Status.ERROR, "bug"),
        Result("gpu.thermal_power", Status.WARN, "hot"),
        Result("storage.tmp_tmpfs", Status.PASS, "ok"),
        Result("storage.nvme_health", Status.SKIP, "no NVMe data disk"),
    ]
    text = rendered(results)
    summary = [line for line in text.splitlines() if "passed" in line or "skipped" in line]
    assert summary == [
        "1 failed, 2 errors, 1 warning, 1 passed, 1 skipped: `dltune audit --all` lists every check"
    ]
    assert text.splitlines()[-1] == summary[0]
    every = rendered(results, show_all=True)
    assert every.splitlines()[-1] == "1 failed, 2 errors, 1 warning, 1 passed, 1 skipped"
    assert not re.search(r"\d+ (pass|skip|warn|fail|error)\b", text + every), "the old second line"
    assert rendered([]) == "dltune audit of node1: no checks ran\n"
    assert rendered([], show_all=True) == "dltune audit of node1: no checks ran\n"
    only_passes = rendered([Result("gpu.ecc", Status.PASS, "ok")], show_all=True)
    assert only_passes.splitlines()[-1] == "dltune audit of node1: no findings; 1 passed"
