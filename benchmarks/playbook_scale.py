"""What the collection's playbooks cost the Ansible controller per node (issue 47), on the scale lab
(tests/scale/scale-lab.sh: N sshd-only containers reached over real SSH with host keys checked).

For each N (--nodes) the lab is brought to N nodes, then for each forks value (--forks) these cases
run, each one `ansible-playbook` process under an ansible.cfg this script writes (ANSIBLE_CONFIG, in a
temporary directory: the checkout's ansible.cfg is not what is measured):

  audit            dltune.cluster.audit: pipelining on, ControlPersist 120s, fact cache on
  audit-rerun      the same again right after: the SSH masters of the first run are reused
  audit-plain      pipelining off, no ControlPersist (a new SSH session per task: Ansible's default
                   connection behaviour)
  dl_env-nocache   dltune.cluster.dl_env --check: facts gathered (subset min), no fact cache
  dl_env-cache     the same with the jsonfile fact cache and gathering=smart, run twice: the figure is
                   the second run (facts from the cache; the first run warmed it)
  audit-hung       the `audit` case with 2% of the nodes (at least one) hung: TCP accepted, nothing
                   answers (docker pause). The run must end within --timeout and name the hung nodes.

Why these playbooks: the audit is read-only and runs everywhere; of site.yml's roles, dl_env is the one
that needs neither systemd, loop devices, a driver nor Slurm daemons, and it gathers facts, so the
fact cache has something to save; --check keeps the nodes unchanged between runs. The other site
roles need systemd (tmpfs_tmp, slurm_tmpdir's daemons), block devices (data_disks) or NFS.

Per run: wall seconds; controller CPU seconds (a cgroup v1 cpuacct group holding ansible-playbook and
all it starts; cross-checked by user+sys of ansible-playbook and every process it reaped, os.wait4's
rusage, plus the CPU of SSH ControlPersist masters, which detach from Ansible and are never reaped by
it: read from /proc before they are stopped); CPU per node; peak RSS of one
process (ru_maxrss) and peak memory of the whole process tree (sum of PSS, sampled every 0.2 s).
The growth of per-node cost with N is printed as the ratio of CPU per node between successive N and
a fitted exponent b of cpu = a * N^b (b = 1: linear total cost, constant per node).

Note: on a 2-CPU machine the nodes' sshd and `dltune audit` share the controller's cores, so wall time
includes the nodes' work; controller CPU does not (their processes are not the controller's children).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent
SCALE_LAB = REPO_ROOT / "tests/scale/scale-lab.sh"
SCALE_STATE = Path(os.environ.get("DLTUNE_SCALE_STATE", "/var/tmp/dltune-scale"))
BIN = Path(sys.executable).parent
# The collection the cases run: this checkout (collections/dltune/cluster links to it), or --collections.
COLLECTIONS = REPO_ROOT / "collections"
RECAP = re.compile(
    r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)",
    re.M,
)
# Logs of runs that failed or timed out (the runs' own temporary directories are removed).
LOG_KEEP = Path(os.environ.get("DLTUNE_SCALE_LOGS", "/tmp/dltune-scale-logs"))
CASES = ["audit", "audit-rerun", "audit-plain", "dl_env-nocache", "dl_env-cache", "audit-hung"]


@dataclass(frozen=True)
class Settings:
    """The ansible.cfg of one case: what the table says each case used."""

    forks: int
    pipelining: bool
    control_persist: bool
    fact_cache: bool

    def describe(self) -> str:
        return (
            f"pipelining={'on' if self.pipelining else 'off'} "
            f"ControlPersist={'120s' if self.control_persist else 'off'} "
            f"fact_cache={'jsonfile+smart' if self.fact_cache else 'off'}"
        )


@dataclass
class RunResult:
    case: str
    nodes: int
    forks: int
    settings: str
    wall_s: float
    cpu_s: float
    cpu_wait4_s: float
    cpu_masters_s: float
    cpu_per_node_s: float
    maxrss_mib: float
    tree_pss_peak_mib: float
    returncode: int
    timed_out: bool
    unreachable: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    # The checkout's playbooks and roles are what runs: their hash tells two runs of different code apart.
    code_hash: str = ""


# cgroup v1 cpuacct (this machine): a group per case directory holds ansible-playbook and everything
# it starts, including the SSH masters that detach from it, so its usage is the controller's whole CPU.
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def cpu_group(workdir: Path) -> Path | None:
    """A cpuacct group for one case directory, or None where cgroup v1 cpuacct is not mounted."""
    if not (CPUACCT / "cpuacct.usage").exists():
        return None
    group = CPUACCT / "dltune-scale-bench" / workdir.name
    group.mkdir(parents=True, exist_ok=True)
    return group


def group_cpu_seconds(group: Path | None) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9 if group else 0.0


def remove_group(group: Path | None) -> None:
    """Remove the group once its processes (SSH masters being stopped) have left it."""
    if group is None:
        return
    for _ in range(50):
        if not (group / "cgroup.procs").read_text().strip():
            break
        time.sleep(0.1)
    with contextlib.suppress(OSError):
        group.rmdir()
        group.parent.rmdir()


def code_hash() -> str:
    """Hash of what the cases run (the collection's playbooks/, roles/ and plugins/), taken at each run's
    start."""
    root = (COLLECTIONS / "ansible_collections/dltune/cluster").resolve()
    digest = hashlib.sha256()
    for path in sorted(p for part in ("playbooks", "roles", "plugins") for p in (root / part).rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def write_config(directory: Path, settings: Settings) -> Path:
    """An ansible.cfg of this case only, with its own fact cache and ControlPath directories."""
    ssh_args = (
        "-o ControlMaster=auto -o ControlPersist=120s" if settings.control_persist else "-o ControlMaster=no"
    )
    gathering = "smart" if settings.fact_cache else "implicit"
    cache = "ansible.builtin.jsonfile" if settings.fact_cache else "ansible.builtin.memory"
    config = directory / "ansible.cfg"
    config.write_text(
        "[defaults]\n"
        f"forks = {settings.forks}\n"
        f"collections_path = {COLLECTIONS}\n"
        "stdout_callback = ansible.builtin.default\n"
        "retry_files_enabled = false\n"
        "interpreter_python = /usr/bin/python3\n"
        # The connect timeout bounds a hung node (TCP accepted, no banner): ssh's ConnectTimeout covers
        # the banner exchange too.
        "timeout = 10\n"
        f"gathering = {gathering}\n"
        f"fact_caching = {cache}\n"
        f"fact_caching_connection = {directory / 'facts'}\n"
        "fact_caching_timeout = 3600\n"
        "[ssh_connection]\n"
        f"pipelining = {settings.pipelining}\n"
        f"ssh_args = {ssh_args}\n"
        f"control_path_dir = {directory / 'cp'}\n"
    )
    return config


def master_cpu_seconds(control_dir: Path) -> dict[int, float]:
    """CPU seconds so far of each SSH ControlPersist master of this case (they detach from Ansible)."""
    seconds: dict[int, float] = {}
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if process.info["name"] == "ssh" and any(str(control_dir) in part for part in cmdline):
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            seconds[process.pid] = times.user + times.system
    return seconds


def stop_masters(control_dir: Path) -> None:
    """End this case's SSH masters, by PID (only processes whose command line names its directory)."""
    for pid in master_cpu_seconds(control_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def tree_pss(root: psutil.Process) -> int:
    """Memory of the whole process tree: the sum of PSS, so pages the forked workers share with
    ansible-playbook (copy-on-write) are counted once, not once per worker as a sum of RSS would."""
    total = 0
    with contextlib.suppress(psutil.NoSuchProcess):
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                total += process.memory_full_info().pss
    return total


def run_playbook(
    case: str,
    nodes: int,
    settings: Settings,
    workdir: Path,
    playbook: str,
    extra_args: list[str],
    timeout_s: float,
) -> RunResult:
    config = write_config(workdir, settings)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "tmp"),
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    command = [str(BIN / "ansible-playbook"), playbook, "-i", str(SCALE_STATE / "inventory.yml"), *extra_args]
    log_path = workdir / f"{case}.log"
    masters_before = master_cpu_seconds(workdir / "cp")
    code = code_hash()
    group = cpu_group(workdir)
    group_before = group_cpu_seconds(group)

    def join_group() -> None:
        # In the child before exec: everything ansible-playbook starts is born in the group.
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    start = time.perf_counter()
    with log_path.open("w") as log:
        # A session of its own: a timeout kills ansible-playbook and every worker and ssh it started.
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=join_group,
        )
    watched = psutil.Process(process.pid)
    peak_tree = 0
    timed_out = False
    while True:
        # os.wait4: the rusage of ansible-playbook and all it reaped, for this run alone.
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        peak_tree = max(peak_tree, tree_pss(watched))
        if not timed_out and time.perf_counter() - start > timeout_s:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
        # Sampling the tree costs this process CPU, not the measured children's.
        time.sleep(0.2)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    masters_after = master_cpu_seconds(workdir / "cp")
    # A master that lived through the run: its growth; one started during it: all of it.
    masters = sum(cpu - masters_before.get(master, 0.0) for master, cpu in masters_after.items())
    cpu_wait4 = usage.ru_utime + usage.ru_stime + masters
    # The group's figure where there is one (it misses nothing that ran in it); else wait4 + masters.
    cpu = group_cpu_seconds(group) - group_before if group is not None else cpu_wait4
    output = log_path.read_text(errors="replace")
    if process.returncode != 0 or timed_out:
        # The case's directory goes at the end: keep the log of a run that did not end clean.
        LOG_KEEP.mkdir(parents=True, exist_ok=True)
        kept = LOG_KEEP / f"{case}-{nodes}-{settings.forks}.log"
        shutil.copyfile(log_path, kept)
        print(f"    rc {process.returncode}: log kept in {kept}", flush=True)
    recap = [match for match in RECAP.finditer(output) if match[1] != "localhost"]
    return RunResult(
        case=case,
        nodes=nodes,
        forks=settings.forks,
        settings=settings.describe(),
        wall_s=round(wall, 2),
        cpu_s=round(cpu, 2),
        cpu_wait4_s=round(cpu_wait4, 2),
        cpu_masters_s=round(masters, 2),
        cpu_per_node_s=round(cpu / nodes, 3),
        # Linux reports ru_maxrss in KiB.
        maxrss_mib=round(usage.ru_maxrss / 1024, 1),
        tree_pss_peak_mib=round(peak_tree / 1048576, 1),
        returncode=process.returncode,
        timed_out=timed_out,
        unreachable=sorted(match[1] for match in recap if int(match[4])),
        failed=sorted(match[1] for match in recap if int(match[5])),
        code_hash=code,
    )


def problems_in_report(report_dir: Path) -> dict[str, str]:
    """The audit's own account of each node that gave no report ({"problem": ...} per node)."""
    problems: dict[str, str] = {}
    for path in sorted(report_dir.glob("*.audit.json")):
        try:
            document = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(document, dict) and "problem" in document:
            problems[path.name.removesuffix(".audit.json")] = str(document["problem"])[:120]
    return problems


def scale_lab(*arguments: str) -> str:
    done = subprocess.run(["bash", str(SCALE_LAB), *arguments], check=False, capture_output=True, text=True)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"scale-lab.sh {' '.join(arguments)} failed (rc {done.returncode})")
    return done.stdout


def run_cases(
    nodes: int, forks: int, cases: list[str], timeout_s: float, hung_percent: float
) -> list[RunResult]:
    results: list[RunResult] = []
    fleet = Settings(forks=forks, pipelining=True, control_persist=True, fact_cache=True)
    plain = Settings(forks=forks, pipelining=False, control_persist=False, fact_cache=True)
    no_cache = Settings(forks=forks, pipelining=True, control_persist=True, fact_cache=False)

    def one(case: str, settings: Settings, playbook: str, extra: list[str], workdir: Path) -> RunResult:
        result = run_playbook(case, nodes, settings, workdir, playbook, extra, timeout_s)
        print(format_row(result), flush=True)
        results.append(result)
        return result

    def audit_args(workdir: Path) -> list[str]:
        return ["-e", f"dltune_report_dir={workdir / 'report'}"]

    def fresh_dir(name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"dltune-scale-{name}-{nodes}-{forks}-"))

    directories: list[Path] = []
    try:
        if {"audit", "audit-rerun"} & set(cases):
            work = fresh_dir("audit")
            directories.append(work)
            one("audit", fleet, "dltune.cluster.audit", audit_args(work), work)
            if "audit-rerun" in cases:
                one("audit-rerun", fleet, "dltune.cluster.audit", audit_args(work), work)
        if "audit-plain" in cases:
            work = fresh_dir("plain")
            directories.append(work)
            one("audit-plain", plain, "dltune.cluster.audit", audit_args(work), work)
        if "dl_env-nocache" in cases:
            work = fresh_dir("nocache")
            directories.append(work)
            one("dl_env-nocache", no_cache, "dltune.cluster.dl_env", ["--check"], work)
        if "dl_env-cache" in cases:
            work = fresh_dir("cache")
            directories.append(work)
            # The first run fills the cache (not reported), the second is the figure.
            run_playbook("dl_env-warmup", nodes, fleet, work, "dltune.cluster.dl_env", ["--check"], timeout_s)
            one("dl_env-cache", fleet, "dltune.cluster.dl_env", ["--check"], work)
        if "audit-hung" in cases:
            work = fresh_dir("hung")
            directories.append(work)
            count = max(1, math.ceil(nodes * hung_percent / 100))
            hung = sorted(scale_lab("hang", str(count)).split())
            try:
                result = one("audit-hung", fleet, "dltune.cluster.audit", audit_args(work), work)
            finally:
                scale_lab("unhang")
            named = problems_in_report(work / "report")
            print(f"    hung nodes made: {' '.join(hung)}")
            print(f"    named by the run (recap unreachable): {' '.join(result.unreachable) or '-'}")
            for node, problem in named.items():
                print(f"    named by the audit report: {node}: {problem}")
            verdict = (
                f"KILLED at the {timeout_s:.0f}s timeout" if result.timed_out else "ended within timeout"
            )
            missing = set(hung) - set(named) - set(result.unreachable)
            print(f"    {verdict}; hung nodes not named: {' '.join(sorted(missing)) or 'none'}", flush=True)
    finally:
        for work in directories:
            stop_masters(work / "cp")
            remove_group(
                CPUACCT / "dltune-scale-bench" / work.name if (CPUACCT / "cpuacct.usage").exists() else None
            )
            shutil.rmtree(work, ignore_errors=True)
    return results


HEADER = (
    f"{'case':<15} {'N':>4} {'forks':>5} {'wall s':>7} {'cpu s':>7} {'wait4 s':>7} {'masters':>7} "
    f"{'cpu/node s':>10} {'maxrss MiB':>10} {'tree PSS MiB':>12} {'rc':>3}"
)


def format_row(result: RunResult) -> str:
    return (
        f"{result.case:<15} {result.nodes:>4} {result.forks:>5} {result.wall_s:>7.1f} {result.cpu_s:>7.1f} "
        f"{result.cpu_wait4_s:>7.1f} {result.cpu_masters_s:>7.1f} {result.cpu_per_node_s:>10.3f} "
        f"{result.maxrss_mib:>10.1f} "
        f"{result.tree_pss_peak_mib:>12.1f} {result.returncode:>3}"
        + (" TIMEOUT" if result.timed_out else "")
        + (f" failed: {' '.join(result.failed)}" if result.failed else "")
        + (f" unreachable: {' '.join(result.unreachable)}" if result.unreachable else "")
    )


def growth(results: list[RunResult]) -> list[str]:
    """Per (case, forks): CPU per node from N to N', and the exponent b of cpu = a * N^b."""
    lines: list[str] = []
    keys = sorted({(r.case, r.forks) for r in results})
    for case, forks in keys:
        points = sorted(
            (r.nodes, r.cpu_s) for r in results if r.case == case and r.forks == forks and r.cpu_s > 0
        )
        if len(points) < 2:
            continue
        # The ratio mixes ansible-playbook's fixed start-up cost (collections, inventory, templating)
        # into "per node"; the marginal cost of one more node is the slope between two N.
        ratios = [
            f"N {n1}->{n2}: cpu/node x{(c2 / n2) / (c1 / n1):.2f},"
            f" marginal {(c2 - c1) / (n2 - n1):.3f} s/node"
            for (n1, c1), (n2, c2) in itertools.pairwise(points)
        ]
        logs = [(math.log(n), math.log(c)) for n, c in points]
        mean_x = sum(x for x, _ in logs) / len(logs)
        mean_y = sum(y for _, y in logs) / len(logs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in logs) / sum((x - mean_x) ** 2 for x, _ in logs)
        lines.append(f"{case:<15} forks {forks:>2}: {'; '.join(ratios)}; fit cpu ~ N^{slope:.2f}")
    return lines


def parse_list(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--nodes", default="10,50,100,200", help="N values, comma-separated (default 10,50,100,200)"
    )
    parser.add_argument("--forks", default="5,25,50", help="forks values, comma-separated (default 5,25,50)")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    parser.add_argument("--hung-percent", type=float, default=2.0, help="percent of nodes hung (default 2)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--no-lab", action="store_true", help="use the running lab as it is (N: its size)")
    parser.add_argument("--down", action="store_true", help="take the scale lab down at the end")
    parser.add_argument(
        "--collections",
        type=Path,
        help="a collections path holding ansible_collections/dltune/cluster, e.g. an earlier commit's "
        "tree for a before/after comparison (default: this checkout's collections/ link)",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        action="append",
        help="print the table and growth of saved results (repeatable)",
    )
    args = parser.parse_args()
    if args.collections is not None:
        global COLLECTIONS
        COLLECTIONS = args.collections.resolve()
        if not (COLLECTIONS / "ansible_collections/dltune/cluster/galaxy.yml").is_file():
            sys.exit(f"--collections {args.collections}: no ansible_collections/dltune/cluster there")
    if args.from_json:
        saved = [
            RunResult(**{"cpu_wait4_s": row["cpu_s"], **row})
            for path in args.from_json
            for row in json.loads(path.read_text())
        ]
        report(sorted(saved, key=lambda r: (r.nodes, r.forks)))
        return
    if os.geteuid() != 0:
        sys.exit("benchmarks/playbook_scale.py: run as root (the scale lab starts containers and a route)")
    cases = [case for case in args.cases.split(",") if case]
    unknown = set(cases) - set(CASES)
    if unknown:
        sys.exit(f"unknown case(s) {', '.join(sorted(unknown))}; known: {', '.join(CASES)}")
    version = subprocess.run(
        [str(BIN / "ansible-playbook"), "--version"], capture_output=True, text=True, check=True
    )
    print(version.stdout.splitlines()[0], f"| controller: {os.cpu_count()} CPUs", flush=True)
    results: list[RunResult] = []
    try:
        for nodes in sorted(parse_list(args.nodes)):
            if not args.no_lab:
                scale_lab("up", str(nodes))
            print(f"\n== N={nodes}: {scale_lab('memory').strip()}")
            print(HEADER, flush=True)
            for forks in parse_list(args.forks):
                results += run_cases(nodes, forks, cases, args.timeout, args.hung_percent)
    finally:
        if args.down:
            scale_lab("down")
    report(results)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"\nAll runs together (children of this process): CPU {children.ru_utime + children.ru_stime:.1f} s"
    )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")


def report(results: list[RunResult]) -> None:
    print("\n" + HEADER)
    for result in results:
        print(format_row(result))
    print("\nSettings per case (ansible.cfg written by this script; timeout=10, /usr/bin/python3):")
    for case, settings in sorted({(r.case, r.settings) for r in results}):
        print(f"  {case:<15} {settings}")
    hashes = sorted({r.code_hash for r in results if r.code_hash})
    if len(hashes) > 1:
        print(f"\nWARNING: playbooks/roles changed between runs ({', '.join(hashes)}): compare with care")
    print("\nGrowth of controller CPU per node with N:")
    for line in growth(results) or ["  (one N only)"]:
        print(f"  {line}")


if __name__ == "__main__":
    main()
