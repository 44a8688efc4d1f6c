"""The driver the role installed is the one the real ubuntu-drivers offers for each synthetic GPU.

No GPU exists in the lab: each container carries a synthetic sysfs (real PCI ids and modaliases)
that ubuntu-drivers reads through UBUNTU_DRIVERS_SYS_DIR; the packages come from the real Ubuntu
archive. The kernel module cannot load in a container, so nothing here runs the driver itself.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import testinfra
from conftest import (
    SCENARIO,
    audit_as_user,
    branch_of,
    dpkg_status,
    gpgpu_offer,
    gpgpu_recommended,
    groups_of,
    run_playbook,
)

from tests.molecule_support import only_on


def expected_driver(host: Any) -> str:
    """What ubuntu-drivers recommends here and now (`list --gpgpu --recommended`), or, where that does
    not fit this node's switches, the recommended branch in the wanted flavour."""
    offer = gpgpu_offer(host)
    groups = groups_of(host)
    recommended = gpgpu_recommended(host)
    if "driver_auto" in groups:  # -server, open auto
        if "-server" in recommended:
            return recommended
        branch = branch_of(recommended)
        open_suffix = "-open" if recommended.endswith("-open") else ""
        return next(
            p
            for p in (f"nvidia-driver-{branch}-server{open_suffix}", f"nvidia-driver-{branch}-server")
            if p in offer
        )
    if "driver_old_gpu" in groups:  # non-server, open auto
        assert "-server" not in recommended, recommended
        return recommended
    # pinned 570 (transitional): the closed -server driver of the branch 570-server pulls in
    target = host.check_output(
        "apt-cache show --no-all-versions nvidia-driver-570-server | sed -n 's/^Depends: //p'"
    )
    return target.strip() if target.strip() in offer else "(570-server is no longer transitional)"


def test_installs_what_ubuntu_drivers_offers_for_this_gpu(host: Any, manifest: dict[str, Any]) -> None:
    driver = expected_driver(host)
    branch = branch_of(driver)
    suffix = driver.removeprefix(f"nvidia-driver-{branch}")
    status = dpkg_status(host)
    for package in (
        f"nvidia-headless-no-dkms-{branch}{suffix}",
        f"nvidia-utils-{branch}{suffix.removesuffix('-open')}",
    ):
        assert status.get(package, "").endswith("i"), (package, status.get(package))
    assert manifest["driver_package"] == driver
    assert manifest["branch"] == branch


def test_old_and_new_gpus_get_different_branches(host: Any, manifest: dict[str, Any]) -> None:
    """A K80 (device 102d) is not served by the branches an A100 gets: no fixed branch can pass."""
    only_on(host, group="driver_old_gpu", why="compared once, from the K80 node")
    a100 = testinfra.get_host(
        f"ansible://nvidia-driver-a100-jammy?ansible_inventory={os.environ['MOLECULE_INVENTORY_FILE']}"
    )
    a100_manifest = json.loads(a100.file("/etc/dltune/expected.d/nvidia_driver.json").content_string)
    assert manifest["branch"] != a100_manifest["branch"]
    assert manifest["driver_package"] not in gpgpu_offer(a100)


def test_transitional_pin_installs_and_records_its_real_branch(host: Any, manifest: dict[str, Any]) -> None:
    only_on(host, group="driver_pinned", why="the pinned node only")
    real = branch_of(expected_driver(host))
    assert manifest["pinned_branch"] == "570"
    assert manifest["branch"] == real != "570"
    installed = [p for p, s in dpkg_status(host).items() if s.endswith("i") and "-570" in p]
    assert installed == [], "the transitional packages themselves must not be installed"


def test_every_package_of_the_branch_is_held(host: Any, manifest: dict[str, Any]) -> None:
    status = dpkg_status(host)
    branch = manifest["branch"]
    of_branch = sorted(
        p
        for p, s in status.items()
        if s.endswith("i") and (p.startswith(("nvidia-", "libnvidia-")) and f"-{branch}" in p)
    )
    assert f"libnvidia-compute-{branch}" in " ".join(of_branch)
    assert of_branch == sorted(manifest["held_packages"])
    assert {p: status[p] for p in of_branch} == {p: "hi" for p in of_branch}
    assert set(of_branch) <= set(host.check_output("apt-mark showhold").split())


def test_nouveau_is_blacklisted_in_the_initramfs(host: Any) -> None:
    blacklist = host.file("/etc/modprobe.d/dltune-blacklist-nouveau.conf")
    assert "blacklist nouveau" in blacklist.content_string.splitlines()
    kernel = host.check_output("ls /lib/modules | sort -V | tail -1")
    listing = host.check_output(f"lsinitramfs /boot/initrd.img-{kernel}")
    assert "etc/modprobe.d/dltune-blacklist-nouveau.conf" in listing.splitlines()


def test_persistenced_is_enabled(host: Any) -> None:
    assert host.service("nvidia-persistenced").is_enabled


def test_driver_change_is_recorded_for_a_reboot_that_did_not_happen(host: Any) -> None:
    assert host.file("/run/dltune-molecule-boot-marker").exists, "the node was rebooted"
    assert host.file("/run/reboot-required").exists
    assert "nvidia_driver" in host.file("/run/reboot-required.pkgs").content_string.splitlines()


def test_audit_reports_the_driver_waiting_for_its_reboot(host: Any, manifest: dict[str, Any]) -> None:
    rc, results = audit_as_user(host, "--only", "driver,system")
    assert results[("driver.loaded", None)]["status"] == "warn", results[("driver.loaded", None)]
    assert "nvidia_driver" in results[("system.reboot_required", None)]["evidence"]["requested_by"]
    held = results[("driver.packages_held", None)]
    assert held["status"] == "pass", held
    assert rc == 0


def test_check_mode_plans_the_prebuilt_kernel_modules_ubuntu_drivers_names(host: Any) -> None:
    """The default kernel_modules=prebuilt cannot be installed here (the mirror 404s on those debs);
    its plan is checked in a --check run: the package ubuntu-drivers names, and nothing installed."""
    only_on(host, group="driver_auto", why="the auto node only")
    listing = host.check_output(
        "UBUNTU_DRIVERS_SYS_DIR=/srv/fake-gpu-sys ubuntu-drivers list --gpgpu 2>/dev/null"
    )
    wanted = expected_driver(host)
    line = next(line for line in listing.splitlines() if line.split(",")[0] == wanted)
    modules = line.split("kernel modules provided by ")[1].rstrip(")")
    assert modules.startswith("linux-modules-nvidia-"), line
    before = dpkg_status(host)
    run = run_playbook(
        host, SCENARIO / "converge.yml", {"nvidia_driver_kernel_modules": "prebuilt"}, check=True
    )
    assert run.rc == 0, run.failures
    plan = run.results["Plan the driver from ubuntu-drivers' offer for these GPUs"]
    assert modules in plan["packages"]
    assert modules in plan["missing"]
    assert run.results["Ensure the driver packages are installed"]["changed"]
    assert dpkg_status(host) == before


@pytest.mark.slow
def test_auto_follows_ubuntu_drivers_recommendation_for_every_model(host: Any) -> None:
    """V100, A100, H100, L40S and a K80 on the real archive, with a linux-image metapackage installed:
    `auto` with the default settings (-server, open auto, prebuilt modules) installs what `ubuntu-drivers
    list --gpgpu --recommended` prints, or that branch's -server variant where the recommendation is
    not a -server driver, or refuses with the documented message (no -server driver, no prebuilt
    modules) — never another branch.

    Marked slow (two ubuntu-drivers runs per model, about four minutes here): make test-slow runs it;
    make test has the module's decisions on published ubuntu-drivers listings
    (tests/unit/test_nvidia_driver_plan_module.py) and the real archive's choice for the three nodes
    here (A100, K80, a pinned H100)."""
    only_on(host, group="driver_auto", why="planned once, on the auto node")
    run = run_playbook(host, SCENARIO / "plan_models.yml", {})
    assert run.rc == 0, run.failures
    recommended = run.results["Ask ubuntu-drivers for its own recommendation for each model"]["results"]
    plans = run.results["Plan the driver for each model with the role's defaults"]["results"]
    seen = {}
    for asked, plan in zip(recommended, plans, strict=True):
        model = asked["item"]["key"]
        lines = [line for line in asked["stdout"].splitlines() if line.startswith("nvidia-driver-")]
        assert len(lines) == 1, (model, asked["stdout"])
        choice = lines[0].split()[0].rstrip(",")
        branch = branch_of(choice)
        if "driver_package" not in plan:  # the module refused (failed_when: false keeps the loop going)
            message = str(plan.get("msg", ""))
            assert branch in message or "-server" in message, (model, choice, message)
            assert "nvidia_driver_" in message, (model, message)
            seen[model] = f"refused: {message[:80]}"
            continue
        assert plan["recommended"] == choice, (model, plan["recommended"], choice)
        if "-server" in choice:
            assert plan["driver_package"] == choice, (model, plan["driver_package"], choice)
        else:
            assert plan["branch"] == branch and plan["server"], (model, plan["driver_package"], choice)
        seen[model] = plan["driver_package"]
    assert set(seen) == {"v100", "a100", "h100", "l40s", "k80"}, seen
    print("auto per model:", seen)
