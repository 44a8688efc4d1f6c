"""A generated fleet for `dltune report`: N nodes' report files as `dltune.cluster.audit` leaves them,
with the mix an administrator meets (issue 46). Of 200 nodes: 155 with no finding; 18 with warnings only;
two warnings on 20 nodes each (gpu.clocks, priced by its matmul, 4.8 GPU-hours a day a node, and
env.cublas_workspace, unpriced), spread over the failing nodes too; one NFS server that 8 nodes fail on
(a shared dependency), uncorrected ECC on 7 (critical: the whole node's 192 GPU-hours a day), /tmp not a
tmpfs on 5; 4 stale reports (one of them failing when it was written), 2 invalid files and 1 node
unreachable. Smaller fleets keep one node of each grave kind (5 nodes: an ECC failure, an NFS failure,
a stale report, an invalid file, one node with no finding).

`python -m tests.report_fleet [DIR]` renders both fleets' pages in headless Chromium at 1,400 x 900 and
saves docs/report-5-nodes.png and docs/report-200-nodes.png (or into DIR).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SCREEN = (1400, 900)
GENERATED = "2026-11-24T06:00:00+00:00"
CURRENT = "2999-01-01T00:00:00+00:00"
EXPIRED = "2026-11-20T06:00:00+00:00"
NFS_SERVER = "NFS server 10.0.0.5"
GPUS = 8
# Per 200 nodes; the kinds marked in GRAVE keep at least one node in a smaller fleet.
SHARES = {"invalid": 2, "unreachable": 1, "stale": 4, "nfs": 8, "ecc": 7, "tmpfs": 5, "warn_only": 18}
GRAVE = ("invalid", "stale", "nfs", "ecc")


def host(index: int) -> str:
    return f"gpu{index + 1:03d}"


def uuid(index: int, gpu: int) -> str:
    return f"GPU-{index:04x}{gpu:04x}-0a03-edba-6935-b6410d25ea7e"


def plan(count: int) -> dict[str, list[int]]:
    """Which nodes are which: kind -> node indices (a seeded shuffle, so the kinds are not in name order)."""
    order = list(range(count))
    random.Random(46).shuffle(order)  # noqa: S311 - test data
    kinds: dict[str, list[int]] = {}
    taken = 0
    for kind, per_200 in SHARES.items():
        wanted = max(1 if kind in GRAVE else 0, per_200 * count // 200)
        kinds[kind] = sorted(order[taken : taken + wanted])
        taken += wanted
    kinds["clean"] = sorted(order[taken:])
    failing = kinds["nfs"] + kinds["ecc"] + kinds["tmpfs"]
    warn_only = kinds["warn_only"]
    kinds["clocks"] = sorted(failing[0::2] + warn_only[:10])
    kinds["cublas"] = sorted(failing[1::2] + warn_only[8:])
    return kinds


def result(check_id: str, status: str, summary: str, **fields: Any) -> dict[str, Any]:
    return {"id": check_id, "area": check_id.split(".")[0], "status": status, "summary": summary, **fields}


def passing(index: int) -> list[dict[str, Any]]:
    """What a tuned, healthy node reports."""
    found = [
        result("system.cpu_governor", "pass", "every CPU runs the performance governor"),
        result("system.time_sync", "pass", "chrony is synchronised (offset 0.2 ms)"),
        result("storage.data_noatime", "pass", "/data is mounted noatime", subject="/data"),
        result("storage.tmp_tmpfs", "pass", "/tmp is a tmpfs of 64G", subject="/tmp"),
        result("driver.loaded", "pass", "nvidia 580.65.06 loaded"),
        result("fabric.ib_ports", "pass", "4 InfiniBand ports ACTIVE at 400 Gb/s"),
        result("nfs.responsive", "pass", "/mnt/datasets answered in 3 ms", subject="/mnt/datasets"),
        result("env.cublas_workspace", "pass", "CUBLAS_WORKSPACE_CONFIG=:4096:8 in /etc/environment"),
    ]
    found += [
        result("gpu.ecc", "pass", "no uncorrected ECC errors", subject=f"{gpu}:{uuid(index, gpu)}")
        for gpu in range(GPUS)
    ]
    found += [
        result("gpu.clocks", "pass", "clocks not held down", subject=f"{gpu}:{uuid(index, gpu)}")
        for gpu in range(GPUS)
    ]
    return found


def _replace(results: list[dict[str, Any]], found: dict[str, Any]) -> None:
    """The finding in place of the same check's pass on the same subject."""
    for i, r in enumerate(results):
        if r["id"] == found["id"] and r.get("subject") == found.get("subject"):
            results[i] = found
            return
    results.append(found)


def findings(index: int, kinds: dict[str, list[int]]) -> list[dict[str, Any]]:
    """The node's findings by its kinds."""
    gpu = index % GPUS
    found = []
    if index in kinds["nfs"]:
        found.append(
            result(
                "nfs.responsive",
                "fail",
                f"/mnt/datasets ({NFS_SERVER}) did not answer a stat within 5 s",
                subject="/mnt/datasets",
                shared_dependency=NFS_SERVER,
                critical=True,
                evidence={
                    "server": "10.0.0.5",
                    "mount": "/mnt/datasets",
                    "timeout_s": 5,
                    "options": "vers=4.2,hard",
                },
                remedy="check NFS server 10.0.0.5; role nfs_multivip spreads the mounts over its addresses",
                impact={"basis": "unpriced", "why": "no measurement of a mount that does not answer"},
            )
        )
    if index in kinds["ecc"]:
        found.append(
            result(
                "gpu.ecc",
                "fail",
                f"GPU {gpu}: 2 uncorrected ECC errors (volatile, since the driver loaded)",
                subject=f"{gpu}:{uuid(index, gpu)}",
                critical=True,
                evidence={"uncorrected": {"volatile": 2, "aggregate": 2}, "retired_pages": {"pending": True}},
                remedy="drain the node and reset the GPU; replace it if the errors come back",
                impact={
                    "basis": "estimated",
                    "fraction": 1.0,
                    "of": "node",
                    "scope": "node",
                    "gpus": GPUS,
                    "use": 1.0,
                    "gpu_hours_per_day": GPUS * 24.0,
                    "source": "a critical fail takes the node",
                },
            )
        )
    if index in kinds["tmpfs"]:
        found.append(
            result(
                "storage.tmp_tmpfs",
                "fail",
                "/tmp is on the root disk (ext4 /dev/nvme0n1p2), not a tmpfs",
                subject="/tmp",
                evidence={"fstype": "ext4", "source": "/dev/nvme0n1p2", "expected": "tmpfs"},
                remedy="apply role tmpfs_tmp (tmpfs_tmp_size)",
                impact={"basis": "unpriced", "why": "dltune check measures it; this audit did not"},
            )
        )
    if index in kinds["clocks"]:
        found.append(
            result(
                "gpu.clocks",
                "warn",
                f"GPU {gpu}: SM clock held at 1,410 MHz by HW slowdown (power brake)",
                subject=f"{gpu}:{uuid(index, gpu)}",
                evidence={"sm_mhz": 1410, "max_sm_mhz": 1980, "reasons": ["hw_slowdown", "power_brake"]},
                remedy="check the node's power supply and cooling",
                impact={
                    "basis": "measured",
                    "fraction": 0.2,
                    "of": "matmul",
                    "scope": f"matmul:{uuid(index, gpu)}",
                    "gpus": 1,
                    "use": 1.0,
                    "gpu_hours_per_day": 4.8,
                    "method": "bf16 matmul 80% of the card's",
                },
            )
        )
    if index in kinds["cublas"]:
        found.append(
            result(
                "env.cublas_workspace",
                "warn",
                "CUBLAS_WORKSPACE_CONFIG is not set: deterministic runs fail",
                evidence={"value": None, "file": "/etc/environment"},
                remedy="apply role dl_env (dl_env_cublas_workspace_config)",
                impact={"basis": "unpriced", "why": "no throughput lost, determinism"},
            )
        )
    return found


def node_document(index: int, kinds: dict[str, list[int]]) -> Any:
    """One node's file as JSON data (or, for an invalid one, text that is no envelope)."""
    if index in kinds["invalid"]:
        if kinds["invalid"].index(index) % 2:
            return [{"id": "gpu.ecc"}]  # an array: no envelope at all
        bad = passing(index)
        bad[0] = {**bad[0], "status": "healthy"}  # a status dltune does not know
        return {"schema_version": 1, "host": host(index), "valid_until": CURRENT, "results": bad}
    if index in kinds["unreachable"]:
        return {
            "problem": f"unreachable: Failed to connect to the host via ssh: ssh: connect to host "
            f"{host(index)} port 22: No route to host"
        }
    results = passing(index)
    for found in findings(index, kinds):
        _replace(results, found)
    valid_until = CURRENT
    if index in kinds["stale"]:
        valid_until = EXPIRED
        if kinds["stale"].index(index) == 0:
            _replace(results, findings(index, {**kinds, "ecc": [index]})[0])
        else:
            _replace(results, findings(index, {**kinds, "cublas": [index]})[-1])
    return {
        "schema_version": 1,
        "host": host(index),
        "time": EXPIRED if valid_until == EXPIRED else GENERATED,
        "valid_until": valid_until,
        "results": results,
    }


def write_fleet(directory: Path, count: int) -> dict[str, list[str]]:
    """The fleet's files in ``directory`` (created); returns kind -> host names."""
    directory.mkdir(parents=True, exist_ok=True)
    kinds = plan(count)
    for index in range(count):
        document = node_document(index, kinds)
        (directory / f"{host(index)}.audit.json").write_text(json.dumps(document))
    return {kind: [host(i) for i in indices] for kind, indices in kinds.items()}


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browse(browser: str, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on a page in a window of SCREEN's size."""
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--window-size={SCREEN[0]},{SCREEN[1]}",
            "--virtual-time-budget=5000",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def screenshot(browser: str, page: Path, png: Path) -> None:
    """The page's first screen (SCREEN) as a PNG."""
    done = browse(browser, page, f"--screenshot={png}")
    if not png.is_file():
        raise RuntimeError(f"chromium made no screenshot (rc {done.returncode}): {done.stderr[-2000:]}")


def fleet_page(directory: Path, count: int) -> Path:
    """The generated fleet of ``count`` nodes rendered as report.html in ``directory``."""
    from dltune.fleet.cluster import fleet_priced, render_html
    from dltune.fleet.node_files import load

    write_fleet(directory / "nodes", count)
    page = directory / "report.html"
    page.write_text(render_html(fleet_priced(load([directory / "nodes"])), GENERATED))
    return page


def main(out: Path) -> int:
    import tempfile

    browser = chromium()
    if browser is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    for count in (5, 200):
        with tempfile.TemporaryDirectory() as work:
            png = out / f"report-{count}-nodes.png"
            screenshot(browser, fleet_page(Path(work), count), png)
            print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "docs"))
