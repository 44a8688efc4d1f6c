"""`dltune remedy`: what playbooks/remediate.yml may do for this node, from a fresh (read-only) audit
and the node's state in Slurm: one JSON object on stdout. The decision is dltune.fleet.remediation's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from dltune.commands.node import audit_results
from dltune.commands.options import SLURM_NODE_OPTION, history_file_option, seconds_option, slurm_node_name
from dltune.commands.output import help_paragraphs
from dltune.health_state import DEFAULT_HISTORY_FILE
from dltune.model import EXIT_OK
from dltune.probes.watchdog import Deadline


@help_paragraphs
def remedy(
    slurm_node: Annotated[str | None, SLURM_NODE_OPTION] = None,
    timeout: Annotated[float, seconds_option("--timeout", help="Seconds for the audit.")] = 30.0,
    record_resume: Annotated[
        bool,
        typer.Option(
            "--record-resume",
            help="Only record in the node's history that dltune resumes it now (remediate.yml, before its "
            "resume), so that flap damping counts the cycle; no audit.",
        ),
    ] = False,
    history_file: Annotated[Path, history_file_option("--record-resume", panel=None)] = Path(
        DEFAULT_HISTORY_FILE
    ),
) -> None:
    """Say what remediation may do for this node: resume, reapply, reset_gpu, reboot, hold, none or unknown.

    From a fresh read-only audit and the node's state in Slurm (drained by dltune? flapping?): one JSON
    object on stdout. Exit 0."""
    from dltune.fleet.remediation import remedy_for_node
    from dltune.fleet.slurm_health import SCONTROL_TIMEOUT_S, parse_node
    from dltune.fleet.slurm_health import record_resume as record
    from dltune.probes.runner import SubprocessRunner

    node = slurm_node_name(slurm_node)
    if record_resume:
        recorded = record(str(history_file))
        sys.stdout.write(json.dumps({"node": node, "recorded_resume": recorded.resumes[-1]}) + "\n")
        raise typer.Exit(EXIT_OK)
    _, results, host = audit_results(Path("/"), None, 5.0, min(10.0, timeout), Deadline(timeout))
    shown = SubprocessRunner().run(["scontrol", "-o", "show", "node", node], timeout=SCONTROL_TIMEOUT_S)
    slurm: dict[str, Any]
    state = parse_node(shown.stdout) if shown.ok else None
    if state is not None:
        slurm = {
            "state": state.state,
            "reason": state.reason,
            "drained_by_dltune": state.drained_by_dltune,
            "flapping": state.flapping,
        }
    else:
        slurm = {
            "error": (shown.stderr.strip() or f"exit {shown.returncode}")[-300:],
            "drained_by_dltune": False,
        }
    decided = remedy_for_node(results, state, slurm.get("error", ""))
    sys.stdout.write(
        json.dumps({"host": host, "node": node, "slurm": slurm, "remedy": decided.to_dict()}) + "\n"
    )
    raise typer.Exit(EXIT_OK)
