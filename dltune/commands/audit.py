"""`dltune audit`: read the node (probes), judge it (checks), render the results."""

from __future__ import annotations

import enum
import gc
import json
import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dltune.commands import (
    ALL_OPTION,
    OutputFormat,
    VisibleLogFormatter,
    check_directory,
    check_output_file,
    error_line,
    gpu_use_option,
    number_option,
    parse_areas,
    seconds_option,
    stdout_console,
    write_output,
)
from dltune.model import AREAS, EXIT_USAGE_OR_ERROR, DltuneError, Result, exit_code
from dltune.probes.watchdog import Deadline
from dltune.slurm_health import (
    DEFAULT_DRAIN_LIMIT,
    DEFAULT_FLAP_COUNT,
    DEFAULT_FLAP_WINDOW_S,
    DEFAULT_HISTORY_FILE,
    DEFAULT_RECOVERY_RUNS,
    DEFAULT_RECOVERY_WINDOW_S,
    DEFAULT_TRANSIENT_RUNS,
)

if TYPE_CHECKING:
    from dltune.health_state import HealthReport
    from dltune.slurm_health import Policy
    from dltune.snapshot import Snapshot

log = logging.getLogger("dltune")

# Options `dltune audit` shares with `dltune healthcheck` (and `dltune remedy`).
TEXTFILE_DIR_OPTION = typer.Option(
    "--textfile-dir", help="Also write dltune.prom there (node_exporter textfile collector)."
)
FACTS_FILE_OPTION = typer.Option(
    "--facts-file", help="Also write Ansible local facts (e.g. /etc/ansible/facts.d/dltune.fact)."
)
NFS_TIMEOUT_OPTION = seconds_option(
    "--nfs-timeout", help="Seconds an NFS mount may take to answer before it counts as stale."
)
SLURM_NODE_OPTION = typer.Option(
    "--slurm-node", help="Slurm node name (default: $SLURMD_NODENAME, then the short hostname)."
)


def slurm_node_name(given: str | None, environ: bool = True) -> str:
    """The one Slurm node this command may change: --slurm-node, else $SLURMD_NODENAME (where
    ``environ``), else the short hostname; a name that is not one plain node name (a hostlist, a
    list) is an InputError naming where it came from."""
    from dltune.slurm_health import checked_node_name

    if given is not None:
        return checked_node_name(given, "--slurm-node")
    if environ and os.environ.get("SLURMD_NODENAME"):
        return checked_node_name(os.environ["SLURMD_NODENAME"], "SLURMD_NODENAME")
    return checked_node_name(socket.gethostname().split(".")[0], "the short hostname")


# The drain bounds' options, shared by `dltune audit --slurm-drain` and `dltune healthcheck`.
DRAIN_LIMIT_OPTION = typer.Option(
    "--drain-limit",
    help="With --slurm-drain: do not drain while dltune has drained this many nodes of this node's "
    "partitions already: a count (5) or a share (10%, at least 2). A system.drain_limit warning says so.",
)
FLAP_COUNT_OPTION = number_option(
    "--flap-count",
    kind=int,
    minimum=1,
    maximum=1000,
    help="With --slurm-drain: a node dltune resumed this many times within --flap-window and failing again "
    "stays drained as flapping (an operator resumes it).",
)
FLAP_WINDOW_OPTION = number_option(
    "--flap-window", kind=float, minimum=0.01, maximum=24 * 365, help="Hours the resumes are counted over."
)
HISTORY_FILE_OPTION = typer.Option(
    "--history-file", help="With --slurm-drain: where this node's drain/resume history is kept (root's)."
)
PROFILE_OPTION = typer.Option(
    "--profile",
    help="observe: judge and report only; drain: drain and resume; remediate: drain, and "
    "playbooks/remediate.yml may act on the node.",
)
DEBOUNCE_OPTION = typer.Option(
    "--debounce",
    help="Consecutive failing runs before a critical fail drains: CLASS=N for a class (hard, transient; "
    f"defaults hard=1, transient={DEFAULT_TRANSIENT_RUNS}) or CHECK=N for one check (gpu.clocks=5). "
    "Repeat it.",
)
RECOVERY_RUNS_OPTION = number_option(
    "--recovery-runs",
    kind=int,
    minimum=1,
    maximum=1000,
    help="A node drained for a transient check is resumed after this many consecutive passing runs...",
)
RECOVERY_WINDOW_OPTION = number_option(
    "--recovery-window",
    kind=float,
    minimum=0.0,
    maximum=7 * 24 * 60,
    help="...spanning at least these minutes.",
)


def audit_results(
    root: Path,
    areas: Sequence[str] | None,
    nfs_timeout: float,
    nvml_timeout: float,
    deadline: Deadline,
    previous: Mapping[str, Mapping[str, int]] | None = None,
    dcgm_level: int | None = None,
    gpu_use: float = 1.0,
) -> tuple[Snapshot, list[Result], str]:
    """The audit itself: the node's snapshot, its judgement by every check of ``areas``, the host's name.
    NVML's child starts first, before the imports of every probe and check: its half-second clock
    window then runs while they load and read."""
    from dltune.probes.nvml import nvml_in_background

    wanted = set(areas) if areas is not None else {"gpu", "driver", "fabric"}
    nvml_future = (
        nvml_in_background(nvml_timeout, deadline)
        if str(root) == "/" and wanted & {"gpu", "driver", "fabric"}
        else None
    )
    from dltune.checks import run_checks
    from dltune.probes import collect_snapshot

    snapshot = collect_snapshot(
        root,
        areas=areas,
        nfs_timeout=nfs_timeout,
        nvml_timeout=nvml_timeout,
        deadline=deadline,
        previous=previous,
        dcgm_level=dcgm_level,
        nvml_future=nvml_future,
    )
    for path, error in snapshot.errors.items():
        log.info("probe could not read %s: %s", path, error)
    from dltune.impact import Node, price

    gpus = len(snapshot.nvml.gpus) if snapshot.nvml.available else 0
    results = price(acknowledged(run_checks(snapshot, areas), root), Node(gpus=gpus, use=gpu_use))
    return snapshot, results, host_name(root)


def acknowledged(results: list[Result], root: Path) -> list[Result]:
    """The results with the node's acknowledgements (dltune.acks) applied; a file that could not be used
    is a `system.acknowledgements` warning (its findings then count in full: nothing is silenced by a
    file dltune does not trust)."""
    from dltune import acks
    from dltune.model import Status

    path = acks.DEFAULT_ACK_FILE if str(root) == "/" else str(root / acks.DEFAULT_ACK_FILE.lstrip("/"))
    found, note = acks.load(path)
    if note:
        results.append(
            Result(
                "system.acknowledgements",
                Status.WARN,
                note,
                remedy="write acknowledgements with `dltune ack` as root (it keeps the file root's, 0644)",
            )
        )
    return acks.apply(results, found)


# long: mostly its option declarations
def audit(
    root: Annotated[
        Path, typer.Option("--root", help="Read the host's files under this directory (a fixture tree).")
    ] = Path("/"),
    output: Annotated[OutputFormat, typer.Option("--format", help="Output format on stdout.")] = (
        OutputFormat.human
    ),
    only: Annotated[
        str | None, typer.Option("--only", help=f"Comma-separated areas: {','.join(AREAS)}.")
    ] = None,
    show_all: Annotated[bool, ALL_OPTION] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log probe details on stderr.")] = False,
    textfile_dir: Annotated[Path | None, TEXTFILE_DIR_OPTION] = None,
    facts_file: Annotated[Path | None, FACTS_FILE_OPTION] = None,
    nfs_timeout: Annotated[float, NFS_TIMEOUT_OPTION] = 5.0,
    slurm_drain: Annotated[
        bool,
        typer.Option(
            "--slurm-drain",
            help="Drain this Slurm node on a critical fail; resume it when healthy (only dltune's drain).",
        ),
    ] = False,
    slurm_node: Annotated[
        str | None, typer.Option("--slurm-node", help="Slurm node name (default: the short hostname).")
    ] = None,
    timeout: Annotated[
        float,
        seconds_option(
            "--timeout",
            help="Seconds for the whole audit (well under Slurm's 60 s HealthCheckProgram limit): on expiry "
            "the results so far are printed with system.audit_timeout naming what did not finish.",
        ),
    ] = 30.0,
    nvml_timeout: Annotated[
        float,
        seconds_option("--nvml-timeout", help="Seconds NVML may take before the driver counts as hung."),
    ] = 10.0,
    dcgm: Annotated[
        bool,
        typer.Option(
            "--dcgm",
            help="Also run DCGM's level 1 diagnostic (dcgmi diag -r 1: seconds, read-only) within --timeout; "
            "levels 2 and 3 run GPU workloads: `dltune check --dcgm 2`.",
        ),
    ] = False,
    previous: Annotated[
        Path | None,
        typer.Option(
            "--previous",
            help="An earlier JSON or facts output of dltune audit: error counters that rose since are "
            "findings (default: the --facts-file this run replaces).",
        ),
    ] = None,
    drain_limit: Annotated[str, DRAIN_LIMIT_OPTION] = DEFAULT_DRAIN_LIMIT,
    flap_count: Annotated[int, FLAP_COUNT_OPTION] = DEFAULT_FLAP_COUNT,
    flap_window: Annotated[float, FLAP_WINDOW_OPTION] = DEFAULT_FLAP_WINDOW_S / 3600,
    history_file: Annotated[Path, HISTORY_FILE_OPTION] = Path(DEFAULT_HISTORY_FILE),
    emit_expectations: Annotated[
        bool,
        typer.Option(
            "--emit-expectations",
            help="Print this (healthy) node's GPU-NIC topology as the dltune role's variables "
            "(dltune_health_gpu_numa_nodes, dltune_health_gpu_nearest_nics) for group_vars, and exit.",
        ),
    ] = False,
    gpu_use: Annotated[float, gpu_use_option()] = 1.0,
) -> None:
    """Read-only audit of this node against what the roles applied. Exit 0 ok, 1 fail, 2 usage/error."""
    deadline = Deadline(timeout)
    # A short-lived process that builds 100,000s of small objects on a host with many mounts and frees
    # them all at exit: the cyclic collector would only rescan them (a fifth of the run's time).
    gc.disable()
    try:
        logs = logging.StreamHandler(sys.stderr)
        logs.setFormatter(VisibleLogFormatter(logging.BASIC_FORMAT))
        logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, handlers=[logs])
        areas = parse_areas(only)
        check_directory(root, "--root")
        if emit_expectations:
            sys.stdout.write(expectations_yaml(root, host_name(root)))
            raise typer.Exit(0)
        if textfile_dir is not None:
            check_output_file(textfile_dir / "dltune.prom", "--textfile-dir")
        if facts_file is not None:
            check_output_file(facts_file, "--facts-file")
        policy = drain_policy(drain_limit, flap_count, flap_window) if slurm_drain else None
        if slurm_drain:  # a name scontrol would expand to several nodes stops here, before the audit
            slurm_node = slurm_node_name(slurm_node, environ=False)
        counters = earlier_counters(previous, facts_file)
        snapshot, results, host = audit_results(
            root,
            areas,
            nfs_timeout,
            nvml_timeout,
            deadline,
            counters,
            dcgm_level=1 if dcgm else None,
            gpu_use=gpu_use,
        )
        if policy is not None:
            said, added, failed, _report = apply_slurm_health(slurm_node, results, policy, history_file)
            results += added
            error_line(f"dltune audit --slurm-drain: {said}")
        write_node_outputs(results, host, textfile_dir, facts_file, sorted(snapshot.expected))
        if policy is not None and failed:
            raise typer.Exit(EXIT_USAGE_OR_ERROR)
        from dltune.prometheus import render_prometheus
        from dltune.report import render_human, render_json

        now = datetime.now(timezone.utc)
        if output is OutputFormat.json:
            sys.stdout.write(render_json(results, host, now))
        elif output is OutputFormat.prometheus:
            sys.stdout.write(render_prometheus(results, now))
        else:
            asked = frozenset({"gpu.dcgm"} if dcgm else set())
            render_human(results, stdout_console(), host, show_all=show_all, asked=asked)
        raise typer.Exit(exit_code(results))
    finally:
        gc.enable()  # for callers in the same process (tests)


HEALTH_TEXTFILE = "dltune-health.prom"
# A textfile of hundreds of GPUs' series is tens of kB: anything larger is not one dltune wrote.
TEXTFILE_MAX_BYTES = 4 << 20


def host_name(root: Path) -> str:
    return socket.gethostname() if str(root) == "/" else f"{socket.gethostname()}:{root}"


def expectations_yaml(root: Path, host: str) -> str:
    """The topology variables as YAML (JSON values are YAML flow values: nothing to escape by hand)."""
    from dltune.checks.fabric import emit_expectations
    from dltune.probes import collect_snapshot

    variables = emit_expectations(collect_snapshot(root, areas=["fabric"]))
    lines = [f"# dltune audit --emit-expectations on {host}: the GPU-NIC topology of a node judged healthy"]
    for name, values in variables.items():
        lines.append(f"{name}:" + ("" if values else " {}"))
        lines += [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in sorted(values.items())]
    return "\n".join(lines) + "\n"


def earlier_counters(previous: Path | None, facts_file: Path | None) -> dict[str, dict[str, int]]:
    """Counters of the previous audit: from --previous (which must be usable), else from the facts
    file this run is about to replace (where a missing or unusable one just means a first run)."""
    from dltune.cluster import previous_counters

    if previous is not None:
        found, problem = previous_counters(previous)
        if problem is not None:
            raise typer.BadParameter(problem, param_hint="--previous")
        return found
    if facts_file is not None and facts_file.is_file():
        found, problem = previous_counters(facts_file)
        if problem is not None:
            log.info("not comparing with %s: %s", facts_file, problem)
        return found
    return {}


def write_node_outputs(
    results: Sequence[Result],
    host: str,
    textfile_dir: Path | None,
    facts_file: Path | None,
    roles_applied: Sequence[str] = (),
    health: HealthReport | None = None,
) -> None:
    """The Prometheus textfile and the Ansible facts file, each where asked. The health check's own
    series (``health``) go to a file of their own, HEALTH_TEXTFILE, written first: the audit timer
    writes dltune.prom too, and would otherwise wipe them at each of its runs."""
    from dltune.prometheus import render_health_textfile, render_prometheus
    from dltune.report import render_facts

    now = datetime.now(timezone.utc)
    if textfile_dir is not None:
        if health is not None:
            write_output(textfile_dir / HEALTH_TEXTFILE, render_health_textfile(health), "--textfile-dir")
        textfile = textfile_dir / "dltune.prom"
        previous = previous_success(textfile)
        write_output(textfile, render_prometheus(results, now, previous), "--textfile-dir")
    if facts_file is not None:
        write_output(facts_file, render_facts(results, host, now, roles_applied), "--facts-file")


def previous_success(textfile: Path) -> float | None:
    """The last success the textfile this run replaces recorded (none: a first run, or unreadable)."""
    from dltune.prometheus import last_success_of
    from dltune.safeio import read_regular

    try:
        text = read_regular(textfile, max_bytes=TEXTFILE_MAX_BYTES, follow_symlinks=False)
    except OSError:
        return None
    return last_success_of(text[:TEXTFILE_MAX_BYTES].decode("utf-8", "replace"))


class HealthProfile(str, enum.Enum):
    observe = "observe"
    drain = "drain"
    remediate = "remediate"


def drain_policy(
    drain_limit: str,
    flap_count: int,
    flap_window_hours: float,
    profile: HealthProfile = HealthProfile.drain,
    debounce_given: Sequence[str] = (),
    recovery_runs: int = DEFAULT_RECOVERY_RUNS,
    recovery_window_minutes: float = DEFAULT_RECOVERY_WINDOW_S / 60,
) -> Policy:
    """The drain bounds from the options (exit 2 naming the option before any work)."""
    from dltune.checks import failure_classes
    from dltune.health_state import Profile
    from dltune.slurm_health import DrainLimit, Policy, debounce

    try:
        limit = DrainLimit.parse(drain_limit)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--drain-limit") from exc
    classes = failure_classes()
    class_runs = {"hard": 1, "transient": DEFAULT_TRANSIENT_RUNS}
    overrides: dict[str, int] = {}
    for given in debounce_given:
        name, _, runs = given.partition("=")
        name = name.strip()
        if not runs.strip().isdigit() or not 1 <= int(runs) <= 1000:
            raise typer.BadParameter(f"{given!a}: give NAME=N with N from 1 to 1000", param_hint="--debounce")
        if name in class_runs:
            class_runs[name] = int(runs)
        elif name in classes:
            overrides[name] = int(runs)
        else:
            raise typer.BadParameter(
                f"{name!a} is neither a class (hard, transient) nor a check id "
                "(dltune audit --all lists them)",
                param_hint="--debounce",
            )
    runs_needed, transient = debounce(classes, class_runs, overrides)
    return Policy(
        limit=limit,
        flap_count=flap_count,
        flap_window_s=flap_window_hours * 3600,
        profile=Profile(profile.value),
        runs_needed=runs_needed,
        transient=transient,
        recovery_runs=recovery_runs,
        recovery_window_s=recovery_window_minutes * 60,
    )


def apply_slurm_health(
    slurm_node: str | None, results: Sequence[Result], policy: Policy, history_file: Path
) -> tuple[str, list[Result], bool, HealthReport | None]:
    """Drain or resume this node within the bounds: (what was done, the results it adds, whether Slurm
    failed to answer, in which case nothing was changed, what the run knows for the metrics)."""
    from dltune.probes.runner import SubprocessRunner
    from dltune.slurm_health import SlurmUnavailable, apply_and_report

    node = slurm_node_name(slurm_node, environ=False)
    try:
        said, added, report = apply_and_report(node, results, SubprocessRunner(), policy, str(history_file))
    except (SlurmUnavailable, OSError, DltuneError) as exc:
        return f"nothing changed in Slurm: {exc}", [], True, None
    return said, added, False, report
