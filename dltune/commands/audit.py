"""`dltune audit`: read the node (probes), judge it (checks), render the results."""

from __future__ import annotations

import gc
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from dltune.commands.node import (
    apply_slurm_health,
    audit_results,
    drain_policy,
    earlier_counters,
    expectations_yaml,
    host_name,
    write_node_outputs,
)
from dltune.commands.options import (
    ALL_OPTION,
    DRAIN_PANEL,
    FACTS_FILE_OPTION,
    FLAP_WINDOW_OPTION,
    NFS_TIMEOUT_OPTION,
    TEXTFILE_DIR_OPTION,
    OutputFormat,
    drain_limit_option,
    flap_count_option,
    format_option,
    gpu_use_option,
    history_file_option,
    parse_areas,
    seconds_option,
    slurm_node_name,
)
from dltune.commands.output import (
    VisibleLogFormatter,
    check_directory,
    check_output_file,
    error_line,
    help_paragraphs,
    stdout_console,
)
from dltune.health_state import (
    DEFAULT_DRAIN_LIMIT,
    DEFAULT_FLAP_COUNT,
    DEFAULT_FLAP_WINDOW_S,
    DEFAULT_HISTORY_FILE,
)
from dltune.model import AREAS, EXIT_USAGE_OR_ERROR, exit_code
from dltune.probes.watchdog import Deadline

log = logging.getLogger("dltune")


# long: mostly its option declarations
@help_paragraphs
def audit(
    root: Annotated[
        Path, typer.Option("--root", help="Read the host's files under this directory (a fixture tree).")
    ] = Path("/"),
    output: Annotated[OutputFormat, format_option(OutputFormat)] = OutputFormat.human,
    only: Annotated[
        str | None,
        typer.Option(
            "--only", help=f"Only these areas, comma-separated (--only gpu,fabric): {', '.join(AREAS)}."
        ),
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
            rich_help_panel=DRAIN_PANEL,
        ),
    ] = False,
    slurm_node: Annotated[
        str | None,
        typer.Option(
            "--slurm-node",
            help="With --slurm-drain: Slurm node name (default: the short hostname).",
            rich_help_panel=DRAIN_PANEL,
        ),
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
    drain_limit: Annotated[str, drain_limit_option("--slurm-drain")] = DEFAULT_DRAIN_LIMIT,
    flap_count: Annotated[int, flap_count_option("--slurm-drain")] = DEFAULT_FLAP_COUNT,
    flap_window: Annotated[float, FLAP_WINDOW_OPTION] = DEFAULT_FLAP_WINDOW_S / 3600,
    history_file: Annotated[Path, history_file_option("--slurm-drain")] = Path(DEFAULT_HISTORY_FILE),
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
    """Read-only audit of this node against what the roles applied.

    Exit 0 ok, 1 a fail, 2 usage or an error with no fail."""
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
        now = datetime.now(timezone.utc)
        if output is OutputFormat.json:
            from dltune.outputs.report import render_json

            sys.stdout.write(render_json(results, host, now))
        elif output is OutputFormat.prometheus:
            from dltune.outputs.prometheus import render_prometheus

            sys.stdout.write(render_prometheus(results, now))
        else:
            from dltune.outputs.human import render_human

            asked = frozenset({"gpu.dcgm"} if dcgm else set())
            render_human(results, stdout_console(), host, show_all=show_all, asked=asked)
        raise typer.Exit(exit_code(results))
    finally:
        gc.enable()  # for callers in the same process (tests)
