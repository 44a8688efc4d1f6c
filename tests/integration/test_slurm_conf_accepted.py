"""What dltune's two slurm.conf editors write, read by real Slurm (21.08, the lab's Slurm image, in a
throwaway container of its own; the lab need not be up, its images must be built: `make lab`).

- Every real slurm.conf of tests/fixtures/real/slurm_conf and its generated variants (the unit test
  tests/unit/test_slurm_conf_model.py round-trips the same set byte for byte), after both editors'
  `present`: Slurm's own parser (`SLURM_CONF=... scontrol -V` reads and validates the whole file and
  exits) reports nothing new: a file the site's Slurm read, it still reads; a file it rejected (a
  published fragment, plugins not installed here) gets exactly the site's errors, never one more.
- A lab-sized slurm.conf in each variant, after `present`: slurmctld starts with it and `scontrol show
  config` shows dltune's values and the site's own (its Epilog chained, its ClusterName).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.real_corpus import samples
from tests.unit.test_slurm_conf_model import HEALTHCHECK, HOOKS, healthcheck_present, hooks_present, model
from tests.unit.test_slurm_conf_model import variants as site_variants

IMAGE = os.environ.get("DLTUNE_LAB_IMAGE_REPO", "dltune-lab/ubuntu") + "-slurm:22.04"
pytestmark = pytest.mark.lab

LAB_CONF = """\
ClusterName=lab
SlurmctldHost=@HOST@
SlurmUser=root
StateSaveLocation=/tmp/state
SlurmctldPidFile=/tmp/slurmctld.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
Epilog=/etc/slurm/site-epilog
NodeName=n[1-2] CPUs=1 State=UNKNOWN
PartitionName=p Nodes=n[1-2] Default=YES
"""

RUN = r"""
set -u
cd /cases
# Slurm retries an Include that is missing for a minute: the published files' Includes exist, empty.
while read -r path; do mkdir -p "$(dirname "$path")"; : > "$path"; done < includes.txt
for case in parse/*/; do
  for which in site written; do
    SLURM_CONF="$PWD/$case$which.conf" timeout 60 scontrol -V > /dev/null 2> "$case$which.err"
    echo $? > "$case$which.rc"
  done
done
mkdir -p /tmp/state /run/munge && chown munge /run/munge
runuser -u munge -- munged --force
# The nodes resolve: slurmctld tries a name 5 times a second apart, 10 s a start for n1 and n2.
echo "127.0.0.1 n1 n2" >> /etc/hosts
for case in daemon/*/; do
  sed "s/@HOST@/$(hostname)/" "$case/written.conf" > "$case/slurm.conf"
  rm -f /tmp/slurmctld.pid
  SLURM_CONF="$PWD/$case/slurm.conf" slurmctld 2> "$case/slurmctld.err"
  for _ in $(seq 1 40); do
    SLURM_CONF="$PWD/$case/slurm.conf" scontrol show config > "$case/config" 2>/dev/null && break
    sleep 0.25
  done
  [ -s /tmp/slurmctld.pid ] && kill "$(cat /tmp/slurmctld.pid)"
  for _ in $(seq 1 40); do pgrep -x slurmctld > /dev/null || break; sleep 0.25; done
done
chmod -R a+rwX /cases
"""


NODES = b"NodeName=n[1-2] CPUs=1 State=UNKNOWN\n"


def daemon_variants() -> dict[str, bytes]:
    """The lab-sized file in each variant Slurm 21.08 starts with (it rejects two global settings on
    one line even in the site's own file: the parse cases hold that case to the site's errors)."""
    lab = LAB_CONF.encode()
    chosen = {name: data for name, data in site_variants(lab).items() if name != "several settings on a line"}
    chosen["an Include holding the nodes"] = lab.replace(NODES, b"Include nodes.inc\n")
    return chosen


def written(path: str, site: bytes) -> bytes:
    """slurm.conf after both editors' present (the health check's keys, then slurm_tmpdir's hooks,
    which a glob of the site's hooks makes it refuse)."""
    data, _record = healthcheck_present(path, site, {})
    try:
        data, _record = hooks_present(path, data, {})
    except model.ConfError as exc:
        assert "is a list or a glob" in str(exc), exc
    return data


def normalized(errors: str) -> set[str]:
    """Slurm's complaints without what differs between the two files by design: their names, line
    numbers (a continued value replaced is one line less) and the text quoted from a line it could
    not parse (the site's line holding dltune's value now)."""
    return {
        re.sub(r'(Parse error in file FILE line N: )".*"$', r"\1...", re.sub(r"\bline \d+", "line N", line))
        for line in re.sub(r"/cases/parse/[^/]+/(site|written)\.conf", "FILE", errors).splitlines()
        if line.strip()
    }


@pytest.fixture(scope="module")
def slurm_read(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if (
        not shutil.which("docker")
        or subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False).returncode
    ):
        if os.environ.get("DLTUNE_LAB_REQUIRED") == "1":
            pytest.fail(f"the lab's Slurm image {IMAGE} is not built (make lab)")
        pytest.skip(f"the lab's Slurm image {IMAGE} is not built (make lab)")
    cases = tmp_path_factory.mktemp("slurm-conf-cases")
    includes: set[str] = set()
    mp = pytest.MonkeyPatch()
    # The files the published ones Include were not published: read (and made) empty.
    mp.setattr(model, "read_file", lambda path: includes.add(path) or b"")
    try:
        for sample in samples("slurm_conf"):
            for variant, site in site_variants(sample.body.encode()).items():
                case = cases / "parse" / f"{sample.name}--{variant.replace(' ', '-')}"
                case.mkdir(parents=True)
                path = f"/cases/parse/{case.name}/written.conf"
                (case / "site.conf").write_bytes(site)
                (case / "written.conf").write_bytes(written(path, site))
    finally:
        mp.undo()
    (cases / "includes.txt").write_text("".join(f"{path}\n" for path in sorted(includes)))
    for variant, site in daemon_variants().items():
        case = cases / "daemon" / variant.replace(" ", "-")
        case.mkdir(parents=True)
        (case / "nodes.inc").write_bytes(NODES)
        # Here and in the container alike, the Include is read beside the file.
        (case / "written.conf").write_bytes(written(str(case / "slurm.conf"), site))
    (cases / "run.sh").write_text(RUN)
    done = subprocess.run(
        ["docker", "run", "--rm", "-v", f"{cases}:/cases", IMAGE, "bash", "/cases/run.sh"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return cases


def parse_cases() -> list[str]:
    return [
        f"{sample.name}--{variant.replace(' ', '-')}"
        for sample in samples("slurm_conf")
        for variant in site_variants(b"")
    ]


@pytest.mark.parametrize("case", parse_cases())
def test_slurms_parser_reads_what_dltune_wrote_as_it_read_the_sites_file(slurm_read: Path, case: str) -> None:
    results = slurm_read / "parse" / case
    site_rc, site_errors = (results / "site.rc").read_text().strip(), (results / "site.err").read_text()
    rc, errors = (results / "written.rc").read_text().strip(), (results / "written.err").read_text()
    if site_rc == "0":
        assert rc == "0", errors
    else:
        assert normalized(errors) == normalized(site_errors), errors


@pytest.mark.parametrize("variant", list(daemon_variants()))
def test_slurmctld_starts_with_what_dltune_wrote_and_shows_both_its_values_and_the_sites(
    slurm_read: Path, variant: str
) -> None:
    results = slurm_read / "daemon" / variant.replace(" ", "-")
    config = (results / "config").read_text() if (results / "config").exists() else ""
    assert config, (results / "slurmctld.err").read_text()
    shown = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition("=") for line in config.splitlines())
    )
    assert shown["HealthCheckProgram"] == HEALTHCHECK["HealthCheckProgram"]
    assert shown["HealthCheckInterval"] == f"{HEALTHCHECK['HealthCheckInterval']} sec"
    assert shown["HealthCheckNodeState"].replace(" ", "") in ("ANY,CYCLE", "CYCLE,ANY")
    assert shown["Prolog"] == HOOKS["prolog"] and shown["Epilog"] == HOOKS["epilog"]
    assert shown["TaskProlog"] == HOOKS["task_prolog"]
    assert "Alloc" in shown["PrologFlags"]
    assert shown["ClusterName"] == "lab"
