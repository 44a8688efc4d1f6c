"""`dltune healthcheck`: Slurm's HealthCheckProgram. slurmd runs it as root every HealthCheckInterval
with no PATH and no arguments (the role's wrapper gives both) and kills it after 60 s (slurm.conf's
HealthCheckTimeout from Slurm 26.05, which --slurm-timeout tells dltune). It audits the
node, writes the Prometheus textfile and the facts file as the timer does, and drains or resumes the
node within the drain limit and flap damping (dltune.fleet.slurm_health).

It always exits 0 once its options are valid: slurmd's handling of a non-zero exit differs between
versions (21.08 logs "health_check failed"; others may act on it), and dltune's own findings reach
Slurm through `scontrol` with a reason that names the checks. So neither a finding nor a dltune bug
can make slurmd take the node out on its own; each run prints one line (slurmd logs it on failure)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Annotated

import typer

from dltune.commands.node import apply_slurm_health, audit_results, drain_policy, write_node_outputs
from dltune.commands.options import (
    DEBOUNCE_OPTION,
    DRAIN_PANEL,
    FACTS_FILE_OPTION,
    FLAP_WINDOW_OPTION,
    NFS_TIMEOUT_OPTION,
    PROFILE_OPTION,
    RECOVERY_RUNS_OPTION,
    RECOVERY_WINDOW_OPTION,
    SLURM_NODE_OPTION,
    TEXTFILE_DIR_OPTION,
    HealthProfile,
    drain_limit_option,
    flap_count_option,
    history_file_option,
    seconds_option,
    slurm_node_name,
)
from dltune.commands.output import error_line, help_paragraphs
from dltune.fleet.slurm_health import critical_failures
from dltune.health_state import (
    DEFAULT_DRAIN_LIMIT,
    DEFAULT_FLAP_COUNT,
    DEFAULT_FLAP_WINDOW_S,
    DEFAULT_HISTORY_FILE,
    DEFAULT_RECOVERY_RUNS,
    DEFAULT_RECOVERY_WINDOW_S,
)
from dltune.model import EXIT_OK, Status
from dltune.probes.watchdog import Deadline

# slurmd kills the program (its whole process group, SIGTERM then SIGKILL 10 ms later) at 60 s, or at
# HealthCheckTimeout (1 to 65535 s, Slurm >= 26.05): --slurm-timeout. The audit leaves SCONTROL_RESERVE_S
# of it for up to five scontrol calls of slurm_health.SCONTROL_TIMEOUT_S each, the recheck's second,
# Python's start and the writes; unless told, it takes AUDIT_MARGIN_S less still (25 s of 60).
SLURM_TIMEOUT_S = 60.0
MAX_SLURM_TIMEOUT_S = 65_535.0
SCONTROL_RESERVE_S = 30.0
AUDIT_MARGIN_S = 5.0
AUDIT_SECONDS = SLURM_TIMEOUT_S - SCONTROL_RESERVE_S - AUDIT_MARGIN_S
# The shortest slurmd limit dltune runs under: its default audit gets 5 s.
MIN_SLURM_TIMEOUT_S = SCONTROL_RESERVE_S + AUDIT_MARGIN_S + 5.0


def audit_seconds(timeout: float | None, slurm_timeout: float) -> float:
    """The audit's seconds: --timeout, or by default slurmd's limit less the reserve and the margin;
    a --timeout that leaves less than the reserve of --slurm-timeout is a usage error naming both."""
    if timeout is None:
        return slurm_timeout - SCONTROL_RESERVE_S - AUDIT_MARGIN_S
    if timeout > slurm_timeout - SCONTROL_RESERVE_S:
        raise typer.BadParameter(
            f"{timeout:g} s leaves less than {SCONTROL_RESERVE_S:g} s of --slurm-timeout {slurm_timeout:g} "
            f"(slurmd's HealthCheckTimeout) for the scontrol calls: give --timeout at most "
            f"{slurm_timeout - SCONTROL_RESERVE_S:g}, or a larger --slurm-timeout where slurm.conf sets one "
            "(Slurm >= 26.05)",
            param_hint="--timeout",
        )
    return timeout


# long: mostly its option declarations
@help_paragraphs
def healthcheck(
    textfile_dir: Annotated[Path | None, TEXTFILE_DIR_OPTION] = None,
    facts_file: Annotated[Path | None, FACTS_FILE_OPTION] = None,
    drain: Annotated[
        bool,
        typer.Option(
            "--drain/--no-drain",
            help="Drain and resume the node (--no-drain: report only).",
            rich_help_panel=DRAIN_PANEL,
        ),
    ] = True,
    slurm_node: Annotated[str | None, SLURM_NODE_OPTION] = None,
    timeout: Annotated[
        float | None,
        seconds_option(
            "--timeout",
            maximum=MAX_SLURM_TIMEOUT_S - SCONTROL_RESERVE_S,
            help=f"Seconds for the audit: at most --slurm-timeout less {SCONTROL_RESERVE_S:g}; by default "
            f"--slurm-timeout less {SCONTROL_RESERVE_S + AUDIT_MARGIN_S:g} ({AUDIT_SECONDS:g} of slurmd's "
            f"{SLURM_TIMEOUT_S:g}).",
        ),
    ] = None,
    slurm_timeout: Annotated[
        float,
        seconds_option(
            "--slurm-timeout",
            minimum=MIN_SLURM_TIMEOUT_S,
            maximum=MAX_SLURM_TIMEOUT_S,
            help="Seconds slurmd lets the program run: slurm.conf's HealthCheckTimeout (Slurm >= 26.05), "
            f"else {SLURM_TIMEOUT_S:g}.",
        ),
    ] = SLURM_TIMEOUT_S,
    nfs_timeout: Annotated[float, NFS_TIMEOUT_OPTION] = 5.0,
    nvml_timeout: Annotated[
        float,
        seconds_option("--nvml-timeout", help="Seconds NVML may take before the driver counts as hung."),
    ] = 10.0,
    drain_limit: Annotated[str, drain_limit_option(None)] = DEFAULT_DRAIN_LIMIT,
    flap_count: Annotated[int, flap_count_option(None)] = DEFAULT_FLAP_COUNT,
    flap_window: Annotated[float, FLAP_WINDOW_OPTION] = DEFAULT_FLAP_WINDOW_S / 3600,
    # beside the output files: the --no-drain column of the drain panel leaves its help too narrow a column
    history_file: Annotated[Path, history_file_option(None, panel=None)] = Path(DEFAULT_HISTORY_FILE),
    profile: Annotated[HealthProfile, PROFILE_OPTION] = HealthProfile.drain,
    debounce: Annotated[list[str] | None, DEBOUNCE_OPTION] = None,
    recovery_runs: Annotated[int, RECOVERY_RUNS_OPTION] = DEFAULT_RECOVERY_RUNS,
    recovery_window: Annotated[float, RECOVERY_WINDOW_OPTION] = DEFAULT_RECOVERY_WINDOW_S / 60,
    check_options: Annotated[
        bool,
        typer.Option(
            "--check-options",
            help="Only check the options (the role does, before it installs the wrapper), and exit 0.",
        ),
    ] = False,
) -> None:
    """Slurm's HealthCheckProgram: audit this node, write the textfile and the facts, drain or resume it.

    It drains only within the drain limit, flap damping, the debounce and the recovery window (the
    options below); --profile observe says what it would do and changes nothing, --no-drain only
    reports.

    Exit 0 whatever it found (findings reach Slurm as drain reasons); 2 only for invalid options."""
    timeout = audit_seconds(timeout, slurm_timeout)
    policy = drain_policy(
        drain_limit, flap_count, flap_window, profile, debounce or (), recovery_runs, recovery_window
    )
    node = slurm_node_name(slurm_node)
    if check_options:
        raise typer.Exit(EXIT_OK)
    gc.disable()  # as in audit: a short-lived process, its objects freed at exit
    try:
        snapshot, results, host = audit_results(
            Path("/"), None, nfs_timeout, min(nvml_timeout, timeout), Deadline(timeout)
        )
        said, report = "report only (--no-drain)", None
        if drain:
            said, added, _failed, report = apply_slurm_health(node, results, policy, history_file)
            results += added
        write_node_outputs(results, host, textfile_dir, facts_file, sorted(snapshot.expected), report)
        fails = sum(1 for r in results if r.status is Status.FAIL)
        critical = critical_failures(results)
        error_line(
            f"dltune healthcheck {node} [{profile.value}]: {fails} fail"
            + (f" (critical: {' '.join(critical)})" if critical else "")
            + f"; {said}"
        )
    except typer.Exit:
        pass  # an output file that could not be written: said on stderr already
    except Exception as exc:  # a dltune bug must never be what takes a node out (see the docstring)
        error_line(f"dltune healthcheck {node}: a dltune bug stopped it ({type(exc).__name__}: {exc})")
    finally:
        gc.enable()
    raise typer.Exit(EXIT_OK)
