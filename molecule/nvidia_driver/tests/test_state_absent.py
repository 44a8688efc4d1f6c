"""nvidia_driver_state=absent on the K80 node: the recorded branch's packages are unheld and purged
(real apt, real dpkg), the nouveau blacklist leaves /etc and the rebuilt initramfs, the manifest
fragment goes, packages that are not the driver's stay; a second rollback changes nothing.

Runs last for this node (file order) and leaves it without a driver: reinstalling after a purge is the
first install again, which converge already tested on this node (it would cost CI minutes more)."""

from __future__ import annotations

import json
import re
from typing import Any

from conftest import SCENARIO, dpkg_status, run_playbook

from tests.molecule_support import only_on

ROLLBACK = {"nvidia_driver_state": "absent"}
BLACKLIST = "/etc/modprobe.d/dltune-blacklist-nouveau.conf"
FRAGMENT = "/etc/dltune/expected.d/nvidia_driver.json"


def branch_packages(status: dict[str, str], branch: str) -> dict[str, str]:
    """Installed ("ii") or held ("hi") driver packages of the branch, with their dpkg state."""
    driver = re.compile(rf"^(lib)?nvidia-.*-{branch}(-|\.|$)")
    return {name: state for name, state in status.items() if driver.match(name) and state[1] == "i"}


def in_initramfs(host: Any, path: str) -> bool:
    kernel = host.check_output("ls /lib/modules | sort -V | tail -1")
    return path.lstrip("/") in host.check_output(f"lsinitramfs /boot/initrd.img-{kernel}").splitlines()


def test_rollback_purges_the_recorded_driver(host: Any) -> None:
    only_on(host, group="driver_old_gpu", why="the K80 node only")
    before = json.loads(host.file(FRAGMENT).content_string)
    branch = before["branch"]
    installed = branch_packages(dpkg_status(host), branch)
    assert set(before["held_packages"]) <= set(installed) and set(installed.values()) == {"hi"}, installed
    assert in_initramfs(host, BLACKLIST)
    run = run_playbook(host, SCENARIO / "converge.yml", ROLLBACK)
    assert run.rc == 0, run.failures
    status = dpkg_status(host)
    assert branch_packages(status, branch) == {}, "every package of the branch must be purged"
    assert all(status.get(name) == "ii" for name in ("linux-image-generic", "ubuntu-drivers-common"))
    assert not host.file(BLACKLIST).exists
    assert not in_initramfs(host, BLACKLIST), "the initramfs must be rebuilt without the blacklist"
    assert not host.file(FRAGMENT).exists
    assert not host.exists("nvidia-smi")

    again = run_playbook(host, SCENARIO / "converge.yml", ROLLBACK)
    assert (again.rc, again.changed) == (0, 0), again.results
