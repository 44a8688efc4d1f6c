"""slurm_tmpdir_state=absent on the real Slurm: slurm.conf names the site's own Prolog/Epilog again
(and no TaskProlog, which the site never had), the daemons run them, jobs get no $SLURM_TMPDIR, our
programs and manifest fragment are gone; a second run changes nothing; present restores everything.
Runs last in the scenario (file order) and leaves it as converge made it."""

from __future__ import annotations

from typing import Any

from conftest import SCENARIO, field, job_output, run_playbook, submit, wait_gone

ROLLBACK = {"slurm_tmpdir_state": "absent"}


def test_rollback_gives_slurm_its_site_hooks_back_and_reapplies(host: Any) -> None:
    applied = host.file("/etc/slurm/slurm.conf").content_string
    try:
        run = run_playbook(host, SCENARIO / "bad_input.yml", ROLLBACK)
        assert run.rc == 0, run.failures
        conf = host.file("/etc/slurm/slurm.conf").content_string
        assert "Prolog=/etc/slurm/site-prolog.sh" in conf.splitlines()
        assert "Epilog=/etc/slurm/site-epilog.sh" in conf.splitlines()
        assert "TaskProlog" not in conf and "/etc/slurm/dltune" not in conf
        assert not host.file("/etc/slurm/dltune").exists
        assert not host.file("/etc/dltune/expected.d/slurm_tmpdir.json").exists
        assert host.file("/localscratch").is_directory

        job = submit(host, "bob", 'echo "DIR ${SLURM_TMPDIR:-unset}"\n', name="rolled-back")
        wait_gone(host, job)
        assert field(job_output(host, "bob", job, "rolled-back"), "DIR") == "unset"
        site_log = host.file("/var/log/slurm/site-hooks.log").content_string.split("\n")
        assert f"prolog {job}" in site_log and f"epilog {job}" in site_log
        assert host.run("sinfo -h -o %T").stdout.strip() in ("idle", "mixed")

        again = run_playbook(host, SCENARIO / "bad_input.yml", ROLLBACK)
        assert again.rc == 0 and again.changed == 0, again.results
    finally:
        restored = run_playbook(host, SCENARIO / "bad_input.yml", {})
    assert restored.rc == 0, restored.failures
    # The same settings (the re-added TaskProlog line now comes last).
    assert sorted(host.file("/etc/slurm/slurm.conf").content_string.splitlines()) == sorted(
        applied.splitlines()
    )
    job = submit(host, "bob", 'echo "DIR ${SLURM_TMPDIR:-unset}"\n', name="reapplied")
    wait_gone(host, job)
    assert field(job_output(host, "bob", job, "reapplied"), "DIR") == f"/localscratch/bob.{job}"
