"""A Slurm node name reaches scontrol only when it is one plain node name: scontrol expands a hostlist
("n[1-4]") or a list ("a,b") to several nodes, so one health check run would drain (or resume) many
nodes at once, past the drain limit. The CLI runs as a child with a stand-in `scontrol` first on PATH
that records every call (Slurm cannot run here; test_site_lab runs the real one)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dltune.fleet.slurm_health import NODE_NAME, checked_node_name
from dltune.model import InputError
from tests.unit.test_hostile_inputs import one_line, run_child

HOSTILE = ["n[1-4]", "a,b", "n1 n2", "n1\tn2", "-n1", "n1\n", "", "n\u00e91", "n[1-4],gpu[01-99]", "ALL"[:0]]


@pytest.fixture
def scontrol_calls(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    stand_in = bin_dir / "scontrol"
    stand_in.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n')
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURMD_NODENAME": ""}
    return env, calls


@pytest.mark.parametrize("name", [n for n in HOSTILE if n])
@pytest.mark.parametrize(
    "command",
    [
        ["healthcheck", "--history-file", "{tmp}/history", "--timeout", "5"],
        ["audit", "--slurm-drain", "--history-file", "{tmp}/history", "--only", "system"],
        ["remedy"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_node_name_that_is_not_one_node_is_refused_before_scontrol(
    name: str, command: list[str], scontrol_calls: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, calls = scontrol_calls
    argv = [part.replace("{tmp}", str(tmp_path)) for part in command]
    done = run_child(*argv, "--slurm-node", name, env=env)
    assert done.returncode == 2, done.stderr
    assert "--slurm-node=" in one_line(done.stderr) and "is not one Slurm node name" in done.stderr
    assert not calls.exists(), calls.read_text()


@pytest.mark.parametrize("name", ["a,b", "gpu[01-16]"])
def test_a_hostlist_in_slurmd_nodename_is_refused_naming_the_variable(
    name: str, scontrol_calls: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, calls = scontrol_calls
    done = run_child(
        "healthcheck", "--history-file", str(tmp_path / "h"), env={**env, "SLURMD_NODENAME": name}
    )
    assert done.returncode == 2 and one_line(done.stderr).startswith("dltune healthcheck: SLURMD_NODENAME=")
    assert not calls.exists()


@pytest.mark.parametrize("name", ["n1", "gpu-node-01", "dgx_a100.7", "node0042", "N"])
def test_a_plain_node_name_is_taken_as_it_is(name: str) -> None:
    assert checked_node_name(name, "--slurm-node") == name


@pytest.mark.parametrize("name", HOSTILE)
def test_a_name_scontrol_would_expand_or_misread_is_an_input_error(name: str) -> None:
    with pytest.raises(InputError, match=r"^--slurm-node="):
        checked_node_name(name, "--slurm-node")
    assert NODE_NAME.fullmatch(name) is None
