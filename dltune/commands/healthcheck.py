"""`dltune healthcheck`: Slurm's HealthCheckProgram. slurmd runs it as root every HealthCheckInterval
with no PATH and no arguments (the role's wrapper gives both) and kills it after 60 s. It audits the
node, writes the Prometheus textfile and the facts file as the timer does, and drains or resumes the
node within the drain limit and flap damping (dltune.slurm_health).

It always exits 0 once its options are valid: slurmd's handling of a non-zero exit differs between
versions (21.08 logs "health_check failed"; others may act on it), and dltune's own findings reach
Slurm through `scontrol` with a reason that names the checks. So neither a finding nor a dltune bug
can make slurmd take the node out on its own; each run prints one line (slurmd logs it on failure)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Annotated

import typer

from dltune.commands import error_line, seconds_option
from dltune.commands.audit import (
    DEBOUNCE_OPTION,
    DRAIN_LIMIT_OPTION,
    FACTS_FILE_OPTION,
    FLAP_COUNT_OPTION,
    FLAP_WINDOW_OPTION,
    HISTORY_FILE_OPTION,
    NFS_TIMEOUT_OPTION,
    PROFILE_OPTION,
    RECOVERY_RUNS_OPTION,
    RECOVERY_WINDOW_OPTION,
    SLURM_NODE_OPTION,
    TEXTFILE_DIR_OPTION,
    HealthProfile,
    apply_slurm_health,
    audit_results,
    drain_policy,
    slurm_node_name,
    write_node_outputs,
)
from dltune.model import EXIT_OK, Status
from dltune.probes.watchdog import Deadline
from dltune.slurm_health import (
    DEFAULT_DRAIN_LIMIT,
    DEFAULT_FLAP_COUNT,
    DEFAULT_FLAP_WINDOW_S,
    DEFAULT_HISTORY_FILE,
    DEFAULT_RECOVERY_RUNS,
    DEFAULT_RECOVERY_WINDOW_S,
    critical_failures,
)

# slurmd kills the program at 60 s: the audit's share leaves room for up to five scontrol calls of
# slurm_health.SCONTROL_TIMEOUT_S each and the recheck's second.
AUDIT_SECONDS = 25.0
MAX_AUDIT_SECONDS = 30.0


# long: mostly its option declarations
def healthcheck(
    textfile_dir: Annotated[Path | None, TEXTFILE_DIR_OPTION] = None,
    facts_file: Annotated[Path | None, FACTS_FILE_OPTION] = None,
    drain: Annotated[
        bool, typer.Option("--drain/--no-drain", help="Drain and resume the node (--no-drain: report only).")
    ] = True,
    slurm_node: Annotated[str | None, SLURM_NODE_OPTION] = None,
    timeout: Annotated[
        float,
        seconds_option(
            "--timeout",
            maximum=MAX_AUDIT_SECONDS,
            help="Seconds for the audit (slurmd's limit is 60 s for all).",
        ),
    ] = AUDIT_SECONDS,
    nfs_timeout: Annotated[float, NFS_TIMEOUT_OPTION] = 5.0,
    nvml_timeout: Annotated[
        float,
        seconds_option("--nvml-timeout", help="Seconds NVML may take before the driver counts as hung."),
    ] = 10.0,
    drain_limit: Annotated[str, DRAIN_LIMIT_OPTION] = DEFAULT_DRAIN_LIMIT,
    flap_count: Annotated[int, FLAP_COUNT_OPTION] = DEFAULT_FLAP_COUNT,
    flap_window: Annotated[float, FLAP_WINDOW_OPTION] = DEFAULT_FLAP_WINDOW_S / 3600,
    history_file: Annotated[Path, HISTORY_FILE_OPTION] = Path(DEFAULT_HISTORY_FILE),
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
    """Slurm's HealthCheckProgram: audit, write the textfile and facts, drain/resume within the bounds.
    Exit 0 whatever it found (findings reach Slurm as drain reasons); 2 only for invalid options."""
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
