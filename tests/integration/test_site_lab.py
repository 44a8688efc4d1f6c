"""The collection as an admin installs it (`make collection`, `ansible-galaxy collection install`), then
`ansible-playbook dltune.cluster.site -i inventory` from it on the lab nodes (real systemd containers),
twice, then `dltune audit` on each node as an ordinary user; the later tests run the checkout's
playbooks (the same collection, through collections/). Needs `make lab`; CI sets DLTUNE_LAB_REQUIRED=1
so that a missing lab fails instead of skipping."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from dltune.fleet.slurm_health import parse_node
from tests.conftest import REPO_ROOT, SMALLEST_BENCH_SIZES
from tests.integration.test_prometheus_live import alerts_and_panels, assert_fires_for_only, needed
from tests.integration.test_readme_commands import admin_env

pytestmark = [pytest.mark.lab, pytest.mark.release]  # its admin runs the Install block
NODES = ("dltune-lab-node1", "dltune-lab-node2", "dltune-lab-node3")
CONTROLLER = "dltune-lab-slurmctl"


def lab_is_up() -> bool:
    if not shutil.which("docker"):
        return False
    out = subprocess.run(
        ["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True, check=False
    ).stdout.split()
    return all(n in out for n in (*NODES, CONTROLLER))


@pytest.fixture(scope="module")
def lab() -> None:
    if not lab_is_up():
        if os.environ.get("DLTUNE_LAB_REQUIRED") == "1":
            pytest.fail("the lab is not up (make lab)")
        pytest.skip("the lab is not up (make lab)")


def lab_inventory(tmp_path: Path, extra_hosts: dict[str, dict[str, Any] | None]) -> Path:
    """inventory/lab.yml with more lab container hosts (or host vars on existing ones)."""
    inventory = yaml.safe_load((REPO_ROOT / "inventory/lab.yml").read_text())
    inventory["all"]["children"]["gpu_nodes"]["children"]["lab_containers"]["hosts"].update(extra_hosts)
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def docker_exec(node: str, *argv: str) -> str:
    done = subprocess.run(["docker", "exec", node, *argv], capture_output=True, text=True, check=False)
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


def ansible_playbook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ansible-playbook", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=900
    )


def audit_as_nobody(node: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`dltune audit --format json` on a lab node as an ordinary user."""
    return subprocess.run(
        [
            "docker",
            "exec",
            node,
            "runuser",
            "-u",
            "nobody",
            "--",
            "dltune",
            "audit",
            *args,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def installed_collection(admin_home: Path) -> dict[str, str]:
    """The environment of an admin's controller, made by the README's Install section run verbatim
    (tests/integration/conftest.admin_home, the README's tests' own): `make release`, dltune.cluster
    and its two dependency collections installed offline into ~/.ansible/collections, the
    controller's dltune in ~/dltune-venv, the example ansible.cfg in ~/dltune-site (the cwd). No
    checkout's ansible.cfg, roles path or collections/ link, no DLTUNE_WHEELHOUSE. The lab inventory
    brings its connection settings (docker)."""
    return admin_env(admin_home) | {"ADMIN_SITE": str(admin_home / "dltune-site")}


def admin_playbook(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook as the admin runs it: from ~/dltune-site, the installed collection's names."""
    return subprocess.run(
        ["ansible-playbook", *args], cwd=env["ADMIN_SITE"], env=env, capture_output=True, text=True,
        check=False, timeout=900,
    )  # fmt: skip


@pytest.mark.converge
def test_site_converges_idempotently_and_nodes_audit_clean(
    lab: None, installed_collection: dict[str, str]
) -> None:
    """Run from the installed collection (`dltune.cluster.site`), its role `dltune` installing dltune
    from the wheels the collection carries."""
    site = ["dltune.cluster.site", "-i", str(REPO_ROOT / "inventory")]
    env = installed_collection
    first = admin_playbook(env, *site)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    # Each node's wheelhouse is the one inside the installed collection, byte for byte.
    collection = Path(env["HOME"]) / ".ansible/collections/ansible_collections/dltune/cluster"
    carried = collection / "build/wheelhouse.tar"
    shipped = hashlib.sha256(carried.read_bytes()).hexdigest()
    for node in NODES:
        assert docker_exec(node, "sha256sum", "/opt/dltune/wheelhouse.tar").split()[0] == shipped, node
    second = admin_playbook(env, *site)
    assert second.returncode == 0, second.stdout[-4000:]
    for node in (*NODES, CONTROLLER):
        assert re.search(rf"^{node}\s*:.*changed=0", second.stdout, re.M), second.stdout[-2000:]

    for node in NODES:
        done = audit_as_nobody(node)
        assert done.returncode in (0, 1), done.stderr
        results = {r["id"]: r for r in json.loads(done.stdout)["results"]}
        tmp = results["storage.tmp_tmpfs"]
        # The lab nodes' /tmp holds only hideable entries, so the tmpfs is mounted live.
        assert tmp["status"] == "pass", tmp
        assert tmp["evidence"]["judged_against"].startswith("manifest")
        # GPU-node stand-ins: the real pynvml path against the lab's fake NVML, labelled as such.
        gpus = results["gpu.present"]
        assert results["driver.loaded"]["status"] == "pass"
        assert gpus["status"] == "pass" and gpus["metrics"]["gpus"] == 4
        assert all("fake NVML" in model for model in gpus["evidence"]["models"])
        # The node's blank loop disk: formatted, in fstab by UUID, mounted at /data with noatime.
        noatime = [r for r in json.loads(done.stdout)["results"] if r["id"] == "storage.data_noatime"]
        assert [(r["subject"], r["status"]) for r in noatime] == [("/data", "pass")], noatime
        fstab = [r for r in json.loads(done.stdout)["results"] if r["id"] == "storage.data_fstab"]
        assert fstab and all(r["status"] == "pass" for r in fstab), fstab
        options = docker_exec(node, "findmnt", "-n", "-o", "OPTIONS", "/data")
        assert "noatime" in options.split(","), options
        assert re.search(r"^UUID=\S+\s+/data\s", docker_exec(node, "cat", "/etc/fstab"), re.M)
        # Slurm nodes of the lab's cluster: slurm_tmpdir's hooks are in slurm.conf and in place; a
        # job's $SLURM_TMPDIR is judged inside a job (next test), never passed outside one.
        assert results["staging.slurm_hooks"]["status"] == "pass", results["staging.slurm_hooks"]
        outside = results["staging.slurm_tmpdir"]
        assert outside["status"] == "skip" and "not inside a Slurm job" in outside["summary"], outside


def test_the_admins_path_benches_and_reports_every_node_with_the_roles_pytorch(
    lab: None, installed_collection: dict[str, str], tmp_path: Path
) -> None:
    """The mission end to end as an admin walks it, from the installed release: each node's dltune
    (role dltune, dltune_bench_python naming the site's PyTorch environment, as inventory/lab.yml
    does) runs `dltune.cluster.bench` and `dltune.cluster.audit`, and the one report holds every
    node's audit and a bench that ran (no node skipped for want of PyTorch). Lab nodes have fake NVML
    GPUs that torch cannot use: the bench measures the CPU (--device cpu), short sections (2 cores).
    With dltune_bench_multinode, the bench playbook then runs `dltune bench --multi-node` as one srun
    step over every node: torchrun on each node joins one gloo group across the three (real PyTorch,
    the site's), and the report shows the results in the first node's row only, naming every node,
    and in the HTML; CPU processes stand in for GPUs, so the scaling figure says it is not a GPU one."""
    env, report_dir = installed_collection, tmp_path / "report"
    report = ["-e", f"dltune_report_dir={report_dir}",
              "-e", f"dltune_report_executable={env['HOME']}/dltune-venv/bin/dltune"]  # fmt: skip
    # What is proved is the path (each node's bench ran with the role's PyTorch and reached the report).
    quick = ["--quick", "--device", "cpu", "--no-dataloader-sweep", "--no-determinism", "--no-data-parallel",
             *SMALLEST_BENCH_SIZES]  # fmt: skip
    inventory = ["-i", str(REPO_ROOT / "inventory")]
    bench_vars = {"dltune_bench_args": quick, "dltune_bench_multinode": True,
                  "dltune_bench_multinode_args": ["--device", "cpu"]}  # fmt: skip
    bench = admin_playbook(env, "dltune.cluster.bench", *inventory, *report, "-e", json.dumps(bench_vars))
    assert bench.returncode == 0, bench.stdout[-4000:] + bench.stderr[-2000:]
    assert "no PyTorch beside dltune on this node" not in bench.stdout, bench.stdout[-4000:]
    audit = admin_playbook(env, "dltune.cluster.audit", *inventory, *report)
    assert audit.returncode == 0, audit.stdout[-4000:] + audit.stderr[-2000:]
    merged = {n["host"]: n for n in json.loads((report_dir / "cluster.json").read_text())["nodes"]}
    assert sorted(merged) == sorted(NODES)
    for node in NODES:
        assert (report_dir / f"{node}.bench.json").is_file(), node
        results = merged[node]["results"]
        trained = [r for r in results if r["id"] == "bench.train_synthetic"]
        assert trained and all(r["status"] in ("pass", "warn") for r in trained), (node, trained)
        assert not [r for r in results if r["id"] == "bench.run" and r["status"] == "skip"], node
        assert any(r["id"] == "storage.tmp_tmpfs" for r in results), node  # the audit beside it
    # The multi-node step: in the first node's row (the first by name), over every node.
    first, *others = sorted(NODES)
    assert (report_dir / f"{first}.multinode.bench.json").is_file()
    multinode = [r for r in merged[first]["results"] if r["id"] == "bench.multinode_allreduce"]
    assert len(multinode) == 1 and multinode[0]["status"] == "pass", multinode
    allreduce = multinode[0]
    assert sorted(allreduce["evidence"]["hosts"]) == sorted(NODES), allreduce["evidence"]
    assert allreduce["evidence"]["world_size"] == 3, allreduce["evidence"]
    assert f"on 3 nodes ({', '.join(sorted(NODES))})" in allreduce["summary"], allreduce["summary"]
    assert allreduce["metrics"]["algbw_gb_s"] > 0
    scaling = [r for r in merged[first]["results"] if r["id"] == "bench.multinode_scaling"]
    assert len(scaling) == 1 and scaling[0]["metrics"]["efficiency"] > 0, scaling
    assert "not a GPU figure" in scaling[0]["summary"], scaling
    for node in others:
        assert not any(r["id"].startswith("bench.multinode") for r in merged[node]["results"]), node
    assert "bench.multinode_allreduce" in (report_dir / "report.html").read_text()
    # On the node, the installed dltune imports the site's torch (not one of its own).
    torch_file = docker_exec(NODES[0], "env", "TMPDIR=/var/tmp", "/opt/dltune/venv/bin/python", "-c",
                             "import torch; print(torch.__file__)")  # fmt: skip
    assert not torch_file.startswith("/opt/dltune/"), torch_file


@pytest.mark.slow  # make test-slow: docs/development.md says why
def test_check_diff_of_the_site_on_a_fresh_node_reads_in_a_few_hundred_lines(
    lab: None, installed_collection: dict[str, str], tmp_path: Path
) -> None:
    """The README's preview (`ANSIBLE_DISPLAY_OK_HOSTS=false ansible-playbook dltune.cluster.site
    --check --diff`, the example ansible.cfg) on a node nothing has touched yet (a lab node and Slurm
    controller of its own, started here): at most 300 lines, each file the site reads shown with its
    diff once (fstab's /tmp line, dl_env's files, slurm.conf), dltune's own records and programs named
    without their text, and nothing changed on the node."""
    fresh, controller = "dltune-lab-fresh", "dltune-lab-fresh-ctl"
    env = {**os.environ, "DLTUNE_LAB_NODES": fresh, "DLTUNE_LAB_CONTROLLER": controller,
           "DLTUNE_LAB_DATA_DISKS": "0"}  # fmt: skip
    subprocess.run(["bash", str(REPO_ROOT / "tests/lab/nodes.sh")], env=env, check=True, capture_output=True)
    try:
        node_vars = yaml.safe_load((REPO_ROOT / "inventory/lab.yml").read_text())["all"]["children"]
        lab_vars = dict(node_vars["gpu_nodes"]["children"]["lab_containers"]["vars"])
        lab_vars.pop("data_disks_devices")
        inventory = tmp_path / "fresh.yml"
        inventory.write_text(yaml.safe_dump({"all": {"children": {
            "gpu_nodes": {"hosts": {fresh: None}, "vars": lab_vars},
            "slurm": {"hosts": {fresh: None}, "vars": {"slurm_tmpdir_min_free_gb": 1}},
            "nvidia_driver_excluded": {"hosts": {fresh: None}},
        }}}))  # fmt: skip
        preview = subprocess.run(
            ["ansible-playbook", "dltune.cluster.site", "-i", str(inventory), "--check", "--diff"],
            cwd=installed_collection["ADMIN_SITE"],
            env={**installed_collection, "ANSIBLE_DISPLAY_OK_HOSTS": "false"},
            capture_output=True, text=True, check=False, timeout=900,
        )  # fmt: skip
        assert preview.returncode == 0, preview.stdout[-4000:]
        lines = preview.stdout.splitlines()
        assert len(lines) <= 300, f"{len(lines)} lines:\n{preview.stdout}"
        shown = preview.stdout
        assert re.search(r"^\+tmpfs /tmp tmpfs noatime,\S*size=10%\S* 0 0$", shown, re.M), shown
        assert re.search(r"^\+CUBLAS_WORKSPACE_CONFIG=", shown, re.M), shown
        assert re.search(r"^\+Prolog=/etc/slurm/dltune/prolog$", shown, re.M), shown
        assert shown.count("slurm_tmpdir_hook") == 0 and shown.count('"schema_version"') == 0
        # --check changed nothing on the node.
        for path in ("/opt/dltune", "/etc/dltune/expected.d", "/etc/slurm/dltune"):
            assert subprocess.run(["docker", "exec", fresh, "test", "-e", path], check=False).returncode == 1
    finally:
        subprocess.run(["docker", "rm", "-f", fresh, controller], check=False, capture_output=True)


def test_the_slurm_controller_runs_apart_and_shares_the_nodes_slurm_conf(lab: None) -> None:
    """The lab's slurmctld runs in a container of its own, as on a cluster, and site.yml (slurm_tmpdir
    runs on the whole group slurm) left its slurm.conf the same as every node's: Slurm warns and
    misbehaves when they differ, and the controller is where the Prolog/Epilog settings take effect."""
    assert docker_exec(CONTROLLER, "systemctl", "is-active", "slurmctld").strip() == "active"
    config = docker_exec(NODES[1], "scontrol", "show", "config")
    assert re.search(rf"^SlurmctldHost\[0\]\s*=\s*{CONTROLLER}\b", config, re.M), config[:1500]
    for node in NODES:
        running = subprocess.run(
            ["docker", "exec", node, "systemctl", "is-active", "slurmctld"], capture_output=True, text=True
        )
        assert running.stdout.strip() != "active", node
    controller_conf = docker_exec(CONTROLLER, "cat", "/etc/slurm/slurm.conf")
    assert "Prolog=" in controller_conf and "Epilog=" in controller_conf, controller_conf
    for node in NODES:
        assert docker_exec(node, "cat", "/etc/slurm/slurm.conf") == controller_conf, node


def test_a_job_over_every_lab_node_gets_a_private_node_local_tmpdir(lab: None) -> None:
    """A 3-node job as an ordinary user on the lab's Slurm after site.yml: each task sees a
    $SLURM_TMPDIR on its own node, owned by the user, mode 0700, with the node-wide cuBLAS setting,
    and the audit run inside the job passes it; the Epilog removes each node's directory after the job."""
    audit = (
        "/usr/local/bin/dltune audit --only staging --format json | /usr/bin/python3 -c "
        '\'import json, sys; print(*[r["status"] for r in json.load(sys.stdin)["results"]'
        ' if r["id"] == "staging.slurm_tmpdir"])\''
    )
    script = (
        'echo "$(hostname) $SLURM_TMPDIR $(stat -c %U:%a "$SLURM_TMPDIR") $CUBLAS_WORKSPACE_CONFIG'
        f' $({audit})"'
    )
    srun = ["srun", "--export=NONE", f"--nodes={len(NODES)}", "--ntasks-per-node=1", "/bin/sh", "-c", script]
    job = subprocess.run(
        ["docker", "exec", NODES[0], "runuser", "-u", "alice", "--", *srun],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert job.returncode == 0, job.stderr
    rows = sorted(line.split() for line in job.stdout.splitlines())
    assert [row[0] for row in rows] == list(NODES), job.stdout
    for host, tmpdir, owner_mode, cublas, audited in rows:
        assert re.fullmatch(r"/localscratch/alice\.\d+", tmpdir), tmpdir
        assert owner_mode == "alice:700" and cublas == ":4096:8", (host, owner_mode, cublas)
        assert audited == "pass", f"{host}: staging.slurm_tmpdir inside the job: {audited}"
    for host, tmpdir, *_ in rows:
        for _ in range(60):
            if subprocess.run(["docker", "exec", host, "test", "-e", tmpdir], check=False).returncode:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"{host}: {tmpdir} is still there 30 s after the job")


# Run by alice in her job on each node: links to root's files at the top of $SLURM_TMPDIR and at the
# bottom of a 5,000-level tree (the old recursive Epilog died of it and Slurm drained the node).
DEEP_TREE_WITH_LINKS = """
import os
targets = ["/etc/dltune-lab/victim-file", "/root/victim-dir", "/", "/etc"]
fd = os.open(os.environ["SLURM_TMPDIR"], os.O_RDONLY | os.O_DIRECTORY)
for number, target in enumerate(targets):
    os.symlink(target, "link%d" % number, dir_fd=fd)
for _ in range(5000):
    os.mkdir("d", dir_fd=fd)
    child = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    os.close(fd)
    fd = child
for number, target in enumerate(targets):
    os.symlink(target, "link%d" % number, dir_fd=fd)
print(os.uname().nodename, "built", os.environ["SLURM_TMPDIR"])
"""
VICTIMS = "/etc/dltune-lab/victim-file /root/victim-dir /root/victim-dir/file"


def victims_state(node: str) -> str:
    return docker_exec(node, "sh", "-c", f"stat -c '%n %a %U %s' {VICTIMS} && sha256sum {VICTIMS.split()[0]}")


def test_a_job_leaving_a_5000_level_tree_and_planted_links_keeps_every_node_in_service(lab: None) -> None:
    """Alice's batch job leaves, on each node, a 5,000-level tree and links to root's files and
    directories in $SLURM_TMPDIR. The Epilog removes it all without following a link (the targets
    keep their content, mode and owner), exits 0, and so every node stays in service: a failing
    Epilog would drain the node, which any job user could otherwise do on purpose."""
    for node in NODES:
        docker_exec(
            node, "sh", "-c",
            "mkdir -p /root/victim-dir /etc/dltune-lab && echo keep > /root/victim-dir/file && "
            "echo precious > /etc/dltune-lab/victim-file && chmod 0600 /etc/dltune-lab/victim-file",
        )  # fmt: skip
    before = {node: victims_state(node) for node in NODES}
    done, output = sbatch_as_alice(f"srun --ntasks-per-node=1 python3 -c '{DEEP_TREE_WITH_LINKS}'")
    try:
        assert done.returncode == 0, (done.stderr, output[-3000:])
        built = dict(line.split(" built ") for line in output.splitlines() if " built " in line)
        assert sorted(built) == list(NODES), output[-3000:]
        for node in NODES:
            state, reason = slurm_node(node)
            assert "DRAIN" not in state and "Epilog" not in reason, (node, state, reason)
            left = docker_exec(node, "ls", "-A", "/localscratch").split()
            job = built[node].rsplit(".", 1)[1]
            assert f"alice.{job}" not in left and f".dltune-trash.{job}" not in left, (node, left)
            assert victims_state(node) == before[node], node
    finally:
        for node in NODES:  # a drained node would fail every later lab test: give it back
            if "Epilog" in slurm_node(node)[1]:
                docker_exec(node, "scontrol", "update", f"nodename={node}", "state=resume")
            docker_exec(node, "rm", "-rf", "/root/victim-dir", "/etc/dltune-lab/victim-file")


def srun_as_alice(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "exec", NODES[0], "runuser", "-u", "alice", "--", "srun", "--chdir=/tmp", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def gpu_processes_result(output: str) -> dict[str, Any]:
    return next(r for r in json.loads(output)["results"] if r["id"] == "gpu.processes")


def test_gpu_processes_with_no_job_on_the_node_are_left_behind_and_a_jobs_own_are_not(lab: None) -> None:
    """Compute processes on GPU 1 of node2 (its fake NVML lists two: no GPU exists here). The real
    Slurm runs no job on node2, so the audit fails them as left behind; inside a job on node2 the same
    processes are the job's own and pass."""
    scenario = "/etc/dltune-lab/nvml-scenario.conf"
    node = NODES[1]
    audit = ["dltune", "audit", "--only", "gpu", "--format", "json"]
    docker_exec(node, "cp", scenario, f"{scenario}.healthy")
    try:
        docker_exec(node, "sh", "-c", f"echo gpu1.processes=2 >> {scenario}")
        idle = subprocess.run(
            ["docker", "exec", node, "runuser", "-u", "nobody", "--", *audit],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        left = gpu_processes_result(idle.stdout)
        assert idle.returncode == 1 and left["status"] == "fail" and left["critical"], left
        assert "GPU 1: pid 4000, 4001" in left["summary"] and left["evidence"]["slurm_jobs"] == [], left
        job = srun_as_alice(f"--nodelist={node}", *audit, timeout=120)
        own = gpu_processes_result(job.stdout)
        assert own["status"] == "pass" and own["evidence"]["slurm_jobs"], (own, job.stderr[-2000:])
    finally:
        docker_exec(node, "mv", f"{scenario}.healthy", scenario)


def find_slow_over_the_lab() -> dict[str, dict[str, Any]]:
    """`dltune bench --multi-node --find-slow` as one srun task per lab node: each node's result."""
    bench = ["dltune", "bench", "--multi-node", "--find-slow", "--device", "cpu",
             "--format", "json"]  # fmt: skip
    job = srun_as_alice("--nodes=3", "--ntasks-per-node=1", *bench, timeout=900)
    assert job.returncode in (0, 1), job.stderr[-3000:]
    report = json.loads(job.stdout)  # one document: only the first node prints
    return {r["subject"]: r for r in report["results"] if r["id"] == "bench.slow_node"}


def docker_inspect_quota(node: str) -> str:
    done = subprocess.run(["docker", "inspect", "-f", "{{.HostConfig.CpuQuota}}", node], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.mark.slow  # make test-slow: docs/development.md says why
def test_find_slow_names_the_node_whose_cpus_were_cut_and_none_before(lab: None) -> None:
    """Real gloo all-reduces between the lab's nodes (CPU processes stand in for GPUs): with no node
    slowed, no node is named; with node3's container cut to a fifth of a CPU (`docker update --cpus`,
    a real cgroup quota), node3 and only node3 is named, with its figures and its retest."""
    assert all(docker_inspect_quota(node) in ("0", "-1") for node in NODES), "a lab node has a CPU quota left"
    clean = find_slow_over_the_lab()
    assert sorted(clean) == sorted(NODES)
    assert {node: r["status"] for node, r in clean.items()} == dict.fromkeys(NODES, "pass"), clean
    slow = NODES[2]
    # A CFS quota of 20 ms per 100 ms, lifted again with -1 (`--cpus 0` would leave the limit in place).
    subprocess.run(["docker", "update", "--cpu-period", "100000", "--cpu-quota", "20000", slow], check=True,
                   capture_output=True)  # fmt: skip
    try:
        throttled = find_slow_over_the_lab()
    finally:
        subprocess.run(["docker", "update", "--cpu-quota", "-1", slow], check=True, capture_output=True)
    assert docker_inspect_quota(slow) == "-1"
    statuses = {node: r["status"] for node, r in throttled.items()}
    assert statuses == {NODES[0]: "pass", NODES[1]: "pass", slow: "warn"}, throttled
    named = throttled[slow]
    assert f"{slow} holds the job back" in named["summary"] and named["evidence"]["retest"]["busbw_gb_s"]
    assert named["metrics"]["share_of_median"] < 0.8
    assert len(named["evidence"]["rounds"]) == 2  # 3 nodes: each meets the other two


def check_on(node: str, report_dir: Path) -> dict[str, dict[str, Any]]:
    """`dltune check --device cpu --format json` on a lab node as root (who may write on /data), the
    envelope kept in ``report_dir`` for `dltune report`; its results by (id, subject)."""
    done = subprocess.run(["docker", "exec", node, "dltune", "check", "--device", "cpu", "--format", "json"],
                          capture_output=True, text=True, check=False, timeout=900)  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-3000:]
    (report_dir / f"{node}.json").write_text(done.stdout)
    return {(r["id"], r["subject"]): r for r in json.loads(done.stdout)["results"]}


@pytest.mark.slow  # make test-slow: docs/development.md says why
def test_a_throttled_node_and_a_strictatime_data_disk_are_priced_measured_and_ranked_first(
    lab: None, tmp_path: Path
) -> None:
    """`dltune check` on every lab node (CPU processes stand in for the GPUs, as for --find-slow):
    node2's CPUs cut to a fifth of a CPU (a real cgroup quota) with a power brake seen on its fake GPU 1
    (gpu.clocks warns, the clock class: NVML's clock-event counters cannot be made to move here);
    node3's /data (role data_disks applied noatime) remounted strictatime. node3's
    storage.data_noatime is priced `measured` by dltune check's O_NOATIME reads, and
    benchmarks/noatime.py --method-check, remounting the same disk noatime, agrees with it. node2's
    gpu.clocks cannot be priced on the node (no matmul of that GPU) and `dltune report` prices it
    `measured` against the fleet's median matmul of the same CPU. The report opens with what to fix
    first, both findings in it."""
    slow, strict = NODES[1], NODES[2]
    report_dir = tmp_path / "nodes"
    report_dir.mkdir()
    clean = check_on(NODES[0], report_dir)
    assert clean[("storage.data_noatime", "/data")]["impact"] is None, clean[
        ("storage.data_noatime", "/data")
    ]
    # A brake seen for a fifth of the window: gpu.clocks warns (a critical fail would keep the bench,
    # and the measurements, from running).
    brake = "; ".join(
        f"echo {line} >> {SCENARIO}" for line in ("gpu1.throttle=0x80", "gpu1.share_hw_brake=0.2")
    )
    docker_exec(slow, "sh", "-c", brake)
    subprocess.run(["docker", "update", "--cpu-period", "100000", "--cpu-quota", "20000", slow], check=True,
                   capture_output=True)  # fmt: skip
    try:
        throttled = check_on(slow, report_dir)
    finally:
        subprocess.run(["docker", "update", "--cpu-quota", "-1", slow], check=True, capture_output=True)
        docker_exec(slow, "sed", "-i", "/gpu1.throttle=0x80/d;/share_hw_brake/d", SCENARIO)
    docker_exec(strict, "mount", "-o", "remount,strictatime", "/data")
    try:
        strictatime = check_on(strict, report_dir)
        script = "/var/tmp/noatime.py"
        subprocess.run(
            ["docker", "cp", str(REPO_ROOT / "benchmarks/noatime.py"), f"{strict}:{script}"], check=True
        )
        benchmark = json.loads(docker_exec(strict, "/opt/dltune/venv/bin/python", script, "--method-check",
                                           "--mount", "/data", "--files", "2000", "--epochs", "4",
                                           "--rounds", "7", "--json"))  # fmt: skip
    finally:
        docker_exec(strict, "mount", "-o", "remount,noatime", "/data")
    assert "noatime" in docker_exec(strict, "findmnt", "-n", "-o", "OPTIONS", "/data").split(",")
    atime = strictatime[("storage.data_noatime", "/data")]
    assert atime["summary"] == "/data is mounted strictatime, but role data_disks applied noatime", atime
    assert atime["impact"]["basis"] == "measured" and atime["impact"]["of"] == "small-file reads", atime
    assert "(strictatime)" in atime["impact"]["method"], atime
    priced, remounted = atime["impact"]["fraction"], benchmark["remount_fraction"]
    # Both measure what the strictatime mount adds to the same reads (25% and 22-26% on a loop ext4 of
    # the CI machine's kind): agreeing means within 10 points, or half the remount's figure.
    assert remounted > 0.05 and abs(priced - remounted) <= max(0.10, remounted / 2), (atime, benchmark)
    clocks = next(r for (check, _), r in throttled.items() if check == "gpu.clocks" and r["status"] == "warn")
    assert clocks["impact"]["basis"] == "unpriced" and "fleet" in clocks["impact"]["why"], clocks
    merged_file = tmp_path / "cluster.json"
    report = subprocess.run(["dltune", "report", str(report_dir), "--json", str(merged_file)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert report.returncode in (0, 1), report.stderr
    nodes = {n["host"]: n for n in json.loads(merged_file.read_text())["nodes"]}
    fleet_clocks = next(
        r for r in nodes[slow]["results"] if r["id"] == "gpu.clocks" and r["status"] == "warn"
    )
    impact = fleet_clocks["impact"]
    assert impact["basis"] == "measured" and impact["of"] == "matmul" and "on 3 nodes" in impact["method"], (
        impact
    )
    assert impact["fraction"] > 0.3 and "the bench ran on the CPU" in impact["method"], impact
    first = report.stdout.splitlines()[:12]
    # The title and the "not healthy" line, then what to fix first, before any table.
    assert first[0].startswith("dltune report: "), report.stdout[:2000]
    opening = next(i for i, line in enumerate(first) if line.startswith("what to fix first:"))
    assert opening <= 2, report.stdout[:2000]
    ranked = [
        line.split(":")[0].strip()
        for line in first[opening + 1 :]
        if line.startswith("  ") and "GPU-hours" in line
    ]
    assert {"gpu.clocks", "storage.data_noatime"} <= set(ranked), first


def test_the_tuning_ledger_shows_what_data_disks_and_tmpfs_tmp_bought(lab: None, tmp_path: Path) -> None:
    """site.yml with dltune_ledger: true, on nodes whose tunings were undone: node2 and node3 with /data
    remounted strictatime and /tmp back on the node's own disk (the container's overlay), node1 left
    tuned. The roles tune them again; the ledger (dltune ledger before and after, real measurements)
    shows on node2 and node3 what data_disks and tmpfs_tmp bought, on node1 nothing beyond the noise;
    each node's audit reports it (system.tuning_ledger) and `dltune report` sums the fleet."""
    undone = NODES[1:]
    for node in undone:
        docker_exec(node, "mount", "-o", "remount,strictatime", "/data")
        docker_exec(node, "umount", "/tmp")
        assert docker_exec(node, "findmnt", "-n", "-o", "FSTYPE", "--target", "/tmp").strip() != "tmpfs"
    done = ansible_playbook("site.yml", "-i", "inventory", "-e", json.dumps({"dltune_ledger": True}))
    assert done.returncode == 0, done.stdout[-4000:]
    report_dir = tmp_path / "nodes"
    report_dir.mkdir()
    ledgers = {}
    for node in NODES:
        assert "noatime" in docker_exec(node, "findmnt", "-n", "-o", "OPTIONS", "/data").split(",")
        assert docker_exec(node, "findmnt", "-n", "-o", "FSTYPE", "/tmp").strip() == "tmpfs"
        audit = audit_as_nobody(node, "--only", "system,storage")
        assert audit.returncode in (0, 1), audit.stderr
        (report_dir / f"{node}.json").write_text(audit.stdout)
        ledgers[node] = {
            r["subject"]: r for r in json.loads(audit.stdout)["results"] if r["id"] == "system.tuning_ledger"
        }
    for node in undone:
        for role in ("data_disks", "tmpfs_tmp"):
            (change,) = ledgers[node][role]["evidence"]["changes"]
            assert change["verdict"] == "gain" and change["change"] > change["noise"], (node, role, change)
    for role in ("data_disks", "tmpfs_tmp"):
        (change,) = ledgers[NODES[0]][role]["evidence"]["changes"]
        assert change["verdict"] != "gain" or change["change"] < 0.25, (role, change)  # nothing was undone
    report = subprocess.run(
        ["dltune", "report", str(report_dir)], capture_output=True, text=True, check=False
    )
    lines = [line for line in report.stdout.splitlines() if line.startswith("tuning ledger: ")]
    assert len(lines) == 2, report.stdout[-3000:]
    assert any(line.startswith("tuning ledger: data_disks: small-file reads +") for line in lines), lines
    assert any(line.startswith("tuning ledger: tmpfs_tmp: scratch files in /tmp +") for line in lines), lines
    assert all("(median of 3 node(s), spread " in line for line in lines), lines


def test_a_multi_node_bench_with_two_tasks_on_one_node_is_refused(lab: None) -> None:
    """The misuse is named with the srun option that fixes it, before PyTorch starts."""
    job = srun_as_alice("--nodes=1", "--ntasks=2", "dltune", "bench", "--multi-node", timeout=120)
    assert job.returncode != 0
    assert "2 tasks on 1 node(s)" in job.stderr and "--ntasks-per-node=1" in job.stderr, job.stderr


def slurm_node(node: str) -> tuple[str, str]:
    """(State, Reason) of a node, as the controller has them."""
    shown = parse_node(docker_exec(NODES[0], "scontrol", "show", "node", "-o", node))
    return shown.state, shown.reason


def wait_for_slurm_node(node: str, drained: bool, timeout: float = 30) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while ("DRAIN" in slurm_node(node)[0]) != drained:
        if time.monotonic() > deadline:
            pytest.fail(f"{node} is not {'drained' if drained else 'in service'}: {slurm_node(node)}")
        time.sleep(0.5)
    return slurm_node(node)


def test_slurm_drain_takes_only_the_node_with_a_failing_gpu_out_of_service(lab: None) -> None:
    """`dltune audit --slurm-drain` on every node of the lab's Slurm, as root, as a health hook runs
    it: uncorrected ECC errors on one GPU of node3 (the fake NVML of that node: a GPU fault cannot be
    caused here) drain node3, and only node3, with the failing check as the reason; the other nodes
    stay in service. Once the GPU is healthy again, the next run resumes node3."""
    scenario = "/etc/dltune-lab/nvml-scenario.conf"
    audit = ["dltune", "audit", "--only", "gpu", "--slurm-drain", "--format", "json"]
    broken = NODES[2]
    docker_exec(broken, "cp", scenario, f"{scenario}.healthy")
    try:
        docker_exec(broken, "sh", "-c", f"echo gpu2.ecc_uncorrected=4 >> {scenario}")
        for node in NODES:
            done = subprocess.run(
                ["docker", "exec", node, *audit], capture_output=True, text=True, check=False
            )
            assert done.returncode == (1 if node == broken else 0), (node, done.stderr)
        state, reason = wait_for_slurm_node(broken, drained=True)
        assert reason == "dltune: gpu.ecc", (state, reason)
        for node in NODES[:2]:
            assert "DRAIN" not in slurm_node(node)[0], (node, slurm_node(node))
    finally:
        docker_exec(broken, "mv", f"{scenario}.healthy", scenario)
    healed = subprocess.run(["docker", "exec", broken, *audit], capture_output=True, text=True, check=False)
    assert healed.returncode == 0 and "resumed" in healed.stderr, healed.stderr
    wait_for_slurm_node(broken, drained=False)


def test_slurm_drain_never_overrides_an_admins_drain(lab: None) -> None:
    """An admin drains node3 for maintenance; a critical GPU fail on it then (fake NVML: uncorrected
    ECC) must not rewrite the admin's reason, and the next healthy run must not resume the node: only
    the admin puts it back."""
    scenario = "/etc/dltune-lab/nvml-scenario.conf"
    audit = ["dltune", "audit", "--only", "gpu", "--slurm-drain", "--format", "json"]
    node = NODES[2]
    admin_reason = "maintenance: PSU swap"
    docker_exec(NODES[0], "scontrol", "update", f"nodename={node}", "state=drain", f"reason={admin_reason}")
    docker_exec(node, "cp", scenario, f"{scenario}.healthy")
    try:
        wait_for_slurm_node(node, drained=True)
        docker_exec(node, "sh", "-c", f"echo gpu2.ecc_uncorrected=4 >> {scenario}")
        failing = subprocess.run(
            ["docker", "exec", node, *audit], capture_output=True, text=True, check=False
        )
        assert failing.returncode == 1, failing.stderr
        assert "left as it is" in failing.stderr, failing.stderr
        assert slurm_node(node)[1] == admin_reason, slurm_node(node)
        docker_exec(node, "cp", f"{scenario}.healthy", scenario)
        healthy = subprocess.run(
            ["docker", "exec", node, *audit], capture_output=True, text=True, check=False
        )
        assert healthy.returncode == 0, healthy.stderr
        time.sleep(1)
        state, reason = slurm_node(node)
        assert "DRAIN" in state and reason == admin_reason, (state, reason)
    finally:
        docker_exec(node, "mv", f"{scenario}.healthy", scenario)
        docker_exec(NODES[0], "scontrol", "update", f"nodename={node}", "state=resume")
    wait_for_slurm_node(node, drained=False)


SCENARIO = "/etc/dltune-lab/nvml-scenario.conf"
HEALTH_TEXTFILE = "/var/lib/prometheus/node-exporter/dltune.prom"
HEALTH_SERIES = "/var/lib/prometheus/node-exporter/dltune-health.prom"  # the health check's own
# Slurm's health check every 5 s (CYCLE: the three nodes spread over it); at most 2 nodes drained by
# dltune at once; a node dltune resumed twice within the hour and failing again is flapping.
HEALTHCHECK_VARS = {
    "slurm_healthcheck_interval": 5,
    "slurm_healthcheck_drain_limit": "2",
    "slurm_healthcheck_flap_count": 2,
    "slurm_healthcheck_flap_window_hours": 1,
    "slurm_healthcheck_textfile_dir": "/var/lib/prometheus/node-exporter",
}


def healthcheck_play(state: str) -> None:
    done = ansible_playbook(
        "playbooks/slurm_healthcheck.yml", "-i", "inventory",
        "-e", json.dumps({**HEALTHCHECK_VARS, "slurm_healthcheck_state": state}),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]


def gpu_fault(node: str, faulty: bool) -> None:
    """The fake NVML of ``node`` reports uncorrected ECC errors on GPU 2 (a GPU fault cannot be caused
    here), or is healthy again."""
    if faulty:
        docker_exec(
            node,
            "sh",
            "-c",
            f"grep -q ecc_uncorrected {SCENARIO} || echo gpu2.ecc_uncorrected=4 >> {SCENARIO}",
        )
    else:
        docker_exec(node, "sed", "-i", "/ecc_uncorrected/d", SCENARIO)


def health_runs(node: str) -> float:
    """When slurmd last ran the health check on ``node`` (the textfile's timestamp), 0 before the first."""
    done = subprocess.run(
        ["docker", "exec", node, "cat", HEALTH_TEXTFILE], capture_output=True, text=True, check=False
    )
    found = re.search(r"^dltune_audit_last_run_timestamp_seconds (\S+)$", done.stdout, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def after_runs(node: str, runs: int = 2, timeout: float = 90) -> str:
    """Wait until slurmd has run the health check ``runs`` more times on ``node``; its textfiles then
    (dltune.prom, and dltune-health.prom, which the run writes before it)."""
    deadline, seen, last = time.monotonic() + timeout, 0, health_runs(node)
    while seen < runs:
        assert time.monotonic() < deadline, f"slurmd ran no health check on {node} for {timeout} s"
        time.sleep(1)
        now = health_runs(node)
        seen, last = (seen + 1, now) if now != last else (seen, last)
    return docker_exec(node, "sh", "-c", f"cat {HEALTH_TEXTFILE}; cat {HEALTH_SERIES} 2>/dev/null || true")


def wait_for_reason(node: str, reason: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while slurm_node(node)[1] != reason or "DRAIN" not in slurm_node(node)[0]:
        assert time.monotonic() < deadline, f"{node} not drained with {reason!r}: {slurm_node(node)}"
        time.sleep(0.5)


def test_slurm_runs_dltune_as_its_health_check_within_the_drain_limit_and_flap_damping(lab: None) -> None:
    """playbooks/slurm_healthcheck.yml sets HealthCheckProgram on the controller and the three nodes;
    slurmd itself runs `dltune healthcheck` every 5 s (nothing here calls it). Faults come from each
    node's fake NVML (uncorrected ECC on a GPU). Proven through Slurm's node states: a critical fail
    drains the node within an interval and healthy resumes it; a node resumed twice and failing again
    stays drained as flapping until the operator resumes it; an admin's drain is never touched; with
    all three failing at once and a limit of 2, the third stays in service and its textfile says why."""
    third, second = NODES[2], NODES[1]
    # Earlier tests' `dltune audit --slurm-drain` runs keep their resumes in the same history file:
    # this test counts flaps from its own start.
    for node in NODES:
        docker_exec(node, "rm", "-f", "/var/lib/dltune/slurm-health.json")
    healthcheck_play("present")
    try:
        confs = {
            docker_exec(n, "sha256sum", "/etc/slurm/slurm.conf").split()[0] for n in (*NODES, CONTROLLER)
        }
        assert len(confs) == 1, "slurm.conf differs between the controller and the nodes"
        config = docker_exec(CONTROLLER, "scontrol", "show", "config")
        assert re.search(r"HealthCheckProgram\s*=\s*/usr/local/sbin/dltune-healthcheck\n", config), config
        for node in NODES:
            after_runs(node, 1)
            assert "DRAIN" not in slurm_node(node)[0], slurm_node(node)

        # A critical fail drains within an interval; healthy resumes.
        gpu_fault(third, True)
        wait_for_reason(third, "dltune: gpu.ecc")
        gpu_fault(third, False)
        wait_for_slurm_node(third, drained=False, timeout=60)
        # The second cycle is still an ordinary drain; after its resume (two within the hour) the
        # next fail is flapping, and a healthy check no longer resumes it: the operator does.
        gpu_fault(third, True)
        wait_for_reason(third, "dltune: gpu.ecc")
        gpu_fault(third, False)
        wait_for_slurm_node(third, drained=False, timeout=60)
        gpu_fault(third, True)
        wait_for_reason(third, "dltune: flapping: gpu.ecc")
        gpu_fault(third, False)
        after_runs(third, 2)
        assert slurm_node(third)[1] == "dltune: flapping: gpu.ecc", slurm_node(third)
        docker_exec(CONTROLLER, "scontrol", "update", f"nodename={third}", "state=resume")
        after_runs(third, 2)
        assert "DRAIN" not in slurm_node(third)[0], slurm_node(third)

        # An admin's drain: a critical fail does not rewrite its reason, healthy does not resume it.
        admin = "maintenance: PSU swap"
        docker_exec(CONTROLLER, "scontrol", "update", f"nodename={second}", "state=drain", f"reason={admin}")
        gpu_fault(second, True)
        ecc_fail = r'dltune_check_status\{check="gpu.ecc",[^}]*status="fail"\} 1.0'
        failing = re.search(ecc_fail, after_runs(second, 2))
        assert failing and slurm_node(second)[1] == admin, slurm_node(second)
        gpu_fault(second, False)
        after_runs(second, 2)
        assert "DRAIN" in slurm_node(second)[0] and slurm_node(second)[1] == admin, slurm_node(second)
        docker_exec(CONTROLLER, "scontrol", "update", f"nodename={second}", "state=resume")

        # One fault on every node at once, limit 2: two drain, the third stays and says why.
        for node in NODES:
            gpu_fault(node, True)
        deadline = time.monotonic() + 60
        while sum("DRAIN" in slurm_node(n)[0] for n in NODES) < 2:
            assert time.monotonic() < deadline, [slurm_node(n) for n in NODES]
            time.sleep(0.5)
        for node in NODES:
            after_runs(node, 2)
        in_service = [n for n in NODES if "DRAIN" not in slurm_node(n)[0]]
        assert len(in_service) == 1, [slurm_node(n) for n in NODES]
        textfile = after_runs(in_service[0], 1)
        assert re.search(r'dltune_check_status\{check="system.drain_limit".*status="warn"\} 1.0', textfile), (
            textfile
        )
        assert re.search(r'dltune_system_drained_nodes\{check="system.drain_limit"\} 2.0', textfile), textfile
        for node in NODES:
            gpu_fault(node, False)
        for node in NODES:
            wait_for_slurm_node(node, drained=False, timeout=60)
    finally:
        for node in NODES:
            gpu_fault(node, False)
        healthcheck_play("absent")
        for node in NODES:
            docker_exec(node, "rm", "-f", "/var/lib/dltune/slurm-health.json")
            if "DRAIN" in slurm_node(node)[0]:
                docker_exec(CONTROLLER, "scontrol", "update", f"nodename={node}", "state=resume")
    assert "HealthCheckProgram" not in docker_exec(NODES[0], "cat", "/etc/slurm/slurm.conf")
    assert re.search(
        r"HealthCheckProgram\s*=\s*\(null\)", docker_exec(CONTROLLER, "scontrol", "show", "config")
    )


HEALTH_HISTORY, ACK_FILE = "/var/lib/dltune/slurm-health.json", "/etc/dltune/acks.json"
# Hardware power brake held for 90% of the probe's window on GPU 1: gpu.clocks fails, critical, in the
# transient class (a fake NVML's clock-event counters; heat or a brake cannot be caused here).
CLOCKS_BRAKE = ("gpu1.throttle=0x88", "gpu1.share_hw_brake=0.9")
# One node group per profile, as a site's inventory would hold them (a second inventory source).
PROFILE_GROUPS = f"""all:
  children:
    health_observe:
      hosts:
        {NODES[0]}:
      vars:
        slurm_healthcheck_profile: observe
    health_drain:
      hosts:
        {NODES[1]}:
        {NODES[2]}:
      vars:
        slurm_healthcheck_profile: drain
"""
# Transient checks drain at their 4th consecutive failing run; a transient drain is resumed after 3
# passing runs spanning 30 s (every 5 s a run: the window, not the runs, decides).
LOOP_VARS = {
    **HEALTHCHECK_VARS,
    "slurm_healthcheck_debounce": {"hard": 1, "transient": 4},
    "slurm_healthcheck_recovery_runs": 3,
    "slurm_healthcheck_recovery_minutes": 0.5,
}


def clocks_fault(node: str, faulty: bool) -> None:
    if faulty:
        appended = "; ".join(f"echo {line} >> {SCENARIO}" for line in CLOCKS_BRAKE)
        docker_exec(node, "sh", "-c", f"grep -q share_hw_brake {SCENARIO} || {{ {appended}; }}")
    else:
        docker_exec(node, "sed", "-i", "/gpu1.throttle=0x88/d;/share_hw_brake/d", SCENARIO)


def series(textfile: str, name: str, labels: str = "") -> float | None:
    """The value of one series of a textfile (``labels`` as written, e.g. 'check="gpu.clocks"')."""
    found = re.search(
        rf"^{name}{{{re.escape(labels)}}} (\S+)$" if labels else rf"^{name} (\S+)$", textfile, re.M
    )
    return float(found.group(1)) if found else None


def wait_for_series(node: str, name: str, labels: str, values: set[float], timeout: float = 90) -> str:
    """The node's textfile once the series has one of ``values`` (read after each run)."""
    deadline = time.monotonic() + timeout
    while True:
        textfile = after_runs(node, 1)
        if series(textfile, name, labels) in values:
            return textfile
        assert time.monotonic() < deadline, (
            f"{node}: {name}{{{labels}}} never in {values}: {textfile[-2000:]}"
        )


def loop_play(tmp_path: Path, state: str, *more: str) -> None:
    groups = tmp_path / "profiles.yml"
    groups.write_text(PROFILE_GROUPS)
    done = ansible_playbook(
        "playbooks/slurm_healthcheck.yml", "-i", "inventory", "-i", str(groups),
        "-e", json.dumps({**LOOP_VARS, "slurm_healthcheck_state": state}), *more,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]


def test_the_health_loop_debounces_recovers_acknowledges_and_keeps_each_groups_profile(
    lab: None, tmp_path: Path
) -> None:
    """Slurm's own health check (every 5 s) on the lab's real Slurm, the role's variables set per
    inventory group: node1 in the observe profile, node2 and node3 in drain. Faults come from each
    node's fake NVML. Proven through Slurm's node states and each node's textfile:
    - profiles: the same uncorrected ECC error drains node2 at once and leaves node1 in service, its
      textfile saying observe and the failure;
    - debounce: a transient fault (gpu.clocks, a power brake) on node3 drains nothing for 3 runs and
      drains at the 4th;
    - recovery: healthy again, node3 stays drained until it passed for 30 s (not at its first pass);
    - acknowledgement: `playbooks/ack.yml` acknowledges gpu.ecc on node3 until 60 s from now; the ECC
      error then drains nothing and reads acknowledged in the textfile, and drains once it ends."""
    observer, drainer, third = NODES
    for node in NODES:
        docker_exec(node, "rm", "-f", HEALTH_HISTORY, ACK_FILE)
    loop_play(tmp_path, "present")
    try:
        for node in NODES:
            after_runs(node, 1)
        # Profiles: one failure, two groups.
        gpu_fault(observer, True)
        gpu_fault(drainer, True)
        wait_for_reason(drainer, "dltune: gpu.ecc")
        textfile = after_runs(observer, 2)
        assert "DRAIN" not in slurm_node(observer)[0], slurm_node(observer)
        assert series(textfile, "dltune_health_profile", 'profile="observe"') == 1.0, textfile
        assert re.search(r'dltune_check_status\{check="gpu.ecc",[^}]*status="fail"\} 1.0', textfile)
        assert series(textfile, "dltune_health_drains_total") == 0.0
        gpu_fault(observer, False)
        gpu_fault(drainer, False)
        wait_for_slurm_node(drainer, drained=False, timeout=60)  # a hard check's drain: its first pass

        # Debounce: a transient fault has failed 2 runs, then 3: no drain; the 4th drains.
        clocks_fault(third, True)
        wait_for_series(third, "dltune_health_failing_runs", 'check="gpu.clocks"', {2.0, 3.0})
        assert "DRAIN" not in slurm_node(third)[0], slurm_node(third)  # at most 3 runs by now
        wait_for_reason(third, "dltune: gpu.clocks")
        after_runs(third, 1)  # the run that drained saves the history after its recheck
        saved = json.loads(docker_exec(third, "cat", HEALTH_HISTORY))
        assert saved["failing_runs"]["gpu.clocks"] >= 4 and saved["check_drains"] == {"gpu.clocks": 1}, saved

        # Recovery: healthy from now; still drained after 3 passing runs, resumed once 30 s passed.
        clocks_fault(third, False)
        healthy_from = time.monotonic()
        textfile = wait_for_series(third, "dltune_health_recovery_passing_runs", "", {3.0, 4.0})
        assert slurm_node(third) == ("IDLE+DRAIN", "dltune: gpu.clocks"), slurm_node(third)
        assert series(textfile, "dltune_health_recovery_window_seconds") == 30.0, textfile
        wait_for_slurm_node(third, drained=False, timeout=90)
        assert time.monotonic() - healthy_from >= 30.0
        textfile = after_runs(third, 1)
        assert series(textfile, "dltune_health_resumes_total") == 1.0, textfile
        assert (series(textfile, "dltune_health_drained_seconds_total") or 0.0) >= 30.0, textfile

        # Acknowledgement until 60 s from now (the node's clock): no drain while it lasts, then a drain.
        # Whole seconds: the playbook is given the time to the second, and the ack ends at that second.
        until = (datetime.now(timezone.utc) + timedelta(seconds=60)).replace(microsecond=0)
        acked = ansible_playbook(
            "playbooks/ack.yml", "-i", "inventory", "-l", third,
            "-e", json.dumps({"dltune_ack_check": "gpu.ecc", "dltune_ack_why": "RMA 4711 pending",
                              "dltune_ack_until": until.strftime("%Y-%m-%dT%H:%M:%S"),
                              "dltune_ack_by": "lab-operator"}),
        )  # fmt: skip
        assert acked.returncode == 0, acked.stdout[-3000:]
        gpu_fault(third, True)
        textfile = after_runs(third, 2)
        assert "DRAIN" not in slurm_node(third)[0], slurm_node(third)
        assert re.search(r'^dltune_check_acknowledged\{check="gpu.ecc",[^}]*\} 1.0$', textfile, re.M), (
            textfile
        )
        assert re.search(r'dltune_check_status\{check="gpu.ecc",[^}]*status="warn"\} 1.0', textfile)
        wait_for_reason(third, "dltune: gpu.ecc", timeout=90)
        assert datetime.now(timezone.utc) >= until
    finally:
        for node in NODES:
            gpu_fault(node, False)
            clocks_fault(node, False)
        loop_play(tmp_path, "absent")
        for node in NODES:
            docker_exec(node, "rm", "-f", HEALTH_HISTORY, ACK_FILE)
            if "DRAIN" in slurm_node(node)[0]:
                docker_exec(CONTROLLER, "scontrol", "update", f"nodename={node}", "state=resume")


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        (
            {"slurm_healthcheck_timeout": 90, "slurm_healthcheck_interval": 300},
            "slurm_healthcheck_timeout=90 needs Slurm >= 26.05",
        ),
        ({"slurm_healthcheck_node_state": "START_ONLY"}, "needs Slurm >= 25.11"),
    ],
)
def test_options_the_labs_slurm_lacks_are_refused_naming_the_variable_and_its_version(
    lab: None, variables: dict[str, object], named: str
) -> None:
    """The lab runs Slurm 21.08: HealthCheckTimeout (26.05; an older slurmctld stops on the unknown key)
    and START_ONLY (25.11; an older one reads it as ANY) are refused before anything changes, naming the
    variable and the version the role read from the hosts' own slurmd/slurmctld -V."""
    before = {host: docker_exec(host, "sha256sum", "/etc/slurm/slurm.conf") for host in (*NODES, CONTROLLER)}
    done = ansible_playbook(
        "playbooks/slurm_healthcheck.yml", "-i", "inventory",
        "-e", json.dumps({**HEALTHCHECK_VARS, **variables}),
    )  # fmt: skip
    assert done.returncode != 0, done.stdout[-2000:]
    assert named in done.stdout and "21.08" in done.stdout, done.stdout[-3000:]
    after = {host: docker_exec(host, "sha256sum", "/etc/slurm/slurm.conf") for host in (*NODES, CONTROLLER)}
    assert after == before
    for host in NODES:
        assert not docker_exec(host, "sh", "-c", "ls /usr/local/sbin/dltune-healthcheck 2>/dev/null || true")


# Stand-ins for what a container cannot have (a GPU driver): `dmesg` prints the real kernel log and
# then the lines in KMSG_EXTRA (the Xids a test plants); `nvidia-smi` records its arguments and, when
# RESET_CLEARS exists, logs what the driver prints after a successful reset (Xid 154 back to None).
KMSG_EXTRA, RESET_CLEARS, SMI_CALLS = (
    "/etc/dltune-lab/kmsg-extra",
    "/etc/dltune-lab/reset-clears",
    "/etc/dltune-lab/smi-calls",
)
DMESG_STANDIN = f'#!/bin/sh\n/usr/bin/dmesg "$@" 2>/dev/null\ncat {KMSG_EXTRA} 2>/dev/null\nexit 0\n'
SMI_STANDIN = (
    f'#!/bin/sh\necho "$@" >> {SMI_CALLS}\n'
    f"[ -e {RESET_CLEARS} ] && echo 'NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x1 "
    f"(GPU Reset Required) to 0x0 (None)' >> {KMSG_EXTRA}\nexit 0\n"
)
XID_RESET = (
    "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
)


SHARED_CONF = "/shared/slurm-etc/slurm.conf"


def share_slurm_conf(hosts: tuple[str, ...]) -> str:
    """Every host's /etc/slurm/slurm.conf becomes a link to one file on the shared filesystem (as a site
    keeps one slurm.conf on NFS); each host's own copy is kept aside. The shared file's text."""
    text = docker_exec(hosts[0], "cat", "/etc/slurm/slurm.conf")
    docker_exec(hosts[0], "mkdir", "-p", os.path.dirname(SHARED_CONF))
    docker_write(hosts[0], SHARED_CONF, text)
    for host in hosts:
        docker_exec(host, "mv", "/etc/slurm/slurm.conf", "/etc/slurm/slurm.conf.lab-own")
        docker_exec(host, "ln", "-s", SHARED_CONF, "/etc/slurm/slurm.conf")
    return text


def unshare_slurm_conf(hosts: tuple[str, ...]) -> None:
    for host in hosts:
        subprocess.run(["docker", "exec", host, "rm", "-f", "/etc/slurm/slurm.conf"], check=True)
        own = "/etc/slurm/slurm.conf.lab-own"
        subprocess.run(["docker", "exec", host, "mv", own, "/etc/slurm/slurm.conf"], check=False)
    subprocess.run(["docker", "exec", hosts[0], "rm", "-rf", os.path.dirname(SHARED_CONF)], check=True)
    docker_exec(CONTROLLER, "scontrol", "reconfigure")


def test_one_shared_slurm_conf_has_one_writer_and_every_host_keeps_its_link(lab: None) -> None:
    """A site's one slurm.conf for the whole cluster (every host's a link to a file on the shared
    filesystem; a configless site is the same to the roles: one file, the controller's). With
    slurm_healthcheck_conf_writer / slurm_tmpdir_conf_writer naming the controller, it alone edits the
    file: HealthCheckProgram is set once, every host's link stays a link, the other hosts install the
    wrapper and chain the site hooks the writer found, and one reconfigure carries it to every slurmd
    (scontrol show config on a node shows it). absent gives the shared file back byte for byte."""
    hosts = (CONTROLLER, *NODES)
    shared = share_slurm_conf(hosts)
    writer = {"slurm_healthcheck_conf_writer": CONTROLLER, "slurm_tmpdir_conf_writer": CONTROLLER}
    try:
        done = ansible_playbook("playbooks/slurm_healthcheck.yml", "-i", "inventory",
                                "-e", json.dumps({**HEALTHCHECK_VARS, **writer}))  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:]
        edited = docker_exec(NODES[0], "cat", SHARED_CONF)
        assert len(re.findall(r"^HealthCheckProgram=", edited, re.M)) == 1, edited
        for host in hosts:
            assert docker_exec(host, "readlink", "/etc/slurm/slurm.conf").strip() == SHARED_CONF, host
        for node in NODES:
            docker_exec(node, "test", "-x", "/usr/local/sbin/dltune-healthcheck")
        config = docker_exec(NODES[2], "scontrol", "show", "config")
        assert re.search(r"^HealthCheckProgram\s*=\s*/usr/local/sbin/dltune-healthcheck$", config, re.M)
        tmpdir = ansible_playbook("playbooks/slurm_tmpdir.yml", "-i", "inventory", "-e", json.dumps(writer))
        assert tmpdir.returncode == 0, tmpdir.stdout[-3000:]
        assert docker_exec(NODES[0], "cat", SHARED_CONF) == edited  # the hooks were in it already
        recorded = {h: json.loads(docker_exec(h, "cat", "/etc/slurm/dltune/hooks.json"))["site_hooks"]
                    for h in hosts}  # fmt: skip
        assert all(hooks == recorded[CONTROLLER] for hooks in recorded.values()), recorded
        back = {**HEALTHCHECK_VARS, **writer, "slurm_healthcheck_state": "absent"}
        absent = ansible_playbook(
            "playbooks/slurm_healthcheck.yml", "-i", "inventory", "-e", json.dumps(back)
        )
        assert absent.returncode == 0, absent.stdout[-3000:]
        assert docker_exec(NODES[0], "cat", SHARED_CONF) == shared
        for host in hosts:
            assert docker_exec(host, "readlink", "/etc/slurm/slurm.conf").strip() == SHARED_CONF, host
    finally:
        unshare_slurm_conf(hosts)


def docker_write(node: str, path: str, text: str, mode: str = "0644") -> None:
    """A file in a lab node, its text passed on stdin (no shell quoting)."""
    argv = ["docker", "exec", "-i", node, "sh", "-c", f"cat > {path} && chmod {mode} {path}"]
    done = subprocess.run(argv, input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, (path, done.stderr)


def remediate(*args: str) -> subprocess.CompletedProcess[str]:
    check_args = json.dumps({"dltune_remediate_check_args": ["--no-bench"]})
    done = ansible_playbook("playbooks/remediate.yml", "-i", "inventory", "-e", check_args, *args)
    assert done.returncode == 0, done.stdout[-3000:]
    return done


def test_remediation_fixes_drift_resets_a_gpu_and_resumes_only_what_it_proved(lab: None) -> None:
    """playbooks/remediate.yml on the lab's real Slurm. node1 is drained for drift (its scratch base
    made 0777: staging.slurm_hooks), node2 for uncorrected ECC errors (fake NVML: no remediation fixes
    that), node3 for NVIDIA's RESET_GPU recovery action (Xid 154, through a stand-in `dmesg`; the reset
    goes to a stand-in `nvidia-smi` on PATH, as no GPU exists here). Each drain is dltune's own
    (`dltune audit --slurm-drain`). The play re-applies slurm_tmpdir on node1, proves and resumes it;
    keeps node2 drained with its reason; resets node3's GPU, but the reset does not clear the fault the
    first time, so the proof fails and node3 stays drained; once a reset clears it, the next run
    resumes node3. `dltune check --no-bench` is the proof here (the quick bench on CPU takes minutes a
    node in the lab; the gate itself is tested in test_fake_nvml and test_bench_cpu)."""
    drift, ecc, gpu = NODES
    audit = ["dltune", "audit", "--slurm-drain", "--drain-limit", "3", "--format", "json"]
    try:
        docker_exec(drift, "chmod", "0777", "/localscratch")
        subprocess.run(
            ["docker", "exec", drift, *audit, "--only", "staging"], capture_output=True, check=False
        )
        gpu_fault(ecc, True)
        subprocess.run(["docker", "exec", ecc, *audit, "--only", "gpu"], capture_output=True, check=False)
        docker_write(gpu, KMSG_EXTRA, XID_RESET + "\n")
        for name, body in (("dmesg", DMESG_STANDIN), ("nvidia-smi", SMI_STANDIN)):
            docker_write(gpu, f"/usr/local/sbin/{name}", body, "0755")
        subprocess.run(["docker", "exec", gpu, *audit, "--only", "gpu"], capture_output=True, check=False)
        assert [slurm_node(n)[1] for n in NODES] == [
            "dltune: staging.slurm_hooks",
            "dltune: gpu.ecc",
            "dltune: gpu.xid",
        ]

        done = remediate()
        assert "DRAIN" not in slurm_node(drift)[0], (slurm_node(drift), done.stdout[-3000:])
        # The remediation's resume is dltune's in the node's flap history (not an operator's reset).
        history = json.loads(docker_exec(drift, "cat", "/var/lib/dltune/slurm-health.json"))
        assert history["resumes"] and history["drained_reason"] == "", history
        assert docker_exec(drift, "stat", "-c", "%a", "/localscratch").strip() == "755"
        assert "DRAIN" in slurm_node(ecc)[0] and slurm_node(ecc)[1] == "dltune: gpu.ecc"
        assert docker_exec(gpu, "cat", SMI_CALLS).split() == ["-r", "-i", "0000:3b:00.0"]
        assert "DRAIN" in slurm_node(gpu)[0] and slurm_node(gpu)[1] == "dltune: gpu.xid", done.stdout[-3000:]
        assert f"{gpu} stays drained" in done.stdout

        docker_exec(gpu, "touch", RESET_CLEARS)
        remediate("--limit", gpu)
        assert docker_exec(gpu, "cat", SMI_CALLS).split() == ["-r", "-i", "0000:3b:00.0"] * 2
        assert "DRAIN" not in slurm_node(gpu)[0], slurm_node(gpu)
        assert "DRAIN" in slurm_node(ecc)[0]
    finally:
        gpu_fault(ecc, False)
        docker_exec(drift, "chmod", "0755", "/localscratch")
        docker_exec(
            gpu,
            "rm",
            "-f",
            KMSG_EXTRA,
            RESET_CLEARS,
            SMI_CALLS,
            "/usr/local/sbin/dmesg",
            "/usr/local/sbin/nvidia-smi",
        )
        for node in NODES:
            if "DRAIN" in slurm_node(node)[0]:
                docker_exec(CONTROLLER, "scontrol", "update", f"nodename={node}", "state=resume")


def test_audit_playbook_reports_every_node(lab: None, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """playbooks/audit.yml fetches each node's audit and merges them with `dltune report`; a node in the
    inventory that does not exist is in the report as unreachable, not dropped."""
    inventory = lab_inventory(tmp_path, {"dltune-lab-ghost": None})
    report_dir = tmp_path / "report"
    done = ansible_playbook(
        "playbooks/audit.yml", "-i", str(inventory), "-e", f"dltune_report_dir={report_dir}"
    )
    assert done.returncode == 0, done.stdout[-4000:]
    merged = json.loads((report_dir / "cluster.json").read_text())
    by_host = {n["host"]: n for n in merged["nodes"]}
    assert sorted(by_host) == sorted([*NODES, "dltune-lab-ghost"])
    assert by_host["dltune-lab-ghost"]["problem"].startswith("unreachable")
    for node in NODES:
        assert by_host[node]["problem"] is None and by_host[node]["results"]
    assert (report_dir / "report.html").read_text().count("dltune-lab-ghost") >= 1
    # The summary reaches the terminal as drawn: the heading whole, each node's row on one line.
    assert f"dltune report: {len(NODES) + 1} node(s)" in done.stdout
    assert f"HTML report: {report_dir.resolve()}/report.html" in done.stdout
    assert any("dltune-lab-ghost" in line and "UNREACHABLE" in line for line in done.stdout.splitlines())


def test_one_broken_node_and_only_that_node_fails_in_the_report(lab: None, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An admin remounts node2's data disk relatime by hand: the next cluster report shows node2,
    and no other node, failing on /data (noatime, and live options vs fstab), with the data_disks
    remedy."""
    report_dir = tmp_path / "report"
    broken = NODES[1]
    docker_exec(broken, "mount", "-o", "remount,relatime", "--options-source", "disable", "/data")
    try:
        done = ansible_playbook(
            "playbooks/audit.yml", "-i", "inventory", "-e", f"dltune_report_dir={report_dir}"
        )
    finally:
        docker_exec(broken, "mount", "-o", "remount,noatime", "--options-source", "disable", "/data")
    assert done.returncode == 0, done.stdout[-4000:]
    by_host = {n["host"]: n for n in json.loads((report_dir / "cluster.json").read_text())["nodes"]}
    failing = {
        host: sorted((r["id"], r["subject"]) for r in node["results"] if r["status"] in ("fail", "error"))
        for host, node in by_host.items()
    }
    # Both findings are about /data: the live options lack noatime, and no longer match fstab's.
    expected = [("storage.data_fstab", "/data"), ("storage.data_noatime", "/data")]
    assert failing == {node: (expected if node == broken else []) for node in NODES}, failing
    finding = next(r for r in by_host[broken]["results"] if r["id"] == "storage.data_noatime")
    assert finding["subject"] == "/data" and "data_disks" in finding["remedy"], finding
    assert not by_host[broken]["healthy"] and all(by_host[n]["healthy"] for n in NODES if n != broken)
    page = (report_dir / "report.html").read_text()
    assert finding["remedy"].split()[0] in page and broken in page


NODE_EXPORTER_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # Ubuntu's package default


def lab_address(node: str) -> str:
    done = subprocess.run(
        ["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", node],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_node_exporters_on_the_lab_nodes_carry_a_lost_gpu_to_its_alert_and_every_panel(lab: None) -> None:
    """Ubuntu's prometheus-node-exporter runs in every lab node (baked into the lab image, started by
    systemd as the package ships it) and serves the textfile a root `dltune audit` writes into its
    textfile directory, as the role's timer unit runs it. Debian's Prometheus on this host scrapes the
    three nodes over the lab's Docker network with monitoring/dltune-rules.yml loaded. node2's fake
    NVML then loses GPU 3 (only the GPUs are fake, at NVML): DltuneCriticalFailure must fire for
    node2 and for no other node, and every panel of monitoring/dltune-dashboard.json must return
    series from what the nodes' own exporters serve."""
    needed("prometheus")
    for node in NODES:
        state = subprocess.run(
            ["docker", "exec", node, "systemctl", "is-active", "prometheus-node-exporter"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip
        assert state == "active", (node, state)
    textfile = f"{NODE_EXPORTER_TEXTFILE_DIR}/dltune.prom"
    exists = f"test -e {textfile} && echo y || :"
    had_textfile = {node: docker_exec(node, "sh", "-c", exists).strip() for node in NODES}
    broken = NODES[1]

    def audit(node: str) -> None:
        done = subprocess.run(
            ["docker", "exec", node, "dltune", "audit", "--format", "json",
             "--textfile-dir", NODE_EXPORTER_TEXTFILE_DIR],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert done.returncode in (0, 1), (node, done.stderr[-2000:])

    docker_exec(broken, "cp", SCENARIO, f"{SCENARIO}.healthy")
    try:
        docker_exec(broken, "sh", "-c", f"echo gpu3.lost=1 >> {SCENARIO}")
        for node in NODES:
            audit(node)
        seen = alerts_and_panels(
            [f"--target={node}={lab_address(node)}:9100" for node in NODES], broken=broken
        )
    finally:
        # As found: node2 healthy, and a textfile only where there was one.
        docker_exec(broken, "mv", f"{SCENARIO}.healthy", SCENARIO)
        for node in NODES:
            if had_textfile[node]:
                audit(node)
            else:
                docker_exec(node, "rm", "-f", textfile)
    assert_fires_for_only(seen, broken)


def test_a_disruptive_role_stops_the_rollout_after_a_failed_batch(lab: None, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The disruptive roles' plays go a batch at a time (serial 25%) and stop when more than 10% of a
    batch failed: node1's bad input fails the first batch, so the other nodes are never touched.
    Control: with one batch of all nodes and the threshold at 100% the same run goes on to them
    (Ansible always ends a play whose whole batch failed, so the batch must hold them all)."""
    inventory = lab_inventory(
        tmp_path,
        {"dltune-lab-node1": {"data_disks_devices": [{"device": "/dev/null", "mount_point": "data"}]}},
    )
    recap = re.compile(
        r"^(dltune-lab-node\d)\s*:\s*ok=(\d+)\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)", re.M
    )

    stopped = ansible_playbook("playbooks/data_disks.yml", "-i", str(inventory))
    assert stopped.returncode != 0
    hosts = {m[1]: (int(m[2]), int(m[3])) for m in recap.finditer(stopped.stdout)}
    assert hosts["dltune-lab-node1"][1] == 1, stopped.stdout[-3000:]
    for node in NODES[1:]:
        assert hosts.get(node, (0, 0)) == (0, 0), stopped.stdout[-3000:]

    tolerated = ansible_playbook(
        "playbooks/data_disks.yml",
        "-i",
        str(inventory),
        "-e",
        "data_disks_serial=100%",
        "-e",
        "data_disks_max_fail_percentage=100",
    )
    hosts = {m[1]: (int(m[2]), int(m[3])) for m in recap.finditer(tolerated.stdout)}
    assert hosts["dltune-lab-node1"][1] == 1, tolerated.stdout[-3000:]
    for node in NODES[1:]:
        assert hosts[node][0] > 0 and hosts[node][1] == 0, tolerated.stdout[-3000:]


def test_dl_env_rolls_back_and_reapplies(lab: None) -> None:
    """dl_env_state=absent on one node removes what the role wrote (profile.d file, its block in
    /etc/environment, job-env, manifest fragment) and keeps the rest of /etc/environment; a second
    rollback changes nothing; the audit then reports the environment as unplanned; present restores."""
    node = NODES[-1]
    limit = ("--limit", node)
    environment_before = docker_exec(node, "cat", "/etc/environment")
    assert "CUBLAS_WORKSPACE_CONFIG=:4096:8" in environment_before
    written = ["/etc/profile.d/dltune-dl-env.sh", "/etc/dltune/job-env", "/etc/dltune/expected.d/dl_env.json"]
    try:
        absent = ansible_playbook(
            "playbooks/dl_env.yml", "-i", "inventory", *limit, "-e", "dl_env_state=absent"
        )
        assert absent.returncode == 0, absent.stdout[-3000:]
        for path in written:
            assert (
                subprocess.run(["docker", "exec", node, "test", "-e", path], check=False).returncode == 1
            ), path
        environment = docker_exec(node, "cat", "/etc/environment")
        assert "dltune" not in environment and "CUBLAS" not in environment
        assert environment_before.startswith(environment.rstrip("\n")), (environment_before, environment)
        again = ansible_playbook(
            "playbooks/dl_env.yml", "-i", "inventory", *limit, "-e", "dl_env_state=absent"
        )
        assert re.search(rf"^{node}\s*:.*changed=0 .*failed=0", again.stdout, re.M), again.stdout[-3000:]
        audit = json.loads(audit_as_nobody(node, "--only", "env").stdout)
        cublas = next(r for r in audit["results"] if r["id"] == "env.cublas_workspace")
        assert cublas["status"] == "warn" and cublas["remedy"] == "apply role dl_env", cublas
    finally:
        present = ansible_playbook("playbooks/dl_env.yml", "-i", "inventory", *limit)
    assert present.returncode == 0, present.stdout[-3000:]
    assert docker_exec(node, "cat", "/etc/environment") == environment_before
    for path in written:
        docker_exec(node, "test", "-f", path)


def test_tmpfs_tmp_rolls_back_at_the_next_boot_and_reapplies(lab: None) -> None:
    """tmpfs_tmp_state=absent removes the fstab line and the manifest fragment, leaves the live tmpfs
    (files in use) and marks the node reboot-required naming tmpfs_tmp; a second rollback changes
    nothing; present puts the same fstab line back."""
    node = NODES[-1]
    limit = ("--limit", node)
    fstab_before = docker_exec(node, "cat", "/etc/fstab")
    assert re.search(r"^tmpfs\s+/tmp\s+tmpfs\s", fstab_before, re.M)
    docker_exec(node, "rm", "-f", "/run/reboot-required", "/run/reboot-required.pkgs")
    try:
        absent = ansible_playbook(
            "playbooks/tmpfs_tmp.yml", "-i", "inventory", *limit, "-e", "tmpfs_tmp_state=absent"
        )
        assert absent.returncode == 0, absent.stdout[-3000:]
        fstab = docker_exec(node, "cat", "/etc/fstab")
        assert not re.search(r"^\S+\s+/tmp\s", fstab, re.M), fstab
        assert [line for line in fstab_before.splitlines() if " /tmp " not in line] == fstab.splitlines()
        assert docker_exec(node, "findmnt", "-n", "-o", "FSTYPE", "/tmp").strip() == "tmpfs"
        assert "tmpfs_tmp" in docker_exec(node, "cat", "/run/reboot-required.pkgs").split()
        assert subprocess.run(
            ["docker", "exec", node, "test", "-e", "/etc/dltune/expected.d/tmpfs_tmp.json"], check=False
        ).returncode
        again = ansible_playbook(
            "playbooks/tmpfs_tmp.yml", "-i", "inventory", *limit, "-e", "tmpfs_tmp_state=absent"
        )
        assert re.search(rf"^{node}\s*:.*changed=0 .*failed=0", again.stdout, re.M), again.stdout[-3000:]
    finally:
        present = ansible_playbook("playbooks/tmpfs_tmp.yml", "-i", "inventory", *limit)
        # The marker is the rollback's, and the rollback was undone: no reboot is due any more.
        docker_exec(node, "rm", "-f", "/run/reboot-required", "/run/reboot-required.pkgs")
    assert present.returncode == 0, present.stdout[-3000:]
    # The same lines (the /tmp line now comes last: the mount module appends).
    assert sorted(docker_exec(node, "cat", "/etc/fstab").splitlines()) == sorted(fstab_before.splitlines())
    docker_exec(node, "test", "-f", "/etc/dltune/expected.d/tmpfs_tmp.json")


def test_data_disks_roll_back_without_losing_data(lab: None) -> None:
    """data_disks_state=absent: a disk in use is refused before fstab changes; once free, the disk is
    unmounted and its fstab line removed, its filesystem and files stay; present mounts the same
    filesystem again (same UUID, not reformatted) with the file intact."""
    node = NODES[-1]
    limit = ("--limit", node)
    rollback = ("playbooks/data_disks.yml", "-i", "inventory", *limit, "-e", "data_disks_state=absent")
    fstab_before = docker_exec(node, "cat", "/etc/fstab")
    uuid = docker_exec(node, "findmnt", "-n", "-o", "UUID", "/data").strip()
    docker_exec(node, "sh", "-c", "echo kept > /data/rollback-marker")
    holder = subprocess.Popen(["docker", "exec", node, "sh", "-c", "cd /data && exec sleep 300"])
    try:
        time.sleep(2)
        busy = ansible_playbook(*rollback)
        assert busy.returncode != 0
        assert docker_exec(node, "cat", "/etc/fstab") == fstab_before
        assert docker_exec(node, "findmnt", "-n", "-o", "UUID", "/data").strip() == uuid
        docker_exec(node, "pkill", "-f", "sleep 300")
        holder.wait(timeout=30)

        absent = ansible_playbook(*rollback)
        assert absent.returncode == 0, absent.stdout[-3000:]
        assert subprocess.run(["docker", "exec", node, "findmnt", "/data"], check=False).returncode == 1
        assert f"UUID={uuid}" not in docker_exec(node, "cat", "/etc/fstab")
        assert docker_exec(node, "blkid", "-U", uuid).strip()
        again = ansible_playbook(*rollback)
        assert re.search(rf"^{node}\s*:.*changed=0 .*failed=0", again.stdout, re.M), again.stdout[-3000:]
    finally:
        subprocess.run(["docker", "exec", node, "pkill", "-f", "sleep 300"], check=False)
        holder.wait(timeout=30)
        present = ansible_playbook("playbooks/data_disks.yml", "-i", "inventory", *limit)
    assert present.returncode == 0, present.stdout[-3000:]
    assert docker_exec(node, "findmnt", "-n", "-o", "UUID", "/data").strip() == uuid
    assert docker_exec(node, "cat", "/data/rollback-marker") == "kept\n"
    assert sorted(docker_exec(node, "cat", "/etc/fstab").splitlines()) == sorted(fstab_before.splitlines())


@pytest.mark.slow  # make test-slow: docs/development.md says why
def test_dltune_uninstalls_cleanly_and_reinstalls(lab: None) -> None:
    """dltune_state=absent removes the periodic audit (units, timer, its last facts and textfile), the
    PATH link and the virtualenv, keeps the other roles' manifest; a second run changes nothing; present
    installs it again and the audit runs as an ordinary user."""
    node = NODES[-1]
    limit = ("--limit", node)
    facts = "/etc/ansible/facts.d/dltune.fact"
    prom = "/var/lib/prometheus/node-exporter/dltune.prom"

    def exists(path: str) -> bool:
        return subprocess.run(["docker", "exec", node, "test", "-e", path], check=False).returncode == 0

    try:
        timer = ansible_playbook(
            "playbooks/dltune.yml", "-i", "inventory", *limit, "-e", "dltune_audit_timer=true"
        )
        assert timer.returncode == 0, timer.stdout[-3000:]
        assert exists(facts) and exists(prom)
        manifest = docker_exec(node, "ls", "/etc/dltune/expected.d").split()
        absent = ansible_playbook(
            "playbooks/dltune.yml", "-i", "inventory", *limit, "-e", "dltune_state=absent"
        )
        assert absent.returncode == 0, absent.stdout[-3000:]
        for path in (
            facts,
            prom,
            "/opt/dltune",
            "/usr/local/bin/dltune",
            "/etc/systemd/system/dltune-audit.timer",
        ):
            assert not exists(path), path
        assert docker_exec(node, "ls", "/etc/dltune/expected.d").split() == manifest
        enabled = subprocess.run(
            ["docker", "exec", node, "systemctl", "is-enabled", "dltune-audit.timer"],
            check=False,
            capture_output=True,
        )
        assert enabled.returncode != 0
        again = ansible_playbook(
            "playbooks/dltune.yml", "-i", "inventory", *limit, "-e", "dltune_state=absent"
        )
        assert re.search(rf"^{node}\s*:.*changed=0 .*failed=0", again.stdout, re.M), again.stdout[-3000:]
    finally:
        present = ansible_playbook("playbooks/dltune.yml", "-i", "inventory", *limit)
    assert present.returncode == 0, present.stdout[-3000:]
    audit = audit_as_nobody(node)
    assert audit.returncode in (0, 1) and json.loads(audit.stdout)["results"], audit.stderr


# PyTorch CPU wheels for Python 3.11 (the lab's mounted interpreter): on this project's package sources
# torch 2.13.0 has a CPU build but no torchvision made for it (0.28.0 is built for the CUDA torch).
SITE_TORCH = ["torch==2.13.0", "torchvision==0.28.0"]


@pytest.fixture(scope="module")
def site_torch_wheelhouse() -> Path:
    """A site's PyTorch wheelhouse (what a site keeps on its mirror or NFS), downloaded once into build/."""
    wheels = REPO_ROOT / "build/site-torch-wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--implementation", "cp",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "-d", str(wheels), *SITE_TORCH],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return wheels


def lab_python_base() -> str:
    """The interpreter the lab mounts into each node at its own path (tests/lab/nodes.sh)."""
    return subprocess.run(
        [str(REPO_ROOT / ".venv/bin/python"), "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.mark.slow  # make test-slow: docs/development.md says why
def test_pytorch_installed_beside_dltune_from_a_site_wheelhouse(
    lab: None, site_torch_wheelhouse: Path
) -> None:
    """Role dltune's other way to PyTorch (dltune_bench_torch_packages with dltune_bench_pip_args): on
    one node, a Python 3.11 virtualenv (dltune_python) gets torch and torchvision from a wheelhouse on
    the node (--no-index --find-links), idempotently, and the bench runs on that torch: far enough to
    name the pair's mismatch (the only CPU pair this project's sources have), which proves it loaded
    the wheels the role installed. Then the node goes back to the site environment (dltune_bench_python)
    and the venv no longer holds a torch of its own."""
    node, wheels = NODES[-1], "/var/tmp/site-torch-wheels"
    limit = ("--limit", node)
    subprocess.run(["docker", "exec", node, "rm", "-rf", wheels], check=True)
    subprocess.run(["docker", "cp", str(site_torch_wheelhouse), f"{node}:{wheels}"], check=True)
    install = json.dumps({
        "dltune_bench_python": "", "dltune_python": f"{lab_python_base()}/bin/python3",
        "dltune_bench_torch_packages": SITE_TORCH,
        "dltune_bench_pip_args": f"--no-index --find-links {wheels}",
    })  # fmt: skip
    venv = "/opt/dltune/venv"
    try:
        first = ansible_playbook("playbooks/dltune.yml", "-i", "inventory", *limit, "-e", install)
        assert first.returncode == 0, first.stdout[-4000:]
        again = ansible_playbook("playbooks/dltune.yml", "-i", "inventory", *limit, "-e", install)
        assert re.search(rf"^{node}\s*:.*changed=0 .*failed=0", again.stdout, re.M), again.stdout[-3000:]
        shown = docker_exec(node, f"{venv}/bin/python", "-m", "pip", "show", "torch")
        assert "Version: 2.13.0+cpu" in shown and f"Location: {venv}/lib/python3.11/site-packages" in shown
        pth = docker_exec(node, "find", venv, "-name", "dltune-bench-env.pth")
        assert pth == "", pth  # nothing of the site environment: its own torch only
        bench = subprocess.run(
            ["docker", "exec", node, "runuser", "-u", "nobody", "--", "env", "TMPDIR=/var/tmp", "dltune",
             "bench", "--quick", "--device", "cpu", "--format", "json"],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert bench.returncode == 2, (bench.stdout[-2000:], bench.stderr[-2000:])
        assert "torchvision does not load with PyTorch 2.13.0+cpu" in bench.stderr, bench.stderr[-2000:]
    finally:
        # Back to the lab's way (inventory/lab.yml: dltune_bench_python); the installed torch must go
        # first, or it would stand before the site's (the role does not uninstall what a list named).
        subprocess.run(["docker", "exec", node, "rm", "-rf", venv, wheels], check=True)
        back = ansible_playbook("playbooks/dltune.yml", "-i", "inventory", *limit)
        subprocess.run(["docker", "exec", node, "rm", "-rf", "/var/tmp/torchinductor_nobody"], check=False)
    assert back.returncode == 0, back.stdout[-3000:]
    torch_file = docker_exec(node, "env", "TMPDIR=/var/tmp", f"{venv}/bin/python", "-c",
                             "import torch; print(torch.__file__)")  # fmt: skip
    assert not torch_file.startswith(venv), torch_file


def test_a_pytorch_environment_others_can_write_is_refused(lab: None) -> None:
    """dltune_bench_python naming an environment whose package directory others can write (a user's
    conda env): root runs dltune (health check, timer) and would import what a user plants there, so
    the role fails naming the directory, and dltune's venv keeps the environment it had."""
    node, env = NODES[-1], "/opt/hostile-env"
    site = f"{env}/lib/python3.11/site-packages"
    pth = "/opt/dltune/venv/lib/python3.11/site-packages/dltune-bench-env.pth"
    before = docker_exec(node, "cat", pth)
    docker_exec(node, "/opt/site-pytorch/bin/python3", "-m", "venv", "--without-pip", env)
    docker_write(node, f"{site}/lab-torch.pth", "/opt/dltune-lab/torch-site\n")
    docker_exec(node, "chmod", "0777", site)
    try:
        done = ansible_playbook("playbooks/dltune.yml", "-i", "inventory", "--limit", node,
                                "-e", f"dltune_bench_python={env}/bin/python3")  # fmt: skip
        assert done.returncode != 0, done.stdout[-3000:]
        assert f"keeps its packages where others than root can write ({site})" in done.stdout, done.stdout[
            -3000:
        ]
        assert docker_exec(node, "cat", pth) == before
    finally:
        docker_exec(node, "rm", "-rf", env)


def test_health_expectations_go_from_role_variables_to_the_audit(lab: None) -> None:
    """The dltune role's dltune_health_* variables become health.json; the audit then expects an
    InfiniBand port and an IPoIB interface the lab node does not have, and fails critically naming
    them; the node (in nvidia_driver_excluded: no count of the driver role's) is expected to have 5
    GPUs and has 4, a critical gpu.present. A malformed port list stops the role before it changes
    anything, naming the variable."""
    node, limit = NODES[0], ("--limit", NODES[0])
    fragment = "/etc/dltune/expected.d/health.json"
    before = docker_exec(node, "cat", fragment)
    wanted = {
        "dltune_health_ib_ports": [{"device": "mlx5_*", "rate_gbps": 400}],
        "dltune_health_ipoib_interfaces": ["ib0"],
        "dltune_health_gpu_numa_nodes": {"0000:3b:00.0": 0},
        "dltune_health_gpu_nearest_nics": {"0000:3b:00.0": ["mlx5_0"]},
        "dltune_health_gpu_count": 5,
    }
    try:
        applied = ansible_playbook(
            "playbooks/dltune.yml", "-i", "inventory", *limit, "-e", json.dumps(wanted)
        )
        assert applied.returncode == 0, applied.stdout[-3000:]
        recorded = json.loads(docker_exec(node, "cat", fragment))
        assert recorded["ib_ports"] == wanted["dltune_health_ib_ports"]
        assert recorded["gpu_nearest_nics"] == wanted["dltune_health_gpu_nearest_nics"]
        done = audit_as_nobody(node, "--only", "fabric")
        assert done.returncode == 1, done.stderr
        failed = {
            (r["id"], r["subject"]): r for r in json.loads(done.stdout)["results"] if r["status"] == "fail"
        }
        assert failed[("fabric.ib_ports", "mlx5_*/1")]["critical"]
        assert failed[("fabric.ipoib", "ib0")]["critical"]
        gpus = audit_as_nobody(node, "--only", "gpu")
        lost = [r for r in json.loads(gpus.stdout)["results"] if r["id"] == "gpu.present"]
        assert [(r["status"], r["summary"], r["critical"]) for r in lost] == [
            ("fail", "4 of 5 GPUs answer (5 expected by dltune_health_gpu_count)", True)
        ], lost
        current = docker_exec(node, "cat", fragment)
        bad = ansible_playbook(
            "playbooks/dltune.yml",
            "-i",
            "inventory",
            *limit,
            "-e",
            json.dumps({"dltune_health_ib_ports": [{"port": 1, "rate_gbps": "fast"}]}),
        )
        assert bad.returncode != 0 and "dltune_health_ib_ports" in bad.stdout, bad.stdout[-2000:]
        assert docker_exec(node, "cat", fragment) == current, "a refused input changed the fragment"
        # A GPU named by its index, not its PCI address: refused, naming the variable.
        bad_topology = ansible_playbook(
            "playbooks/dltune.yml",
            "-i",
            "inventory",
            *limit,
            "-e",
            json.dumps({"dltune_health_gpu_numa_nodes": {"GPU0": 0}}),
        )
        assert bad_topology.returncode != 0 and "dltune_health_gpu_numa_nodes" in bad_topology.stdout
        assert docker_exec(node, "cat", fragment) == current, "a refused input changed the fragment"
    finally:
        restored = ansible_playbook("playbooks/dltune.yml", "-i", "inventory", *limit)
        assert restored.returncode == 0, restored.stdout[-3000:]
    assert docker_exec(node, "cat", fragment) == before


# --- staging at cluster scale: one read of the shared filesystem per job (dltune stage --broadcast) --

LAB_STATE = Path(os.environ.get("DLTUNE_LAB_STATE", "/var/tmp/dltune-lab"))
# Under nodes.sh's shared bind mount: appears in every node at /shared/slow.
SLOW_MOUNT = LAB_STATE / "shared/slow"
DATASET_FILES = 2000


class SlowSource:
    """tests/lab/slowfs.py over a dataset: 1 ms per lookup, open and readdir, every byte counted."""

    def __init__(self, backing: Path) -> None:
        self.backing = backing

    def stats(self) -> dict[str, Any]:
        return json.loads((SLOW_MOUNT / ".slowfs-stats").read_text())

    def bytes_read(self) -> int:
        return int(self.stats()["bytes_read"])


def tree_digest(root: Path) -> str:
    """What every node's copy must equal: each file's path, size, mtime (ns) and content."""
    lines = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        st = path.stat()
        content = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{path.relative_to(root)} {st.st_size} {st.st_mtime_ns} {content}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


# Each node's copy, digested as tree_digest does, from inside the job: a script on the shared bind
# mount (/shared/tools in every node), beside the slow source, not on it (its reads are counted).
NODE_DIGEST = """\
import hashlib, os, pathlib, sys
root = pathlib.Path(sys.argv[1])
lines = []
for path in sorted(p for p in root.rglob("*") if p.is_file()):
    st = path.stat()
    content = hashlib.sha256(path.read_bytes()).hexdigest()
    lines.append(f"{path.relative_to(root)} {st.st_size} {st.st_mtime_ns} {content}")
where = os.path.relpath(root, os.environ["SLURM_TMPDIR"])
print(os.environ["SLURMD_NODENAME"], where, hashlib.sha256("\\n".join(lines).encode()).hexdigest())
"""
DIGEST = "python3 /shared/tools/digest.py"


@pytest.fixture(scope="module")
def slow_source(lab: None) -> Any:
    """A dataset of DATASET_FILES small files, and a tar of it, behind the slow FUSE source mounted
    into every lab node at /shared/slow."""
    backing = LAB_STATE / "slow-backing"
    shutil.rmtree(backing, ignore_errors=True)
    dataset = backing / "ds"
    for i in range(DATASET_FILES):
        path = dataset / f"class{i % 20:02d}" / f"img{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(1000 + i * 7919 % 7000))
        os.utime(path, ns=(1_700_000_000_123_456_789 + i, 1_700_000_000_123_456_789 + i))
    # A small one for the fallback, which reads it three times over.
    for i in range(200):
        (backing / "ds-small").mkdir(exist_ok=True)
        (backing / "ds-small" / f"img{i:03d}.jpg").write_bytes(os.urandom(1000 + i))
    # GNU tar's pax format keeps mtimes to the nanosecond, as the directory has them.
    subprocess.run(
        ["tar", "--format=posix", "-cf", str(backing / "ds-packed.tar"), "-C", str(dataset), "."], check=True
    )
    SLOW_MOUNT.mkdir(parents=True, exist_ok=True)
    (LAB_STATE / "shared/tools").mkdir(exist_ok=True)
    (LAB_STATE / "shared/tools/digest.py").write_text(NODE_DIGEST)
    server = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "tests/lab/slowfs.py"), str(backing), str(SLOW_MOUNT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for _ in range(100):
        if (SLOW_MOUNT / ".slowfs-stats").exists() or server.poll() is not None:
            break
        time.sleep(0.1)
    if server.poll() is not None:
        pytest.fail(f"slowfs did not mount: {server.stderr.read() if server.stderr else ''}")
    try:
        yield SlowSource(backing)
    finally:
        subprocess.run(["umount", str(SLOW_MOUNT)], check=False)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def sbatch_as_alice(script: str, timeout: int = 300) -> tuple[subprocess.CompletedProcess[str], str]:
    """A 3-node batch job as alice, waited for; returns the job's exit code (as a CompletedProcess)
    and its output. Polled twice a second: `sbatch --wait` sleeps up to 10 s between its polls."""
    job_file = f"/home/alice/broadcast-{time.time_ns()}.out"
    submitted = subprocess.run(
        [
            "docker", "exec", NODES[0], "runuser", "-u", "alice", "--",
            "sbatch", "--parsable", f"--nodes={len(NODES)}", f"--nodelist={','.join(NODES)}",
            f"--output={job_file}", "--wrap", script,
        ],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while True:
        shown = docker_exec(NODES[0], "scontrol", "show", "job", "--oneliner", job)
        state = re.search(r"JobState=(\S+)", shown)
        if state and state.group(1) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        assert time.monotonic() < deadline, f"job {job} still {state and state.group(1)} after {timeout} s"
        time.sleep(0.5)
    code = re.search(r"ExitCode=(\d+):(\d+)", shown)
    returncode = int(code.group(1)) if code else -1
    output = subprocess.run(
        ["docker", "exec", NODES[0], "cat", job_file], capture_output=True, text=True, check=False
    ).stdout
    return subprocess.CompletedProcess(submitted.args, returncode, shown, submitted.stderr), output


def node_digests(output: str) -> dict[tuple[str, str], str]:
    rows = [line.split() for line in output.splitlines() if line.startswith("dltune-lab-node")]
    return {(row[0], row[1]): row[2] for row in rows if len(row) == 3}


def test_broadcast_reads_the_shared_filesystem_once_for_three_nodes_and_resumes_a_killed_task(
    slow_source: SlowSource,
) -> None:
    """`dltune stage --broadcast` in a 3-node batch job as an ordinary user, from the slow FUSE
    source: a directory of 2,000 files and a tar of it reach $SLURM_TMPDIR on every node, identical,
    while the source serves each byte once. The third node's extraction is killed (SIGKILL) part-way:
    the command fails naming that node, and the rerun in the same job resumes it without reading the
    source again."""
    dataset_bytes = sum(p.stat().st_size for p in (slow_source.backing / "ds").rglob("*") if p.is_file())
    tar_bytes = (slow_source.backing / "ds-packed.tar").stat().st_size
    # On the third node: kill its extraction once 200 files of it are complete on disk. `find` also
    # sees the files the extraction's workers are writing at that moment (up to NETWORK_WORKERS, 16),
    # which the resume rightly copies again: so kill at 216 files seen (CI saw 199 kept of 200 seen).
    killer = subprocess.Popen(
        [
            "docker", "exec", NODES[2], "sh", "-c",
            "end=$(($(date +%s) + 200)); while [ $(date +%s) -lt $end ]; do "
            "n=$(find /localscratch -path '*/.ds.partial/*' -type f 2>/dev/null | head -216 | wc -l); "
            "if [ $n -ge 216 ]; then pkill -KILL -f 'stage-node [f]inish' && echo killed; exit 0; fi; done",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    before = slow_source.stats()
    script = (
        "dltune stage --broadcast /shared/slow/ds; echo first=$?; "
        "dltune stage --broadcast /shared/slow/ds 2>&1; echo second=$?; "
        "dltune stage --broadcast /shared/slow/ds-packed.tar; echo packed=$?; "
        f"srun --ntasks-per-node=1 {DIGEST} $SLURM_TMPDIR/ds; "
        f"srun --ntasks-per-node=1 {DIGEST} $SLURM_TMPDIR/ds-packed"
    )
    done, output = sbatch_as_alice(script)
    if killer.poll() is None:
        killer.kill()
    killed = killer.communicate(timeout=30)[0]
    assert done.returncode == 0, (done.stderr, output[-3000:])
    assert "killed" in killed, f"the third node's extraction finished before it could be killed:\n{output}"
    assert "first=1" in output and re.search(rf"{NODES[2]}: FAILED", output), output[-3000:]
    assert "second=0" in output and "packed=0" in output, output[-3000:]
    resumed = re.search(
        rf"{NODES[2]}: staged: .*?(\d+) files? already there from the interrupted stage it resumed", output
    )
    assert resumed and int(resumed.group(1)) >= 200, output[-3000:]
    assert re.search(rf"{NODES[1]}: staged: already staged", output), output[-3000:]

    # One dataset's worth of reads from the shared filesystem, for three nodes, a kill and a rerun;
    # the tar sent by sbcast, one open (a page the kernel's page cache fetched twice within that
    # open is the kernel's doing, counted apart by slowfs).
    after = slow_source.stats()
    assert after["bytes_read"] - before["bytes_read"] == dataset_bytes + tar_bytes, after
    sbcast_opens = after["opens_by_reader"].get("sbcast", 0) - before["opens_by_reader"].get("sbcast", 0)
    assert sbcast_opens == 1, after
    digests = node_digests(output)
    want = tree_digest(slow_source.backing / "ds")
    for node in NODES:
        assert digests.get((node, "ds")) == want, (node, output[-3000:])
        assert digests.get((node, "ds-packed")) == want, (node, output[-3000:])


def test_staging_per_node_and_the_fallback_without_sbcast_read_it_once_per_node(
    slow_source: SlowSource,
) -> None:
    """The contrast that lets the broadcast test fail: each node's own `dltune stage` reads it all.
    Then `--broadcast` where sbcast fails (a stand-in that exits 1 ahead of it on PATH): the command
    says so and every node reads the source itself, as the per-node path does."""
    dataset_bytes = sum(p.stat().st_size for p in (slow_source.backing / "ds").rglob("*") if p.is_file())
    counters = "echo READ $(cat /shared/slow/.slowfs-stats)"
    shim = "#!/bin/sh\\necho simulated >&2; exit 1\\n"
    broken = f"mkdir -p $HOME/broken && printf '{shim}' >$HOME/broken/sbcast"

    done, output = sbatch_as_alice(
        f"{counters}; srun --ntasks-per-node=1 dltune stage /shared/slow/ds; {counters}; "
        f"srun --ntasks-per-node=1 {DIGEST} $SLURM_TMPDIR/ds; "
        f"{broken} && chmod +x $HOME/broken/sbcast; "
        "srun --ntasks-per-node=1 mkdir $SLURM_TMPDIR/fallback; "
        "PATH=$HOME/broken:$PATH dltune stage --broadcast /shared/slow/ds-small --to $SLURM_TMPDIR/fallback; "
        f"echo fallback=$?; {counters}; "
        f"srun --ntasks-per-node=1 {DIGEST} $SLURM_TMPDIR/fallback/ds-small"
    )
    assert done.returncode == 0, (done.stderr, output[-3000:])
    reads = [json.loads(line[5:])["bytes_read"] for line in output.splitlines() if line.startswith("READ ")]
    assert len(reads) == 3, output[-3000:]
    assert reads[1] - reads[0] == len(NODES) * dataset_bytes, output[-3000:]
    assert "fallback=0" in output and "sbcast failed: simulated" in output, output[-3000:]
    assert "every node reads /shared/slow/ds-small from the shared filesystem itself" in output
    small_bytes = sum(p.stat().st_size for p in (slow_source.backing / "ds-small").iterdir())
    assert reads[2] - reads[1] == len(NODES) * small_bytes, output[-3000:]
    want = tree_digest(slow_source.backing / "ds")
    digests = node_digests(output)
    assert {node: digests.get((node, "ds")) for node in NODES} == dict.fromkeys(NODES, want)
    small = tree_digest(slow_source.backing / "ds-small")
    assert {node: digests.get((node, "fallback/ds-small")) for node in NODES} == dict.fromkeys(NODES, small)
