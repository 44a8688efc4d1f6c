"""The nvidia_driver role's decisions (plugins/modules/nvidia_driver_plan.py), on real
ubuntu-drivers, apt-cache and apt-get outputs captured in the lab's Ubuntu containers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, load_role_module

pytest.importorskip("ansible")


plan = load_role_module("plugins/modules/nvidia_driver_plan.py")

# jammy, A100, linux-image-generic installed
A100_WITH_KERNEL = """\
nvidia-driver-580-server-open, (kernel modules provided by linux-modules-nvidia-580-server-open-generic)
nvidia-driver-580-server, (kernel modules provided by linux-modules-nvidia-580-server-generic)
nvidia-driver-580-open, (kernel modules provided by linux-modules-nvidia-580-open-generic)
nvidia-driver-580, (kernel modules provided by linux-modules-nvidia-580-generic)
"""
# jammy, A100, no kernel package: not filtered by prebuilt modules
A100_NO_KERNEL = """\
ERROR:root:aplay command not found
nvidia-driver-580-server-open
nvidia-driver-470-server
nvidia-driver-580-server
nvidia-driver-470
nvidia-driver-545
"""
K80_WITH_KERNEL = "nvidia-driver-390, (kernel modules provided by linux-modules-nvidia-390-generic)\n"
TRANSITIONAL_570 = """\
Package: nvidia-driver-570-server
Version: 570.211.01-0ubuntu1.24.04.1
Depends: nvidia-driver-580-server
Description: Transitional package for nvidia-driver-580-server
"""
REAL_580 = """\
Package: nvidia-driver-580-server
Depends: libnvidia-gl-580-server (= 580.178.04-0ubuntu0.22.04.1), nvidia-dkms-580-server (<= 580.178.04-1)
Modaliases: nvidia(pci:v000010DEd00001E04sv*sd*bc03sc*i*, pci:v000010DEd000020B0sv*sd*bc03sc*i*)
"""


def test_candidates_are_parsed_best_first_with_their_module_package() -> None:
    found = plan.parse_gpgpu_list(A100_WITH_KERNEL)
    assert [c.package for c in found] == [
        "nvidia-driver-580-server-open",
        "nvidia-driver-580-server",
        "nvidia-driver-580-open",
        "nvidia-driver-580",
    ]
    assert found[0].modules_package == "linux-modules-nvidia-580-server-open-generic"
    assert (found[0].branch, found[0].server, found[0].open) == ("580", True, True)
    assert [c.package for c in plan.parse_gpgpu_list(A100_NO_KERNEL)][:2] == [
        "nvidia-driver-580-server-open",
        "nvidia-driver-470-server",
    ]


# jammy, A100, linux-image-generic installed: ubuntu-drivers' own choice
A100_RECOMMENDED = "nvidia-driver-580-server-open linux-modules-nvidia-580-server-open-generic\n"


@pytest.mark.parametrize(
    ("listing", "server", "open_modules", "expected"),
    [
        (A100_WITH_KERNEL, True, "auto", "nvidia-driver-580-server-open"),
        (A100_WITH_KERNEL, True, "false", "nvidia-driver-580-server"),
        (A100_WITH_KERNEL, False, "auto", "nvidia-driver-580-open"),
        (A100_WITH_KERNEL, False, "false", "nvidia-driver-580"),
    ],
)
def test_auto_takes_ubuntu_drivers_recommendation_then_its_branch_in_the_wanted_flavour(
    listing: str, server: bool, open_modules: str, expected: str
) -> None:
    recommended = plan.recommendation(A100_RECOMMENDED)
    chosen, notes = plan.choose(
        plan.parse_gpgpu_list(listing), "auto", server, open_modules, None, recommended
    )
    assert chosen.package == expected
    assert "nvidia-driver-580-server-open" in notes[0]
    assert (
        chosen.modules_package
        == f"linux-modules-{expected.removeprefix('nvidia-driver-').join(['nvidia-', '-generic'])}"
    )


def test_the_listing_order_never_decides() -> None:
    """ubuntu-drivers prints a dictionary: every order of the same offer gives the same choice, with and
    without a recommendation."""
    import random

    rng = random.Random(7)  # noqa: S311 (a shuffle, not a secret)
    for listing, recommended_text in ((A100_WITH_KERNEL, A100_RECOMMENDED), (A100_NO_KERNEL, None)):
        lines = [line for line in listing.splitlines() if line.startswith("nvidia-")]
        recommended = plan.recommendation(recommended_text)
        chosen = set()
        for _ in range(30):
            rng.shuffle(lines)
            for server, open_modules in ((True, "auto"), (True, "false"), (False, "auto")):
                pick, _ = plan.choose(
                    plan.parse_gpgpu_list("\n".join(lines)), "auto", server, open_modules, None, recommended
                )
                chosen.add((server, open_modules, pick.package))
        assert len(chosen) == 3, chosen


def test_without_a_recommendation_the_highest_branch_of_the_flavour_wins() -> None:
    chosen, notes = plan.choose(plan.parse_gpgpu_list(A100_NO_KERNEL), "auto", True, "auto")
    assert chosen.package == "nvidia-driver-580-server"
    assert "no recommendation" in notes[0]
    chosen, _ = plan.choose(plan.parse_gpgpu_list(A100_NO_KERNEL), "auto", True, "true")
    assert chosen.package == "nvidia-driver-580-server-open"
    chosen, _ = plan.choose(plan.parse_gpgpu_list(K80_WITH_KERNEL), "auto", False, "auto")
    assert chosen.package == "nvidia-driver-390"


def test_a_recommendation_whose_branch_the_flavour_lacks_is_refused() -> None:
    recommended = plan.recommendation("nvidia-driver-590-open linux-modules-nvidia-590-open-generic\n")
    with pytest.raises(plan.PlanError, match="nvidia_driver_server or nvidia_driver_open"):
        plan.choose(plan.parse_gpgpu_list(A100_WITH_KERNEL), "auto", True, "auto", None, recommended)


def test_recommendation_formats_and_old_releases() -> None:
    """--recommended prints 'PKG MODULES'; an old ubuntu-drivers that ignores the option prints the whole
    offer (not a recommendation); one that lacks it fails (None is passed)."""
    rec = plan.recommendation("nvidia-driver-470 linux-modules-nvidia-470-generic-hwe-20.04\n")
    assert rec and (rec.branch, rec.server, rec.modules_package) == (
        "470",
        False,
        "linux-modules-nvidia-470-generic-hwe-20.04",
    )
    assert plan.recommendation(A100_WITH_KERNEL) is None
    assert plan.recommendation(None) is None
    assert plan.recommendation("") is None
    none_line = plan.parse_gpgpu_list("nvidia-driver-535-server, (kernel modules provided by None)\n")
    assert none_line[0].package == "nvidia-driver-535-server" and none_line[0].modules_package is None


def test_a_dkms_only_offer_is_not_prebuilt() -> None:
    dkms_only = plan.parse_gpgpu_list("nvidia-driver-545, (kernel modules provided by nvidia-dkms-545)\n")[0]
    assert not dkms_only.prebuilt
    _, problems = plan.wanted_packages(dkms_only, "prebuilt", False)
    assert problems and "DKMS" in problems[0] and "nvidia_driver_kernel_modules: dkms" in problems[0]
    packages, problems = plan.wanted_packages(dkms_only, "dkms", False)
    assert problems == [] and "nvidia-dkms-545" in packages


def test_no_fitting_flavour_is_a_failure_naming_the_switches() -> None:
    with pytest.raises(plan.PlanError, match=r"offered: nvidia-driver-390.*nvidia_driver_server"):
        plan.choose(plan.parse_gpgpu_list(K80_WITH_KERNEL), "auto", True, "auto")


def test_pinned_branch_not_offered_fails_and_lists_the_offer() -> None:
    with pytest.raises(plan.PlanError, match=r"nvidia_driver_branch=470 is not offered.*580-server-open"):
        plan.choose(plan.parse_gpgpu_list(A100_WITH_KERNEL), "470", True, "auto")


def test_transitional_pin_is_followed_to_what_it_installs() -> None:
    assert (
        plan.transitional_target("nvidia-driver-570-server", TRANSITIONAL_570) == "nvidia-driver-580-server"
    )
    assert plan.transitional_target("nvidia-driver-580-server", REAL_580) is None
    chosen, notes = plan.choose(
        plan.parse_gpgpu_list(A100_WITH_KERNEL),
        "570",
        True,
        "false",
        {"nvidia-driver-570-server": "nvidia-driver-580-server"},
    )
    assert chosen.package == "nvidia-driver-580-server"
    assert "transitional" in notes[0] and "580" in notes[0]


def test_packages_per_kernel_module_source() -> None:
    chosen = plan.parse_gpgpu_list(A100_WITH_KERNEL)[0]
    assert plan.wanted_packages(chosen, "prebuilt", False) == (
        [
            "nvidia-headless-no-dkms-580-server-open",
            "nvidia-utils-580-server",
            "linux-modules-nvidia-580-server-open-generic",
        ],
        [],
    )
    assert plan.wanted_packages(chosen, "dkms", True)[0][2:] == [
        "nvidia-dkms-580-server-open",
        "nvidia-fabricmanager-580",
    ]
    unfiltered = plan.parse_gpgpu_list(A100_NO_KERNEL)[0]
    _packages, problems = plan.wanted_packages(unfiltered, "prebuilt", False)
    assert problems and "nvidia_driver_kernel_modules=prebuilt" in problems[0]


def test_hold_set_takes_every_installed_or_incoming_package_of_the_branch() -> None:
    dpkg = plan.parse_dpkg_status(
        "libnvidia-compute-580-server\t580.178.04-0ubuntu0.22.04.1\tii \n"
        "libnvidia-compute-470-server\t470.256.02-0ubuntu0.22.04.6\thi \n"
        "nvidia-firmware-580-server-580.178.04\t580.178.04-0ubuntu0.22.04.1\tii \n"
        "libc6\t2.35-0ubuntu3.8\tii \n"
        "nvidia-utils-580-server\t580.178.04-0ubuntu0.22.04.1\trc \n"
    )
    hold = plan.hold_set(
        "580", ["nvidia-utils-580-server"], dpkg, ["nvidia-kernel-common-580-server", "libpciaccess0"]
    )
    assert hold == [
        "libnvidia-compute-580-server",
        "nvidia-firmware-580-server-580.178.04",
        "nvidia-kernel-common-580-server",
        "nvidia-utils-580-server",
    ]


def test_only_the_packages_dpkg_does_not_hold_yet_are_held_again() -> None:
    """Held ("hi"), installed but not held ("ii"), still to install (absent): the last two."""
    dpkg = plan.parse_dpkg_status(
        "libnvidia-compute-580-server\t580.178.04-0ubuntu0.22.04.1\thi \n"
        "nvidia-utils-580-server\t580.178.04-0ubuntu0.22.04.1\tii \n"
    )
    hold = ["libnvidia-compute-580-server", "nvidia-kernel-common-580-server", "nvidia-utils-580-server"]
    assert plan.not_yet_held(dpkg, hold) == ["nvidia-kernel-common-580-server", "nvidia-utils-580-server"]
    assert plan.not_yet_held(dpkg, ["libnvidia-compute-580-server"]) == []


def test_simulation_lists_installs_and_removals() -> None:
    install, remove = plan.parse_simulation(
        "NOTE: This is only a simulation!\n"
        "Remv nvidia-utils-470-server [470.256.02-0ubuntu0.22.04.6]\n"
        "Inst libnvidia-compute-580-server (580.178.04-0ubuntu0.22.04.1 Ubuntu:22.04/jammy-updates [amd64])\n"
        "Conf libnvidia-compute-580-server (580.178.04-0ubuntu0.22.04.1 Ubuntu:22.04/jammy-updates [amd64])\n"
    )
    assert install == ["libnvidia-compute-580-server"]
    assert remove == ["nvidia-utils-470-server"]


def test_gpus_and_nvswitches_are_counted_from_sysfs(tmp_path: Path) -> None:
    subprocess.run(
        ["sh", str(REPO_ROOT / "tests/lab/make-fake-gpu-sysfs.sh"), str(tmp_path)]
        + ["20b0:1450"] * 8
        + ["1af1:0000:068000"] * 6,
        check=True,
    )
    assert plan.count_pci_devices(tmp_path) == (8, 6)
    assert plan.count_pci_devices(tmp_path / "missing") == (0, 0)


def test_versions_that_decide_whether_a_reboot_is_needed() -> None:
    simulation = (
        "Inst nvidia-utils-580-server (580.178.04-0ubuntu0.22.04.1 Ubuntu:22.04/jammy-updates [amd64])\n"
    )
    assert plan.simulated_version(simulation, "nvidia-utils-580-server") == "580.178.04-0ubuntu0.22.04.1"
    assert plan.simulated_version(simulation, "nvidia-utils-470-server") is None
    assert plan.upstream_version("580.178.04-0ubuntu0.22.04.1") == "580.178.04"
    proc = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs@U16)\n"
    assert plan.loaded_module_version(proc) == "570.86.15"
    assert plan.loaded_module_version(None) is None


def test_switching_flavour_releases_and_drops_the_replaced_packages() -> None:
    """Closed 580-server held -> open 580-server: apt removes the closed headless package, whose hold
    must be released first and which must not be held again."""
    dpkg = plan.parse_dpkg_status(
        "nvidia-headless-no-dkms-580-server\t580.178.04-0ubuntu0.22.04.1\thi \n"
        "nvidia-kernel-source-580-server\t580.178.04-0ubuntu0.22.04.1\thi \n"
        "libnvidia-compute-580-server\t580.178.04-0ubuntu0.22.04.1\thi \n"
        "libnvidia-compute-470-server\t470.256.02-0ubuntu0.22.04.6\thi \n"
        "libc6\t2.35-0ubuntu3.8\thi \n"
    )
    wanted = ["nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server"]
    to_install = ["nvidia-kernel-source-580-server-open", "nvidia-headless-no-dkms-580-server-open"]
    to_remove = ["nvidia-headless-no-dkms-580-server", "nvidia-kernel-source-580-server"]
    hold = plan.hold_set("580", wanted, dpkg, to_install, to_remove)
    assert hold == [
        "libnvidia-compute-580-server",
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-kernel-source-580-server-open",
        "nvidia-utils-580-server",
    ]
    assert plan.holds_to_release(dpkg, hold) == [
        "libnvidia-compute-470-server",
        "nvidia-headless-no-dkms-580-server",
        "nvidia-kernel-source-580-server",
    ]


def test_rollback_lists_only_the_installed_packages_of_the_recorded_branch() -> None:
    """What state=absent purges: installed (or held) packages of the branch, nothing of another branch,
    nothing removed-but-configured, nothing outside the driver's package families."""
    dpkg = plan.parse_dpkg_status(
        "libnvidia-compute-580-server\t580.178.04-0ubuntu0.22.04.1\thi \n"
        "nvidia-utils-580-server\t580.178.04-0ubuntu0.22.04.1\tii \n"
        "nvidia-firmware-580-server-580.178.04\t580.178.04-0ubuntu0.22.04.1\thi \n"
        "linux-modules-nvidia-580-server-generic\t6.8.0-90.91\thi \n"
        "libnvidia-compute-470-server\t470.256.02-0ubuntu0.22.04.6\thi \n"
        "nvidia-kernel-common-580-server\t580.178.04-0ubuntu0.22.04.1\trc \n"
        "libc6\t2.35-0ubuntu3.8\tii \n"
        "python3-580-tools\t1.0\tii \n"
    )
    installed, held = plan.installed_branch_packages(dpkg, "580")
    assert installed == [
        "libnvidia-compute-580-server",
        "linux-modules-nvidia-580-server-generic",
        "nvidia-firmware-580-server-580.178.04",
        "nvidia-utils-580-server",
    ]
    assert held == [
        "libnvidia-compute-580-server",
        "linux-modules-nvidia-580-server-generic",
        "nvidia-firmware-580-server-580.178.04",
    ]
    assert plan.installed_branch_packages(dpkg, "535") == ([], [])
