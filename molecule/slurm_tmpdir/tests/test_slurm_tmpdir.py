"""A real Slurm runs jobs as unprivileged users: each gets a private node-local $SLURM_TMPDIR and the
node's DL environment, stages a dataset into it with dltune, and the Epilog removes it afterwards;
root never follows a link a user or a stale job left behind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import BASE, audit_as_user, field, job_output, submit, wait_gone, write_as

MAKE_TREE = (
    "import os, sys\n"
    "root, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
    "for i in range(count):\n"
    "    d = os.path.join(root, f'd{i % 50:02d}')\n"
    "    os.makedirs(d, exist_ok=True)\n"
    "    with open(os.path.join(d, f'f{i:05d}.bin'), 'wb') as f:\n"
    "        f.write(os.urandom(size))\n"
)


def make_tree(host: Any, user: str, path: str, count: int, size: int) -> None:
    write_as(host, user, f"/home/{user}/make_tree.py", MAKE_TREE)
    cmd = host.run(
        f"test -d {path} || runuser -u {user} -- python3 /home/{user}/make_tree.py {path} {count} {size}"
    )
    assert cmd.rc == 0, cmd.stderr


@pytest.fixture(scope="module")
def dataset(host: Any) -> str:
    make_tree(host, "alice", "/home/alice/data/tree", 3000, 700)
    cmd = host.run("cd /home/alice/data && runuser -u alice -- tar czf tree-archive.tar.gz tree")
    assert cmd.rc == 0, cmd.stderr
    return "/home/alice/data"


def test_job_stages_into_its_private_dir_sees_the_dl_env_and_audits_clean(host: Any, dataset: str) -> None:
    job = submit(
        host,
        "alice",
        'stat -c "STAT %U %a %F" "$SLURM_TMPDIR"\n'
        'echo "DIR $SLURM_TMPDIR"\n'
        'echo "CUBLAS ${CUBLAS_WORKSPACE_CONFIG:-unset}"\n'
        'echo "TMP ${TMPDIR:-unset}"\n'
        'echo "CACHE ${APPTAINER_CACHEDIR:-unset}"\n'
        f"tree=$(dltune stage {dataset}/tree --verify --checksum)\n"
        f"archive=$(dltune stage {dataset}/tree-archive.tar.gz --verify)\n"
        'echo "TREE $tree"\necho "ARCHIVE $archive"\n'
        'echo "TREEFILES $(find "$tree" -type f | wc -l)"\n'
        'echo "ARCHIVEFILES $(find "$archive" -type f | wc -l)"\n'
        'dltune audit --only env,staging --format json > "$HOME/audit-$SLURM_JOB_ID.json" || true\n',
    )
    wait_gone(host, job)
    out = job_output(host, "alice", job)
    directory = f"{BASE}/alice.{job}"
    assert field(out, "DIR") == directory
    assert field(out, "STAT") == "alice 700 directory"
    # Nothing was exported by the submitter (--export=NONE): these came from the TaskProlog.
    assert field(out, "CUBLAS") == ":4096:8"
    assert field(out, "TMP") == directory
    assert field(out, "CACHE") == "/var/cache/dl-cache/alice"
    assert field(out, "TREE") == f"{directory}/tree"
    assert field(out, "ARCHIVE") == f"{directory}/tree-archive"
    assert field(out, "TREEFILES") == "3000" and field(out, "ARCHIVEFILES") == "3000"
    report = json.loads(host.file(f"/home/alice/audit-{job}.json").content_string)
    statuses = {(r["id"], r["subject"]): r["status"] for r in report["results"]}
    assert statuses[("env.cublas_workspace", None)] == "pass"
    assert statuses[("staging.slurm_tmpdir", directory)] == "pass"
    assert statuses[("staging.slurm_hooks", None)] == "pass"
    assert [s for (i, _), s in statuses.items() if i == "env.node_files"] == ["pass"] * 3
    assert not host.file(directory).exists, "the Epilog left the job's directory behind"
    site_log = host.file("/var/log/slurm/site-hooks.log").content_string.split("\n")
    assert f"prolog {job}" in site_log and f"epilog {job}" in site_log, "the site's own hooks stopped running"


def test_links_a_job_plants_are_never_followed_by_the_epilog(host: Any) -> None:
    host.run("echo keep > /etc/dltune-precious && chmod 0600 /etc/dltune-precious")
    host.run("mkdir -p /root/precious-dir && echo keep > /root/precious-dir/file")
    job = submit(
        host,
        "alice",
        'ln -s /etc/dltune-precious "$SLURM_TMPDIR/link"\n'
        'ln -s /root/precious-dir "$SLURM_TMPDIR/dirlink"\n'
        'mkdir "$SLURM_TMPDIR/sub" && ln -s /root "$SLURM_TMPDIR/sub/rootlink"\n'
        "echo DONE\n",
        name="plant",
    )
    wait_gone(host, job)
    assert "DONE" in job_output(host, "alice", job, "plant")
    precious = host.file("/etc/dltune-precious")
    assert precious.content_string == "keep\n" and precious.user == "root" and precious.mode == 0o600
    assert host.file("/root/precious-dir/file").content_string == "keep\n"
    assert host.file("/root").is_directory and host.file("/root/precious-dir").user == "root"
    assert not host.file(f"{BASE}/alice.{job}").exists


@pytest.mark.parametrize("leftover", ["link", "directory"])
def test_a_leftover_at_the_job_path_is_not_reused(host: Any, leftover: str) -> None:
    """What an earlier killed job (or a job-id reset) left at <base>/<user>.<jobid>: a link to a
    root-owned directory, or a directory with another user's file. The new job gets a fresh, empty
    directory of its own, and root changed nothing at the link's target."""
    host.run("mkdir -p /root/victim && chmod 0755 /root/victim && echo keep > /root/victim/file")
    job = submit(
        host,
        "alice",
        'stat -c "STAT %U %a %F" "$SLURM_TMPDIR"\necho "ENTRIES $(ls -A "$SLURM_TMPDIR" | wc -l)"\n',
        hold=True,
        name=f"stale-{leftover}",
    )
    path = f"{BASE}/alice.{job}"
    if leftover == "link":
        assert host.run(f"ln -s /root/victim {path}").rc == 0
    else:
        assert host.run(f"mkdir {path} && echo old > {path}/old-data && chown -R bob {path}").rc == 0
    assert host.run(f"scontrol release {job}").rc == 0
    wait_gone(host, job)
    out = job_output(host, "alice", job, f"stale-{leftover}")
    assert field(out, "STAT") == "alice 700 directory"
    assert field(out, "ENTRIES") == "0"
    victim = host.file("/root/victim")
    assert victim.user == "root" and victim.mode == 0o755
    assert host.file("/root/victim/file").content_string == "keep\n"
    assert not host.file(path).exists


def test_a_job_killed_mid_staging_leaves_nothing_behind(host: Any) -> None:
    make_tree(host, "alice", "/home/alice/data/many", 20000, 1024)
    job = submit(host, "alice", 'dltune stage "$HOME/data/many" --workers 1\necho FINISHED\n', name="killed")
    partial = f"{BASE}/alice.{job}/.many.partial"
    seen = host.run(
        f'for i in $(seq 1200); do [ -d {partial} ] && [ -n "$(ls -A {partial})" ] && echo SEEN && break; '
        f"sleep 0.05; done; scancel {job}"
    )
    assert "SEEN" in seen.stdout, "staging never started"
    wait_gone(host, job)
    assert "FINISHED" not in job_output(host, "alice", job, "killed")
    assert not host.file(f"{BASE}/alice.{job}").exists


def test_staging_that_does_not_fit_is_refused_and_leaves_nothing_that_looks_complete(host: Any) -> None:
    make_tree(host, "alice", "/home/alice/data/many", 20000, 1024)
    host.run(
        "mkdir -p /mnt/small && (mountpoint -q /mnt/small || mount -t tmpfs -o size=4m tmpfs /mnt/small)"
    )
    host.run("chown alice /mnt/small")
    job = submit(
        host,
        "alice",
        'rc=0; dltune stage "$HOME/data/many" --to /mnt/small 2> "$HOME/small.err" || rc=$?\necho "RC $rc"\n',
        name="small",
    )
    wait_gone(host, job)
    assert field(job_output(host, "alice", job, "small"), "RC") == "1"
    assert "not enough room" in host.file("/home/alice/small.err").content_string
    assert host.run("ls -A /mnt/small").stdout.split() in ([], [".many.lock"])


def test_audit_outside_a_job_checks_the_node_wide_files_and_hooks(host: Any) -> None:
    _, results = audit_as_user(host, "--only", "env,staging")
    assert results[("staging.slurm_tmpdir", None)]["status"] == "skip"
    assert results[("staging.slurm_hooks", None)]["status"] == "pass"
    assert results[("env.cublas_workspace", None)]["status"] == "pass"
    files = [r for (i, _), r in results.items() if i == "env.node_files"]
    assert [r["status"] for r in files] == ["pass"] * 3
