"""Switching a held driver to another flavour or branch: holds released, the new one installed and
held, the replaced packages gone, the manifest updated, and a second run changes nothing.

Runs last in the verifier (file order): it changes the pinned node's driver. Marked slow (about five
minutes: two full driver installs): make test-slow runs it; make test installs and holds each node's
driver once, in converge, and plans this switch on a published listing
(tests/unit/test_nvidia_driver_plan_module.py: test_switching_to_open_modules_releases_the_holds...).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import SCENARIO, dpkg_status, run_playbook

from tests.molecule_support import only_on


@pytest.mark.slow
def test_switch_from_closed_to_open_modules_on_a_held_driver(host: Any) -> None:
    only_on(host, group="driver_pinned", why="the pinned node only")
    before = json.loads(host.file("/etc/dltune/expected.d/nvidia_driver.json").content_string)
    branch = before["branch"]
    closed = f"nvidia-headless-no-dkms-{branch}-server"
    assert dpkg_status(host)[closed] == "hi"

    switch = {"nvidia_driver_open": True}
    run = run_playbook(host, SCENARIO / "converge.yml", switch)
    assert run.rc == 0, run.failures
    status = dpkg_status(host)
    assert status.get(f"{closed}-open") == "hi"
    assert not status.get(closed, "").endswith("i"), "the closed flavour must be replaced"
    after = json.loads(host.file("/etc/dltune/expected.d/nvidia_driver.json").content_string)
    assert after["driver_package"] == f"nvidia-driver-{branch}-server-open"
    assert all(status.get(p) == "hi" for p in after["held_packages"])

    again = run_playbook(host, SCENARIO / "converge.yml", switch)
    assert (again.rc, again.changed) == (0, 0)
