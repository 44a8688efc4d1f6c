"""playbooks/bench.yml with the controller itself as the benchmarked node (local connection, this
venv's dltune and its real PyTorch, CPU: no GPU here) and a node that does not exist: the bench
results land as <node>.bench.json beside the audits and `dltune report` draws them; the missing node
is in the report as unreachable. PyTorch runs in dltune's own process, never in pytest's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, SMALLEST_BENCH_SIZES

DLTUNE = Path(sys.executable).parent / "dltune"


SMALL_BENCH = [
    *("--quick", "--device", "cpu", "--no-dataloader-sweep", "--no-determinism", "--no-data-parallel"),
    *("--no-sdc", *SMALLEST_BENCH_SIZES),
]


def test_bench_playbook_fetches_and_merges_each_nodes_bench(tmp_path: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch, torchvision"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip("PyTorch is not installed in this venv (extra bench)")
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[gpu_nodes]\n"
        f"controller ansible_connection=local ansible_python_interpreter={sys.executable}"
        f" dltune_bench_executable={DLTUNE}\n"
        # Nothing listens on port 1 of the loopback: refused at once, and no packet leaves the machine.
        "ghost ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh\n"
    )
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    (report_dir / "controller.audit.json").write_text(
        json.dumps({"schema_version": 1, "host": "controller", "results": []})
    )
    done = subprocess.run(
        [
            "ansible-playbook",
            "playbooks/bench.yml",
            "-i",
            str(inventory),
            "-e",
            f"dltune_report_dir={report_dir}",
            # The smallest bench: what is proved is the fetch and merge (94 -> 34 s here).
            "-e",
            json.dumps({"dltune_bench_args": SMALL_BENCH}),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    bench = json.loads((report_dir / "controller.bench.json").read_text())
    ids = {r["id"] for r in bench["results"]}
    assert "bench.matmul" in ids and any(i.startswith("bench.train_") for i in ids), ids
    assert (report_dir / "controller.audit.json").exists()  # bench.yml leaves the audits alone
    merged = {n["host"]: n for n in json.loads((report_dir / "cluster.json").read_text())["nodes"]}
    assert sorted(merged) == ["controller", "ghost"]
    assert merged["ghost"]["problem"].startswith("unreachable")
    assert any(r["id"] == "bench.matmul" for r in merged["controller"]["results"])
    assert "<svg" in (report_dir / "report.html").read_text()
