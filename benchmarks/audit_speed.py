"""How long `dltune audit` takes, as a ratio against the bare interpreter start in the same run.

The audit must answer in seconds on any node; most of its cost is Python's start and imports.
Baseline: `python -c pass` with the same interpreter. Reports medians of N runs each, interleaved
so that machine noise hits both alike. Goal (issue 46): `dltune audit` within 5x the baseline, and
`dltune healthcheck` (the audit, its history and Slurm's state, every few minutes on every node)
close to it. Two floors beside them: the standard library modules the audit loads, imported alone
(through the CLI; and those its judging alone loads): the share of the ratio that no code of dltune's
can remove (docs/development.md has the figures).

Two installations, each against its own interpreter's `python -c pass`:
- **node**: what the dltune role installs: this tree's wheel and its dependencies from the wheelhouse
  (`make wheelhouse`) in a fresh venv outside the checkout, run through the venv's `dltune` script. Its
  interpreter starts without the checkout's editable finder, so its baseline is the smaller one and this
  ratio the honest one.
- **checkout**: the development venv (`.venv`, dltune installed editable), whose every start also
  pays for the editable install's import hook: the figure issue 46 first measured.
Modules run from bytecode, as on a node where pip installed the wheel (pip compiles every module at
install): the runs get a private PYTHONPYCACHEPREFIX, warmed once, whatever PYTHONDONTWRITEBYTECODE
this shell has (with it, every run would compile dltune's sources again: a cost no node pays).

`--fabric`: an HGX-class node, 8 GPUs with 18 NVLinks each (the fake NVML library, built with gcc)
and 8 NDR InfiniBand ports, 4 NVSwitches, 20 PCI devices with AER counters (a sysfs/proc fixture tree,
tests/fabric_tree.py): the audit's probes and every check of the gpu, driver and fabric areas, NVML
in its child as always, timed as a whole process (goal: within 1 s). NVML is never read under
--root (a tree has no GPUs to ask), so this case runs the same steps as `dltune audit` itself with the
tree's snapshot and the fake library's NVML joined (`--fabric-once`).

`--mounts 5000,50000` (root): hosts with many containers have tens of thousands of mounts. For each
count, a private mount namespace (unshare) gets a loop-mounted ext4 disk and that many real bind
mounts of it, so that statfs and the data-mount checks really run; the audit inside it is timed
against the same baseline (goal: 50,000 mounts in at most 1.5 s on the 2-core machine).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/tmp_tmpfs_ok"


def bytecode_env(cache: str) -> dict[str, str]:
    """This environment with bytecode written and read under ``cache`` (a node's installed wheel)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    return env


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


DLTUNE = [sys.executable, "-m", "dltune.cli"]
AUDIT_ARGS = ["audit", "--format", "json"]
HEALTHCHECK_ARGS = ["healthcheck", "--profile", "observe", "--slurm-node", "b"]
AUDIT = [*DLTUNE, *AUDIT_ARGS]
BASELINE = "baseline: python -c pass"
REPO = Path(__file__).resolve().parent.parent
WHEELHOUSE = REPO / "build/wheelhouse"


STDLIB_FLOOR = "floor: the stdlib modules the audit loads"
STDLIB_FLOOR_NO_CLI = "floor: ... its judging alone loads (no CLI)"
# Run in the node's interpreter: the audit in-process, then the standard library modules it loaded.
_LOADED_STDLIB = """
import json, sys
if sys.argv[1] == "cli":
    sys.argv = ["dltune", "audit", "--format", "json"]
    from dltune.cli import run
    run()
else:  # what `dltune audit` runs (commands/node.audit_results), without the CLI's modules around it
    from datetime import datetime, timezone
    from dltune.probes.nvml import nvml_in_background
    from dltune.probes.watchdog import Deadline
    deadline = Deadline(30)
    nvml = nvml_in_background(10.0, deadline)
    from dltune.checks import run_checks
    from dltune.costs.impact import Node, price
    from dltune.outputs.report import render_json
    from dltune.probes import collect_snapshot
    snapshot = collect_snapshot("/", deadline=deadline, nvml_future=nvml)
    results = price(run_checks(snapshot, None), Node(gpus=len(snapshot.nvml.gpus)))
    sys.stdout.write(render_json(results, "host", datetime.now(timezone.utc)))
names = sorted(n for n in list(sys.modules) if n.split(".")[0] in sys.stdlib_module_names)
sys.stderr.write(json.dumps(names))
"""


def stdlib_floor(python: str, env: dict[str, str], how: str) -> list[str]:
    """``python -c "import ..."`` of every standard library module the audit loads (``how``: ``cli``,
    as `dltune audit` runs; ``judging``, its probes, checks and JSON alone): what any Python program
    that imports those pays before doing anything. Its ratio is the part of the audit's that Python's
    own library costs, whatever dltune's code does (issue 46's 5x goal meets this floor here)."""
    done = subprocess.run(
        [python, "-c", _LOADED_STDLIB, how], capture_output=True, text=True, env=env, check=True
    )
    modules = json.loads(done.stderr.strip().splitlines()[-1])
    return [python, "-c", "import " + ", ".join(modules)]


def node_venv(tmp: Path) -> Path:
    """A venv as the dltune role builds one on a node (README: `pip install --no-index --find-links
    build/wheelhouse dltune`), from a wheel of this tree: no editable finder in its interpreter's start."""
    if not any(WHEELHOUSE.glob("typer-*.whl")):
        sys.exit(f"{WHEELHOUSE}: no wheelhouse with dltune's dependencies: run `make wheelhouse` first")
    wheels, venv = tmp / "wheels", tmp / "venv"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    pip = [str(venv / "bin/pip"), "install", "--quiet", "--no-index", "--find-links", str(wheels)]
    subprocess.run([*pip, "--find-links", str(WHEELHOUSE), "dltune"], check=True, stdout=subprocess.DEVNULL)
    return venv


MS_BIND = 4096


def inside_namespace(count: int, image: str, runs: int) -> None:
    """Run in a private mount namespace: mount the disk, bind it `count` times, time the audit."""
    work = Path(tempfile.mkdtemp(prefix="dltune-mounts-"))
    source = work / "disk"
    source.mkdir()
    subprocess.run(["mount", "-o", "loop,relatime", image, str(source)], check=True)
    libc = ctypes.CDLL(None, use_errno=True)
    binds = work / "b"
    binds.mkdir()
    for i in range(count):
        target = binds / str(i)
        target.mkdir()
        if libc.mount(str(source).encode(), str(target).encode(), None, MS_BIND, None) != 0:
            raise OSError(ctypes.get_errno(), f"bind mount {i}")
    mounts = sum(1 for _ in open("/proc/self/mountinfo", encoding="utf-8"))  # noqa: SIM115
    baseline, audit = [], []
    for _ in range(runs):
        baseline.append(timed([sys.executable, "-c", "pass"]))
        audit.append(timed(AUDIT))
    done = subprocess.run(AUDIT, capture_output=True, text=True, check=False)
    results = json.loads(done.stdout)["results"]
    per_mount = sum(1 for r in results if r["id"] == "storage.data_noatime")
    json.dump(
        {
            "mounts": mounts,
            "baseline": statistics.median(baseline),
            "audit": statistics.median(audit),
            "data_noatime_results": per_mount,
            "results": len(results),
        },
        sys.stdout,
    )


def many_mounts(counts: list[int], runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "disk.img"
        subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
        header = ("bind mounts", "mounts", "audit s", "baseline s", "x baseline", "results")
        print("{:>12} {:>7} {:>8} {:>10} {:>10} {:>8}".format(*header))
        for count in counts:
            done = subprocess.run(
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    sys.executable,
                    __file__,
                    "--inside",
                    str(count),
                    str(image),
                    "--runs",
                    str(runs),
                ],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            )
            row = json.loads(done.stdout)
            print(
                f"{count:12d} {row['mounts']:7d} {row['audit']:8.3f} {row['baseline']:10.3f} "
                f"{row['audit'] / row['baseline']:10.1f} {row['data_noatime_results']:8d}"
            )


def fabric_once(tree: str) -> None:
    """One audit of the fixture tree with NVML from the (fake) library, in `dltune audit`'s order:
    NVML's child starts before the probes and checks are imported (commands/audit.audit_results)."""
    from dltune.probes.nvml import nvml_in_background
    from dltune.probes.watchdog import Deadline

    deadline = Deadline(30)
    nvml = nvml_in_background(deadline=deadline)
    from datetime import datetime, timezone

    from dltune.checks import run_checks
    from dltune.model import exit_code
    from dltune.outputs.report import render_json
    from dltune.probes import collect_snapshot

    areas = ["driver", "gpu", "fabric"]
    snapshot = collect_snapshot(tree, areas=areas, deadline=deadline, nvml_future=nvml)
    results = run_checks(snapshot, areas)
    sys.stdout.write(render_json(results, "hgx-fixture", datetime.now(timezone.utc)))
    sys.exit(exit_code(results))


def fabric_node(runs: int) -> None:
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from tests.fabric_tree import hgx_node

    with tempfile.TemporaryDirectory() as tmp:
        tree, lib = Path(tmp) / "node", Path(tmp) / "lib"
        lib.mkdir()
        hgx_node(tree)
        subprocess.run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-O2",
                "-o",
                str(lib / "libnvidia-ml.so.1"),
                str(repo / "tests/fakenvml/fake_nvml.c"),
            ],
            check=True,
        )
        scenario = Path(tmp) / "hgx.conf"
        scenario.write_text("gpus=8\ngpu*.nvlinks=18\ngpu*.nvlink_replay=2\n")
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(lib),
            "DLTUNE_FAKE_NVML_SCENARIO": str(scenario),
            "PYTHONPATH": str(repo),
        }
        once = [sys.executable, __file__, "--fabric-once", str(tree)]
        done = subprocess.run(once, capture_output=True, text=True, env=env, check=False)
        results = json.loads(done.stdout)["results"]
        statuses = {r["status"] for r in results}
        links = sum(len(r["evidence"].get("active", [])) for r in results if r["id"] == "fabric.nvlink")
        ports = sum(1 for r in results if r["id"] == "fabric.ib_ports")
        baseline, audit = [], []
        for _ in range(runs):
            baseline.append(timed([sys.executable, "-c", "pass"]))
            start = time.perf_counter()
            subprocess.run(once, env=env, stdout=subprocess.DEVNULL, check=False)
            audit.append(time.perf_counter() - start)
        base, med = statistics.median(baseline), statistics.median(audit)
        print(
            f"HGX fixture: {len(results)} results ({', '.join(sorted(statuses))}), "
            f"{links} active NVLinks, {ports} RDMA ports"
        )
        print(f"{'case':40} {'median s':>9} {'x baseline':>11}")
        print(f"{'baseline: python -c pass':40} {base:9.3f} {1.0:11.1f}")
        print(f"{'audit: 8 GPUs x 18 NVLinks, 8 IB ports':40} {med:9.3f} {med / base:11.1f}")
        print(f"goal: within 1 s: {'met' if med <= 1.0 else 'NOT met'} ({med:.3f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--mounts", help="comma-separated bind mount counts, e.g. 5000,50000 (root)")
    parser.add_argument("--inside", nargs=2, metavar=("COUNT", "IMAGE"), help=argparse.SUPPRESS)
    parser.add_argument("--fabric", action="store_true", help="an 8-GPU NVLink + 8-port InfiniBand node")
    parser.add_argument("--fabric-once", metavar="TREE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fabric_once:
        fabric_once(args.fabric_once)
    if args.fabric:
        fabric_node(args.runs)
        return
    if args.inside:
        inside_namespace(int(args.inside[0]), args.inside[1], args.runs)
        return
    if args.mounts:
        many_mounts([int(n) for n in args.mounts.split(",")], args.runs)
        return
    with tempfile.TemporaryDirectory(prefix="dltune-bench-") as tmp:
        node = node_venv(Path(tmp))
        history = Path(tmp) / "history"
        history.mkdir()
        installs = {
            "node": (node / "bin/python", [str(node / "bin/dltune")]),
            "checkout": (Path(sys.executable), DLTUNE),
        }
        cases: dict[str, dict[str, list[str]]] = {}
        for install, (python, dltune) in installs.items():
            cases[install] = {
                BASELINE: [str(python), "-c", "pass"],
                "dltune audit --format json (host)": [*dltune, *AUDIT_ARGS],
                "dltune audit --root fixture": [*dltune, *AUDIT_ARGS, "--root", str(FIXTURE)],
                # No Slurm here: scontrol is not found, said in one line (a node whose slurmctld is away).
                "dltune healthcheck --profile observe": [
                    *dltune,
                    *HEALTHCHECK_ARGS,
                    "--history-file",
                    str(history / f"{install}.json"),
                ],
            }
        env = bytecode_env(str(Path(tmp) / "pyc"))
        for install, (python, _dltune) in installs.items():
            cases[install][STDLIB_FLOOR] = stdlib_floor(str(python), env, "cli")
            cases[install][STDLIB_FLOOR_NO_CLI] = stdlib_floor(str(python), env, "judging")
        for table in cases.values():
            for argv in table.values():
                timed(argv, env)  # the warm-up writes the bytecode
        samples: dict[str, dict[str, list[float]]] = {
            install: {name: [] for name in table} for install, table in cases.items()
        }
        for _ in range(args.runs):  # interleaved: noise hits every case alike
            for install, table in cases.items():
                for name, argv in table.items():
                    samples[install][name].append(timed(argv, env))
    for install, figures in samples.items():
        base = statistics.median(figures[BASELINE])
        print(f"{install + ' install: case':44} {'median s':>9} {'x baseline':>11}")
        for name, values in figures.items():
            med = statistics.median(values)
            print(f"  {name:42} {med:9.3f} {med / base:11.1f}")


if __name__ == "__main__":
    main()
