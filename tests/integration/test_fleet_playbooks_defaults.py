"""playbooks/audit.yml and bench.yml as a user runs them: the collection by its name (dltune.cluster.audit),
no ansible.cfg of this repository (Ansible's defaults: JSON result format, forks 5), nodes on local
connections, the real dltune for the nodes that have it and for `dltune report` on the controller.

- A node without dltune is in the report as "not installed" with the role that installs it, and fails
  with that line after the merge (recap failed=1); dltune's own exit 2 stays a crash, not a failure.
- The cluster summary prints its rows as rows under the JSON result format and under this repository's
  YAML one (no row folded, no "\\n" inside a printed string)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO_ROOT

pytest.importorskip("ansible")
BIN = Path(sys.executable).parent
DLTUNE = BIN / "dltune"
ANSIBLE_PLAYBOOK = BIN / "ansible-playbook"
# The nodes' and the controller's PATH: the system's, where no dltune lives.
SYSTEM_PATH = "/usr/bin:/bin"
REMEDY = (
    ": apply role dltune.cluster.dltune (playbook dltune.cluster.dltune)"
    + " or set dltune_{play}_executable to its path"
)
NOT_ON_PATH = "not installed: dltune is not on the PATH of this node" + REMEDY
NOT_THERE = "not installed: {path} is not on this node" + REMEDY
RECAP = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=\d+\s+unreachable=(\d+)\s+failed=(\d+)", re.M)

if not (DLTUNE.is_file() and ANSIBLE_PLAYBOOK.is_file()):
    pytest.skip("no dltune and ansible-playbook beside this interpreter (make venv)", allow_module_level=True)
if shutil.which("dltune", path=SYSTEM_PATH):
    pytest.skip(f"dltune is installed on {SYSTEM_PATH}: no node here lacks it", allow_module_level=True)


def stand_in(path: Path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def inventory(tmp_path: Path, nodes: dict[str, dict[str, str]]) -> Path:
    # An explicit interpreter: Ansible's discovery on a local connection warns and may pick another.
    doc = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {"gpu_nodes": {"hosts": nodes}},
    }}  # fmt: skip
    path = tmp_path / "inventory.yml"
    path.write_text(json.dumps(doc))
    return path


def run_play(
    playbook: str, tmp_path: Path, nodes: dict[str, dict[str, str]], config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook with Ansible's defaults (an empty ANSIBLE_CONFIG) unless ``config`` is given, and
    no ANSIBLE_* of the caller's environment."""
    if config is None:
        config = tmp_path / "ansible.cfg"
        config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH=SYSTEM_PATH, ANSIBLE_CONFIG=str(config), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"))  # fmt: skip
    extra = {"dltune_report_dir": str(tmp_path / "report"), "dltune_report_executable": str(DLTUNE)}
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), playbook, "-i", str(inventory(tmp_path, nodes)), "-e", json.dumps(extra)],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300, env=env,
    )  # fmt: skip


def recap(done: subprocess.CompletedProcess[str]) -> dict[str, tuple[int, int]]:
    """host -> (unreachable, failed) from the play recap."""
    return {host: (int(unreachable), int(failed)) for host, unreachable, failed in RECAP.findall(done.stdout)}


def summary_block(stdout: str) -> str:
    """What the task "Show the cluster summary" printed, up to the next task or play."""
    start = stdout.index("TASK [Show the cluster summary]")
    end = min(i for i in (stdout.find("\nPLAY ", start), stdout.find("\nTASK [", start + 1)) if i > 0)
    return stdout[start:end]


def shown_lines(block: str) -> set[str]:
    """The block's lines as a reader sees them: indentation gone, a JSON string's quotes and escapes
    read (the JSON format prints a list item as "...",)."""
    lines = set()
    for line in block.splitlines():
        text = line.strip()
        if text.startswith('"') and text.rstrip(",").endswith('"'):
            text = json.loads(text.rstrip(",")).strip()  # the report's own indentation too, as in rows
        lines.add(text)
    return lines


def assert_rows_are_rows(done: subprocess.CompletedProcess[str], node_files: list[Path]) -> None:
    """Every line of `dltune report`'s own summary of the same files is one line of the play's output."""
    block = summary_block(done.stdout)
    assert "\\n" not in block, block
    expected = subprocess.run(
        [str(DLTUNE), "report", *map(str, node_files)], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    rows = [row.strip() for row in expected if row.strip()]
    assert len(rows) >= 5 and any("NOT INSTALLED" in row for row in rows), expected
    shown = shown_lines(block)
    assert [row for row in rows if row not in shown] == [], block


def nodes_with_and_without_dltune(tmp_path: Path) -> dict[str, dict[str, str]]:
    # node1 has dltune (the real one, judging a fixture tree: its result does not hang on this host);
    # node2 has none on its PATH; node3's dltune_audit_executable names a path that is not there;
    # node4's dltune starts and fails with its own exit 2 (a crash: reported, the node not failed);
    # node5's never answers (a hung node): cut at its dltune_audit_timeout, the others not held.
    fixture = FIXTURES / "tmp_tmpfs_ok"
    return {
        "node1": {"dltune_audit_executable": stand_in(
            tmp_path / "node1/dltune", f'exec "{DLTUNE}" "$@" --root "{fixture}"')},
        "node2": {},
        "node3": {"dltune_audit_executable": str(tmp_path / "node3/opt/dltune")},
        "node4": {"dltune_audit_executable": stand_in(
            tmp_path / "node4/dltune", 'echo "dltune: internal error: boom" >&2; exit 2')},
        "node5": {"dltune_audit_executable": stand_in(tmp_path / "node5/dltune", "exec sleep 30"),
                  "dltune_audit_timeout": "3"},
    }  # fmt: skip


def test_audit_reports_a_node_without_dltune_with_the_role_that_installs_it_and_fails_it(
    tmp_path: Path,
) -> None:
    done = run_play("dltune.cluster.audit", tmp_path, nodes_with_and_without_dltune(tmp_path))
    assert done.returncode == 2, done.stdout[-4000:] + done.stderr[-2000:]
    report = tmp_path / "report"
    problems = {
        node: json.loads((report / f"{node}.audit.json").read_text()).get("problem")
        for node in ("node1", "node2", "node3", "node4", "node5")
    }
    assert problems["node1"] is None
    assert problems["node2"] == NOT_ON_PATH.format(play="audit")
    assert problems["node3"] == NOT_THERE.format(path=tmp_path / "node3/opt/dltune", play="audit")
    assert problems["node4"] == "crashed: exit 2 dltune: internal error: boom"
    assert problems["node5"] == (
        "hung: no answer within 3 s (dltune_audit_timeout): the node took the connection, then stalled"
    )
    # The merge ran and kept every node: the one with dltune with its results, the others as problems.
    merged = {n["host"]: n for n in json.loads((report / "cluster.json").read_text())["nodes"]}
    assert merged["node1"]["results"] and merged["node1"]["problem"] is None
    assert {node: merged[node]["problem"] for node in ("node2", "node3", "node4", "node5")} == {
        node: problems[node] for node in ("node2", "node3", "node4", "node5")
    }
    assert (report / "report.html").is_file()
    # Each node without dltune fails with its report line; the others and the merge do not.
    hosts = ("localhost", "node1", "node2", "node3", "node4", "node5")
    assert recap(done) == {host: (0, int(host in ("node2", "node3"))) for host in hosts}
    assert f'fatal: [node2]: FAILED! => {{"changed": false, "msg": "{problems["node2"]}"}}' in done.stdout
    assert_rows_are_rows(done, sorted(report.glob("node*.audit.json")))


def test_the_summary_reads_as_rows_under_this_repositorys_yaml_result_format(tmp_path: Path) -> None:
    done = run_play("dltune.cluster.audit", tmp_path, nodes_with_and_without_dltune(tmp_path),
                    config=REPO_ROOT / "ansible.cfg")  # fmt: skip
    assert done.returncode == 2, done.stdout[-4000:] + done.stderr[-2000:]
    assert "msg: |-" in summary_block(done.stdout)  # one literal block, as the table was drawn
    assert_rows_are_rows(done, sorted((tmp_path / "report").glob("node*.audit.json")))


def test_bench_on_a_fleet_where_no_node_has_dltune_still_merges_and_fails_the_node(tmp_path: Path) -> None:
    """Every node of the play fails: a failure inside that play would end the run before the merge.
    A link left at the node's file name (bench files stay between runs) is replaced, never followed."""
    report = tmp_path / "report"
    report.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("another user's file")
    (report / "node2.bench.json").symlink_to(victim)
    done = run_play("dltune.cluster.bench", tmp_path, {"node2": {}})
    assert done.returncode == 2, done.stdout[-4000:] + done.stderr[-2000:]
    problem = NOT_ON_PATH.format(play="bench")
    assert victim.read_text() == "another user's file"
    assert not (report / "node2.bench.json").is_symlink()
    assert json.loads((report / "node2.bench.json").read_text()) == {"problem": problem}
    merged = json.loads((report / "cluster.json").read_text())["nodes"]
    assert [(n["host"], n["problem"]) for n in merged] == [("node2", problem)]
    assert recap(done) == {"localhost": (0, 0), "node2": (0, 1)}
    assert f'"msg": "{problem}"' in done.stdout
    assert_rows_are_rows(done, [report / "node2.bench.json"])
