"""The nvidia_driver_plan module (plugins/modules/nvidia_driver_plan.py) run for real, as
Ansible's own unit tests run a module: its arguments in ansible.module_utils.basic._ANSIBLE_ARGS, its
JSON result read from stdout after the SystemExit.

The commands cannot run here (no GPU, no ubuntu-drivers, no NVIDIA archive), so the lowest boundary is
faked: AnsibleModule.run_command answers each argv the module runs. ubuntu-drivers answers with the real
listings of tests/fixtures/real/ubuntu_drivers and the lab captures of tests/unit/test_nvidia_driver_plan.py
(used verbatim); dpkg-query, apt-cache show and apt-get -s answer in the formats captured there. Any
other argv fails the test, and every call's argv and environment are recorded. The loaded kernel module
is read from /proc/driver/nvidia/version by loaded_module(), which cannot be pointed elsewhere: that one
path is answered (with the real samples of tests/fixtures/real/nvidia_version) by patching
Path.read_text, and any other read under /proc or /sys fails the test. GPUs and NVSwitches are counted
from a sysfs tree under tmp_path (the module's sys_dir).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_role_module
from tests.fabric_tree import pci_device
from tests.real_corpus import CORPUS, load
from tests.unit.test_nvidia_driver_plan import (
    A100_NO_KERNEL,
    A100_RECOMMENDED,
    A100_WITH_KERNEL,
    K80_WITH_KERNEL,
    REAL_580,
    TRANSITIONAL_570,
)

basic = pytest.importorskip("ansible.module_utils.basic")
plan = load_role_module("plugins/modules/nvidia_driver_plan.py")

Answer = tuple[int, str, str]

LIST = ["ubuntu-drivers", "list", "--gpgpu"]
RECOMMENDED = [*LIST, "--recommended"]
DPKG_QUERY = ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"]
APT_SHOW = ["apt-cache", "show", "--no-all-versions"]
SIMULATE = ["apt-get", "install", "-s", "--no-install-recommends", "--ignore-hold"]
# An ubuntu-drivers without `list --recommended` (click's usage error), and apt-cache on a package that
# no configured apt source has.
NO_RECOMMENDED_OPTION: Answer = (
    2,
    "",
    "Usage: ubuntu-drivers list [OPTIONS]\nTry 'ubuntu-drivers list --help' for help.\n\n"
    "Error: no such option: --recommended\n",
)
SIMULATION_NOTE = (
    "NOTE: This is only a simulation!\n"
    "      apt-get needs root privileges for real execution.\n"
    "      Keep also in mind that locking is deactivated,\n"
    "      so don't depend on the relevance to the real current situation!\n"
)
JAMMY = "Ubuntu:22.04/jammy-updates [amd64]"
V580 = "580.178.04-0ubuntu0.22.04.1"
NOTHING_OF_NVIDIA = "libc6\t2.35-0ubuntu3.8\tii \nlibpciaccess0\t0.16-3\tii \n"


def real(kind: str, name: str) -> str:
    return load(CORPUS / kind / f"{name}.txt").body


def offered_in(listing: str) -> list[str]:
    """The driver packages of a listing, in its order (read here without the module's parser)."""
    return [
        line.split(",")[0].split()[0] for line in listing.splitlines() if line.startswith("nvidia-driver-")
    ]


def driver_stanza(package: str) -> str:
    """apt-cache show of a real (not transitional) driver package: it names the GPUs it drives."""
    return f"Package: {package}\nModaliases: nvidia(pci:v000010DEd000020B0sv*sd*bc03sc*i*)\n"


@dataclass
class Node:
    """What the node's commands answer: argv -> (rc, stdout, stderr)."""

    listing: str = ""
    recommended: Answer = NO_RECOMMENDED_OPTION
    dpkg: str = NOTHING_OF_NVIDIA
    apt: dict[str, str] = field(default_factory=dict)
    unknown: frozenset[str] = frozenset()
    simulation: Answer | None = None
    listing_answer: Answer | None = None
    dpkg_answer: Answer | None = None
    calls: list[tuple[list[str], dict[str, str] | None]] = field(default_factory=list)

    def answer(self, argv: list[str]) -> Answer:
        if argv == LIST:
            return self.listing_answer or (0, self.listing, "")
        if argv == RECOMMENDED:
            return self.recommended
        if argv == DPKG_QUERY:
            return self.dpkg_answer or (0, self.dpkg, "")
        if argv[:3] == APT_SHOW and len(argv) == 4:
            package = argv[3]
            if package in self.unknown:
                return 100, "", f"N: Unable to locate package {package}\nE: No packages found\n"
            if package in self.apt:
                return 0, self.apt[package], ""
            if package.startswith("nvidia-driver-"):
                return 0, driver_stanza(package), ""
            return 0, f"Package: {package}\nArchitecture: amd64\nVersion: {V580}\n", ""
        if argv[:5] == SIMULATE and len(argv) > 5:
            if self.simulation is not None:
                return self.simulation
            lines = [f"Inst {name} ({V580} {JAMMY})" for name in argv[5:]]
            return 0, SIMULATION_NOTE + "\n".join(lines) + "\n", ""
        raise AssertionError(f"the module ran a command it must not run: {argv}")


class Proc:
    """/proc/driver/nvidia/version: None where no NVIDIA module is loaded (the file is absent)."""

    text: str | None = None


PROC_VERSION = "/proc/driver/nvidia/version"


@pytest.fixture(autouse=True)
def proc(monkeypatch: pytest.MonkeyPatch) -> Proc:
    state = Proc()
    read_text = Path.read_text

    def fake_read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if str(self) == PROC_VERSION:
            if state.text is None:
                raise FileNotFoundError(2, "No such file or directory", PROC_VERSION)
            return state.text
        if str(self).startswith(("/proc/", "/sys/")):
            raise AssertionError(f"a unit test read the host: {self}")
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", fake_read_text)
    return state


def run_plan(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], node: Node, **args: Any
) -> Any:
    """The module's JSON result (without Ansible's invocation echo), its commands answered by node."""

    def run_command(
        module: Any, argv: list[str], check_rc: bool = False, environ_update: Any = None, **_: Any
    ) -> Answer:
        node.calls.append((list(argv), None if environ_update is None else dict(environ_update)))
        return node.answer(list(argv))

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit) as exited:
        plan.run_module()
    result = json.loads(capsys.readouterr().out)
    result.pop("invocation", None)
    assert exited.value.code == (1 if result.get("failed") else 0), result
    return result


def sysfs(root: Path, gpus: int, nvswitches: int = 0) -> str:
    """A sysfs tree (the module's sys_dir): a non-NVIDIA host bridge and a device that vanished (its
    link dangles) sorted before the NVIDIA GPUs (3D controllers) and NVSwitches."""
    pci_device(root, "0000:00:00.0", vendor="0x8086", device_class="0x060000")
    (root / "sys/bus/pci/devices/0000:00:01.0").symlink_to("../../../devices/pci0000:00/0000:00:01.0")
    for number in range(gpus):
        pci_device(root, f"0000:{0x10 + number:02x}:00.0")
    for number in range(nvswitches):
        pci_device(root, f"0000:{0x80 + number:02x}:00.0", device_class="0x068000")
    return str(root / "sys")


def env_for(sys_dir: str) -> dict[str, str]:
    return {"LC_ALL": "C", "UBUNTU_DRIVERS_SYS_DIR": sys_dir}


def planning(sys_dir: str, **args: Any) -> dict[str, Any]:
    """The role's defaults (auto, -server, open auto, prebuilt modules, Fabric Manager auto)."""
    return {
        "branch": "auto",
        "server": True,
        "open": "auto",
        "kernel_modules": "prebuilt",
        "fabricmanager": "auto",
        "sys_dir": sys_dir,
        **args,
    }


# --- whole plans -------------------------------------------------------------------------------------


def test_fresh_hgx_a100_gets_the_recommended_driver_with_prebuilt_modules_and_fabric_manager(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """jammy HGX A100 (8 GPUs, 6 NVSwitches), nothing of NVIDIA installed, check mode: ubuntu-drivers'
    recommendation, its signed modules and Fabric Manager; apt's simulation gives what gets installed,
    the userspace version, the packages to hold; no module runs yet, so a reboot is needed."""
    sys_dir = sysfs(tmp_path, gpus=8, nvswitches=6)
    packages = [
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-generic",
        "nvidia-fabricmanager-580",
    ]
    incoming = [
        "libnvidia-compute-580-server",
        "nvidia-kernel-common-580-server",
        "nvidia-firmware-580-server-580.178.04",
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-5.15.0-160-generic",
        "linux-modules-nvidia-580-server-open-generic",
        "nvidia-fabricmanager-580",
    ]
    kernel = "5.15.0-160.170 Ubuntu:22.04/jammy-updates [amd64]"
    simulation = SIMULATION_NOTE + "".join(
        f"Inst {name} ({kernel if name.startswith('linux-') else f'{V580} {JAMMY}'})\n" for name in incoming
    )
    simulation += "".join(f"Conf {name} ({V580} {JAMMY})\n" for name in incoming)
    node = Node(
        listing=A100_WITH_KERNEL,
        recommended=(0, A100_RECOMMENDED, ""),
        dpkg=NOTHING_OF_NVIDIA + "libnvidia-compute-470-server\t470.256.02-0ubuntu0.22.04.6\trc \n",
        simulation=(0, simulation, ""),
    )
    result = run_plan(monkeypatch, capsys, node, _ansible_check_mode=True, **planning(sys_dir))
    held = [
        "libnvidia-compute-580-server",
        "linux-modules-nvidia-580-server-open-5.15.0-160-generic",
        "linux-modules-nvidia-580-server-open-generic",
        "nvidia-fabricmanager-580",
        "nvidia-firmware-580-server-580.178.04",
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-kernel-common-580-server",
        "nvidia-utils-580-server",
    ]
    assert result == {
        "changed": False,
        "offered": offered_in(A100_WITH_KERNEL),
        "recommended": "nvidia-driver-580-server-open",
        "driver_package": "nvidia-driver-580-server-open",
        "branch": "580",
        "server": True,
        "open": True,
        "notes": ["ubuntu-drivers recommends nvidia-driver-580-server-open"],
        "packages": packages,
        "missing": packages,
        "to_install": incoming,
        "to_remove": [],
        "hold": held,
        "hold_needed": held,  # nothing of the driver is on the node yet: all of it
        "release_holds": [],
        "gpu_count": 8,
        "nvswitch_count": 6,
        "fabricmanager": True,
        "module_loaded": False,
        "loaded_version": None,
        "userspace_version": "580.178.04",
        "reboot_needed": True,
    }
    env = env_for(sys_dir)
    assert node.calls == [
        (LIST, env),
        (RECOMMENDED, env),
        *[([*APT_SHOW, name], env) for name in packages],
        (DPKG_QUERY, env),
        ([*SIMULATE, *packages], env),
    ]


NOBLE_580 = "580.142-0ubuntu0.24.04.1"
NOBLE_INSTALLED = (
    f"nvidia-headless-no-dkms-580\t{NOBLE_580}\tii \n"
    f"nvidia-utils-580\t{NOBLE_580}\thi \n"
    f"nvidia-dkms-580\t{NOBLE_580}\tii \n"
    f"libnvidia-compute-580\t{NOBLE_580}\tii \n"
    "libnvidia-compute-570\t570.195.03-0ubuntu0.24.04.1\thi \n"
    "libc6\t2.39-0ubuntu8.4\tii \n"
)


@pytest.mark.parametrize(
    ("proc_sample", "loaded", "reboot"),
    [
        ("open_580_two_part_noble", "580.142", False),
        ("open_570_jammy", "570.195.03", True),
        (None, None, True),
    ],
)
def test_an_installed_driver_needs_nothing_and_a_reboot_only_when_the_loaded_module_differs(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    proc: Proc,
    proc_sample: str | None,
    loaded: str | None,
    reboot: bool,
) -> None:
    """noble workstation (jacq42's listing, an ubuntu-drivers without --recommended), non-server DKMS
    driver already installed: nothing missing, so apt is not asked and no hold is released (not even
    the 570 package's); the userspace version is dpkg's; a reboot is needed unless the loaded module
    (real /proc samples) is that version."""
    proc.text = real("nvidia_version", proc_sample) if proc_sample else None
    sys_dir = sysfs(tmp_path, gpus=1)
    listing = real("ubuntu_drivers", "jacq42_noble_list")
    node = Node(listing=listing, dpkg=NOBLE_INSTALLED)
    packages = ["nvidia-headless-no-dkms-580", "nvidia-utils-580", "nvidia-dkms-580"]
    result = run_plan(
        monkeypatch,
        capsys,
        node,
        **planning(sys_dir, server=False, kernel_modules="dkms", fabricmanager="false"),
    )
    assert result == {
        "changed": False,
        "offered": offered_in(listing),
        "recommended": None,
        "driver_package": "nvidia-driver-580",
        "branch": "580",
        "server": False,
        "open": False,
        "notes": [
            "this ubuntu-drivers gives no recommendation (no `list --gpgpu --recommended`): took the "
            "highest branch offered as non-server: nvidia-driver-580"
        ],
        "packages": packages,
        "missing": [],
        "to_install": [],
        "to_remove": [],
        "hold": [
            "libnvidia-compute-580",
            "nvidia-dkms-580",
            "nvidia-headless-no-dkms-580",
            "nvidia-utils-580",
        ],
        # nvidia-utils-580 is held already (hi); the three installed ones (ii) are not.
        "hold_needed": ["libnvidia-compute-580", "nvidia-dkms-580", "nvidia-headless-no-dkms-580"],
        "release_holds": [],
        "gpu_count": 1,
        "nvswitch_count": 0,
        "fabricmanager": False,
        "module_loaded": loaded is not None,
        "loaded_version": loaded,
        "userspace_version": "580.142",
        "reboot_needed": reboot,
    }
    env = env_for(sys_dir)
    assert node.calls == [
        (LIST, env),
        (RECOMMENDED, env),
        *[([*APT_SHOW, name], env) for name in packages],
        (DPKG_QUERY, env),
    ]


def test_switching_to_open_modules_releases_the_holds_of_what_apt_replaces(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """jammy HGX A100 with the closed 580-server driver held (and an old 470 library held): the
    recommendation is open. apt removes the closed packages, whose holds (and the 470 one) are released
    and not taken again; nvidia-utils stays at the installed version (apt does not reinstall it), which
    is the userspace version; nvidia_driver_fabricmanager=false leaves Fabric Manager out despite the
    NVSwitches."""
    sys_dir = sysfs(tmp_path, gpus=8, nvswitches=6)
    dpkg = (
        f"nvidia-headless-no-dkms-580-server\t{V580}\thi \n"
        f"nvidia-kernel-source-580-server\t{V580}\thi \n"
        f"libnvidia-compute-580-server\t{V580}\thi \n"
        f"nvidia-utils-580-server\t{V580}\thi \n"
        "linux-modules-nvidia-580-server-generic\t5.15.0-160.170\thi \n"
        "linux-modules-nvidia-580-server-5.15.0-160-generic\t5.15.0-160.170\thi \n"
        "libnvidia-compute-470-server\t470.256.02-0ubuntu0.22.04.6\thi \n"
        "libc6\t2.35-0ubuntu3.8\thi \n"
    )
    removed = [
        "nvidia-headless-no-dkms-580-server",
        "nvidia-kernel-source-580-server",
        "linux-modules-nvidia-580-server-generic",
        "linux-modules-nvidia-580-server-5.15.0-160-generic",
    ]
    incoming = [
        "nvidia-kernel-source-580-server-open",
        "nvidia-headless-no-dkms-580-server-open",
        "linux-modules-nvidia-580-server-open-5.15.0-160-generic",
        "linux-modules-nvidia-580-server-open-generic",
    ]
    simulation = (
        SIMULATION_NOTE
        + f"Remv nvidia-headless-no-dkms-580-server [{V580}]\n"
        + f"Remv nvidia-kernel-source-580-server [{V580}]\n"
        + "Remv linux-modules-nvidia-580-server-generic [5.15.0-160.170]\n"
        + "Remv linux-modules-nvidia-580-server-5.15.0-160-generic [5.15.0-160.170]\n"
        + "".join(f"Inst {name} ({V580} {JAMMY})\n" for name in incoming)
        + "".join(f"Conf {name} ({V580} {JAMMY})\n" for name in incoming)
    )
    node = Node(
        listing=A100_WITH_KERNEL,
        recommended=(0, A100_RECOMMENDED, ""),
        dpkg=dpkg,
        simulation=(0, simulation, ""),
    )
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, fabricmanager="false"))
    packages = [
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-generic",
    ]
    assert result == {
        "changed": False,
        "offered": offered_in(A100_WITH_KERNEL),
        "recommended": "nvidia-driver-580-server-open",
        "driver_package": "nvidia-driver-580-server-open",
        "branch": "580",
        "server": True,
        "open": True,
        "notes": ["ubuntu-drivers recommends nvidia-driver-580-server-open"],
        "packages": packages,
        "missing": [packages[0], packages[2]],
        "to_install": incoming,
        "to_remove": removed,
        "hold": [
            "libnvidia-compute-580-server",
            "linux-modules-nvidia-580-server-open-5.15.0-160-generic",
            "linux-modules-nvidia-580-server-open-generic",
            "nvidia-headless-no-dkms-580-server-open",
            "nvidia-kernel-source-580-server-open",
            "nvidia-utils-580-server",
        ],
        # The libraries and utilities are held already; the incoming open packages are not.
        "hold_needed": [
            "linux-modules-nvidia-580-server-open-5.15.0-160-generic",
            "linux-modules-nvidia-580-server-open-generic",
            "nvidia-headless-no-dkms-580-server-open",
            "nvidia-kernel-source-580-server-open",
        ],
        "release_holds": [
            "libnvidia-compute-470-server",
            "linux-modules-nvidia-580-server-5.15.0-160-generic",
            "linux-modules-nvidia-580-server-generic",
            "nvidia-headless-no-dkms-580-server",
            "nvidia-kernel-source-580-server",
        ],
        "gpu_count": 8,
        "nvswitch_count": 6,
        "fabricmanager": False,
        "module_loaded": False,
        "loaded_version": None,
        "userspace_version": "580.178.04",
        "reboot_needed": True,
    }
    assert node.calls[-1] == ([*SIMULATE, *packages], env_for(sys_dir))


# --- pinned branches ---------------------------------------------------------------------------------


def test_a_transitional_pin_installs_the_branch_it_pulls_in(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """noble (jacq42's listing): nvidia_driver_branch=570 with -server, where the archive's
    nvidia-driver-570-server is the transitional package to 580-server (real apt-cache stanzas): the
    module follows it to the real driver and plans 580-server, saying so."""
    sys_dir = sysfs(tmp_path, gpus=2)
    listing = real("ubuntu_drivers", "jacq42_noble_list")
    node = Node(
        listing=listing,
        apt={"nvidia-driver-570-server": TRANSITIONAL_570, "nvidia-driver-580-server": REAL_580},
    )
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, branch="570", open="false"))
    packages = [
        "nvidia-headless-no-dkms-580-server",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-generic",
    ]
    assert (result["driver_package"], result["branch"], result["packages"], result["fabricmanager"]) == (
        "nvidia-driver-580-server",
        "580",
        packages,
        False,
    )
    assert result["notes"] == [
        "nvidia_driver_branch=570 is a transitional package in this archive: nvidia-driver-570-server "
        "installs nvidia-driver-580-server, so branch 580 is what gets installed",
        "pinned branch 570 gives nvidia-driver-580-server",
    ]
    env = env_for(sys_dir)
    assert node.calls == [
        (LIST, env),
        (RECOMMENDED, env),
        ([*APT_SHOW, "nvidia-driver-570-server"], env),
        ([*APT_SHOW, "nvidia-driver-580-server"], env),
        *[([*APT_SHOW, name], env) for name in packages],
        (DPKG_QUERY, env),
        ([*SIMULATE, *packages], env),
    ]


TRANSITIONAL_545 = """\
Package: nvidia-driver-545
Version: 545.29.06-0ubuntu0.24.04.1
Depends: nvidia-driver-550
Description: Transitional package for nvidia-driver-550
"""


def test_a_transitional_pin_of_a_non_server_branch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The same for a desktop branch (a stanza shaped like the captured 570-server one): the package
    looked up and followed is nvidia-driver-545, without -server."""
    sys_dir = sysfs(tmp_path, gpus=1)
    listing = real("ubuntu_drivers", "jahangir842_gpgpu_no_kernel")
    node = Node(listing=listing, apt={"nvidia-driver-545": TRANSITIONAL_545})
    result = run_plan(
        monkeypatch,
        capsys,
        node,
        **planning(sys_dir, branch="545", server=False, open="false", kernel_modules="dkms"),
    )
    assert result["driver_package"] == "nvidia-driver-550"
    assert result["packages"] == ["nvidia-headless-no-dkms-550", "nvidia-utils-550", "nvidia-dkms-550"]
    assert result["notes"] == [
        "nvidia_driver_branch=545 is a transitional package in this archive: nvidia-driver-545 installs "
        "nvidia-driver-550, so branch 550 is what gets installed",
        "pinned branch 545 gives nvidia-driver-550",
    ]
    assert [argv for argv, _ in node.calls[2:4]] == [
        [*APT_SHOW, "nvidia-driver-545"],
        [*APT_SHOW, "nvidia-driver-550"],
    ]


def test_a_transitional_pin_to_a_branch_not_offered_fails_naming_both_branches(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sys_dir = sysfs(tmp_path, gpus=4)
    listing = real("ubuntu_drivers", "forum_jammy_hwe_list")
    node = Node(
        listing=listing,
        apt={"nvidia-driver-570-server": TRANSITIONAL_570, "nvidia-driver-580-server": REAL_580},
    )
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, branch="570"))
    assert result == {
        "failed": True,
        "msg": "nvidia_driver_branch=570 is not offered by ubuntu-drivers for this GPU (it resolves to "
        f"branch 580) with these settings (offered: {', '.join(offered_in(listing))}); pin one of the "
        "offered branches or use 'auto'",
        "offered": offered_in(listing),
        "gpu_count": 4,
    }


def test_a_pin_the_archive_does_not_know_fails_listing_the_offer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """apt-cache show fails (rc 100) for a package no source has: that is no transitional package,
    and not a failure of the module; the pin is refused with the offer."""
    sys_dir = sysfs(tmp_path, gpus=8)
    node = Node(listing=A100_WITH_KERNEL, unknown=frozenset({"nvidia-driver-440-server"}))
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, branch="440"))
    assert result == {
        "failed": True,
        "msg": "nvidia_driver_branch=440 is not offered by ubuntu-drivers for this GPU with these "
        f"settings (offered: {', '.join(offered_in(A100_WITH_KERNEL))}); pin one of the offered branches "
        "or use 'auto'",
        "offered": offered_in(A100_WITH_KERNEL),
        "gpu_count": 8,
    }


@pytest.mark.parametrize(
    ("recommended", "open_modules", "expected"),
    [
        ((0, A100_RECOMMENDED, ""), "auto", "nvidia-driver-580-server-open"),
        (NO_RECOMMENDED_OPTION, "auto", "nvidia-driver-580-server"),
        ((0, A100_RECOMMENDED, ""), "false", "nvidia-driver-580-server"),
        (NO_RECOMMENDED_OPTION, "true", "nvidia-driver-580-server-open"),
    ],
)
def test_a_pinned_branch_offered_open_and_closed_takes_the_recommended_variant_else_closed(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    recommended: Answer,
    open_modules: str,
    expected: str,
) -> None:
    """A100 jammy listing (the open variant printed first): with open modules 'auto' the variant
    ubuntu-drivers recommends, else the closed one; an explicit nvidia_driver_open always wins."""
    sys_dir = sysfs(tmp_path, gpus=8)
    node = Node(listing=A100_WITH_KERNEL, recommended=recommended)
    result = run_plan(
        monkeypatch, capsys, node, **planning(sys_dir, branch="580", open=open_modules, fabricmanager="false")
    )
    assert (result["driver_package"], result["notes"]) == (expected, [f"pinned branch 580 gives {expected}"])
    assert result["packages"][2] == expected.replace("nvidia-driver-", "linux-modules-nvidia-") + "-generic"


# --- automatic choice --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listing", "server", "open_modules", "expected", "words"),
    [
        (A100_NO_KERNEL, True, "auto", "nvidia-driver-580-server", "-server"),
        (A100_WITH_KERNEL, False, "true", "nvidia-driver-580-open", "non-server with open kernel modules"),
        (A100_WITH_KERNEL, True, "false", "nvidia-driver-580-server", "-server with closed kernel modules"),
    ],
)
def test_without_a_recommendation_the_note_names_the_flavour_searched(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    listing: str,
    server: bool,
    open_modules: str,
    expected: str,
    words: str,
) -> None:
    sys_dir = sysfs(tmp_path, gpus=8)
    node = Node(listing=listing)
    args = planning(sys_dir, server=server, open=open_modules, kernel_modules="dkms", fabricmanager="false")
    result = run_plan(monkeypatch, capsys, node, **args)
    assert (result["driver_package"], result["recommended"]) == (expected, None)
    assert result["notes"] == [
        "this ubuntu-drivers gives no recommendation (no `list --gpgpu --recommended`): took the highest "
        f"branch offered as {words}: {expected}"
    ]


def test_a_recommendation_in_another_flavour_gives_its_branch_in_the_wanted_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sys_dir = sysfs(tmp_path, gpus=8)
    node = Node(listing=A100_WITH_KERNEL, recommended=(0, A100_RECOMMENDED, ""))
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, server=False, open="false"))
    assert result["driver_package"] == "nvidia-driver-580"
    assert result["notes"] == [
        "ubuntu-drivers recommends nvidia-driver-580-server-open; with nvidia_driver_server=False and "
        "nvidia_driver_open=false its branch 580 gives nvidia-driver-580"
    ]


def test_a_failing_recommended_listing_is_no_recommendation_even_with_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`list --gpgpu --recommended` exiting non-zero (here after printing a driver, then a traceback)
    is not trusted: the highest branch of the flavour is taken, and no recommendation is reported."""
    sys_dir = sysfs(tmp_path, gpus=8)
    crashed = (1, A100_RECOMMENDED, "Traceback (most recent call last):\nKeyError: 'modalias'\n")
    node = Node(listing=A100_WITH_KERNEL, recommended=crashed)
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, fabricmanager="false"))
    assert (result["recommended"], result["driver_package"]) == (None, "nvidia-driver-580-server")


@pytest.mark.parametrize(
    ("listing", "recommended", "modules"),
    [
        # the recommendation line without its modules package: the listing's is used
        (A100_WITH_KERNEL, "nvidia-driver-580-server-open\n", "linux-modules-nvidia-580-server-open-generic"),
        # the listing without modules packages: the recommendation's is used
        (A100_NO_KERNEL, A100_RECOMMENDED, "linux-modules-nvidia-580-server-open-generic"),
        # the recommended driver missing from the listing: the recommendation is taken as it is
        (
            A100_WITH_KERNEL.replace(A100_WITH_KERNEL.splitlines()[0] + "\n", ""),
            A100_RECOMMENDED,
            "linux-modules-nvidia-580-server-open-generic",
        ),
        # both name one: the full listing's wins
        (
            A100_WITH_KERNEL.replace("server-open-generic)", "server-open-generic-hwe-22.04)"),
            A100_RECOMMENDED,
            "linux-modules-nvidia-580-server-open-generic-hwe-22.04",
        ),
    ],
)
def test_the_recommended_drivers_kernel_modules_package(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    listing: str,
    recommended: str,
    modules: str,
) -> None:
    sys_dir = sysfs(tmp_path, gpus=8)
    node = Node(listing=listing, recommended=(0, recommended, ""))
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, fabricmanager="false"))
    assert result["driver_package"] == "nvidia-driver-580-server-open"
    assert result["packages"] == [
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        modules,
    ]


# --- refusals, each naming what to change ------------------------------------------------------------


OPEN_ONLY = "".join(line + "\n" for line in A100_WITH_KERNEL.splitlines() if "-open," in line)


@pytest.mark.parametrize(
    ("listing", "server", "open_modules", "flavour"),
    [
        (K80_WITH_KERNEL, True, "auto", "-server driver"),
        (
            real("ubuntu_drivers", "miyakz_focal_list"),
            False,
            "true",
            "non-server driver with open kernel modules",
        ),
        (OPEN_ONLY, True, "false", "-server driver with closed kernel modules"),
    ],
)
def test_no_driver_of_the_wanted_flavour_fails_naming_the_switches(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    listing: str,
    server: bool,
    open_modules: str,
    flavour: str,
) -> None:
    sys_dir = sysfs(tmp_path, gpus=2)
    node = Node(listing=listing)
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, server=server, open=open_modules))
    assert result == {
        "failed": True,
        "msg": f"ubuntu-drivers offers no {flavour} for this GPU "
        f"(offered: {', '.join(offered_in(listing))}); change nvidia_driver_server or nvidia_driver_open",
        "offered": offered_in(listing),
        "gpu_count": 2,
    }


def test_gpus_but_an_empty_offer_fails_saying_nothing_is_offered(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ubuntu-drivers prints no driver (no NVIDIA driver in the apt sources) on a node with GPUs."""
    sys_dir = sysfs(tmp_path, gpus=8)
    node = Node(listing="")
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir))
    assert result == {
        "failed": True,
        "msg": "ubuntu-drivers offers no -server driver for this GPU (offered: nothing); "
        "change nvidia_driver_server or nvidia_driver_open",
        "offered": [],
        "gpu_count": 8,
    }


def test_a_recommendation_whose_branch_the_flavour_lacks_fails_with_the_offer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sys_dir = sysfs(tmp_path, gpus=8)
    node = Node(
        listing=A100_WITH_KERNEL,
        recommended=(0, "nvidia-driver-590-open linux-modules-nvidia-590-open-generic\n", ""),
    )
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir))
    assert result["msg"] == (
        "ubuntu-drivers recommends nvidia-driver-590-open, and its branch 590 is not offered as -server "
        f"(offered: {', '.join(offered_in(A100_WITH_KERNEL))}); change nvidia_driver_server or "
        "nvidia_driver_open, or pin nvidia_driver_branch"
    )


def test_prebuilt_modules_of_a_dkms_only_branch_are_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """AnduinOS jammy listing: 418-server comes only with nvidia-dkms-418-server."""
    sys_dir = sysfs(tmp_path, gpus=1)
    listing = real("ubuntu_drivers", "anduinos_jammy_gpgpu")
    node = Node(listing=listing)
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, branch="418"))
    assert result == {
        "failed": True,
        "msg": "nvidia_driver_kernel_modules=prebuilt but ubuntu-drivers offers nvidia-driver-418-server "
        "only with DKMS kernel modules (nvidia-dkms-418-server): Ubuntu builds no signed modules of this "
        "branch for this kernel; set nvidia_driver_kernel_modules: dkms, or pin a branch that has "
        "linux-modules-nvidia packages",
        "offered": offered_in(listing),
        "gpu_count": 1,
    }


def test_prebuilt_modules_without_a_modules_package_are_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """jahangir842's listing names no kernel modules package (no linux-image metapackage)."""
    sys_dir = sysfs(tmp_path, gpus=1)
    node = Node(listing=real("ubuntu_drivers", "jahangir842_gpgpu_no_kernel"))
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir))
    assert result["msg"] == (
        "nvidia_driver_kernel_modules=prebuilt but ubuntu-drivers names no prebuilt linux-modules-nvidia "
        "package for nvidia-driver-550-server (is a linux-image metapackage such as linux-image-generic "
        "installed?); use dkms, or none where modules come from elsewhere"
    )


@pytest.mark.parametrize(
    ("unknown", "msg"),
    [
        (
            {"nvidia-fabricmanager-580"},
            "not in the configured apt sources: nvidia-fabricmanager-580 (6 NVSwitch(es) found: Fabric "
            "Manager must match the driver branch; add an apt source that has it, or set "
            "nvidia_driver_fabricmanager: false)",
        ),
        (
            {"nvidia-utils-580-server", "nvidia-fabricmanager-580"},
            "not in the configured apt sources: nvidia-utils-580-server, nvidia-fabricmanager-580 (6 "
            "NVSwitch(es) found: Fabric Manager must match the driver branch; add an apt source that has "
            "it, or set nvidia_driver_fabricmanager: false)",
        ),
        (
            {"linux-modules-nvidia-580-server-open-generic"},
            "not in the configured apt sources: linux-modules-nvidia-580-server-open-generic",
        ),
    ],
)
def test_packages_missing_from_the_apt_sources_are_named(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    unknown: set[str],
    msg: str,
) -> None:
    """apt-cache show exits 100 for them; Fabric Manager's absence names the NVSwitches that need it."""
    sys_dir = sysfs(tmp_path, gpus=8, nvswitches=6)
    node = Node(listing=A100_WITH_KERNEL, recommended=(0, A100_RECOMMENDED, ""), unknown=frozenset(unknown))
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir))
    assert result == {"failed": True, "msg": msg, "offered": offered_in(A100_WITH_KERNEL), "gpu_count": 8}


@pytest.mark.parametrize(
    ("fabricmanager", "nvswitches", "wanted"),
    [("true", 0, True), ("false", 6, False), ("auto", 1, True), ("auto", 0, False)],
)
def test_fabric_manager_is_wanted_when_asked_or_when_nvswitches_are_found(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fabricmanager: str,
    nvswitches: int,
    wanted: bool,
) -> None:
    sys_dir = sysfs(tmp_path, gpus=8, nvswitches=nvswitches)
    node = Node(listing=A100_WITH_KERNEL, recommended=(0, A100_RECOMMENDED, ""))
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, fabricmanager=fabricmanager))
    assert (result["fabricmanager"], result["nvswitch_count"]) == (wanted, nvswitches)
    assert ("nvidia-fabricmanager-580" in result["packages"]) is wanted


def test_no_gpu_and_no_offer_fails_naming_the_sysfs_searched(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sys_dir = sysfs(tmp_path, gpus=0)
    warning_only = "ERROR:root:aplay command not found\n"
    node = Node(listing=warning_only)
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir))
    assert result == {
        "failed": True,
        "msg": f"no NVIDIA GPU found under {sys_dir}/bus/pci/devices: apply nvidia_driver only to GPU "
        "nodes (or set nvidia_driver_sys_dir for a test tree)",
        "ubuntu_drivers": warning_only,
    }


def test_an_offer_without_a_gpu_in_sysfs_is_still_planned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ubuntu-drivers sees a GPU the sysfs tree does not show (its modalias match is what counts)."""
    sys_dir = sysfs(tmp_path, gpus=0)
    node = Node(listing=K80_WITH_KERNEL)
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, server=False))
    assert (result["driver_package"], result["gpu_count"]) == ("nvidia-driver-390", 0)


# --- commands that fail --------------------------------------------------------------------------------


def test_a_failing_ubuntu_drivers_fails_the_module_with_its_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sys_dir = sysfs(tmp_path, gpus=8)
    error = "Traceback (most recent call last):\nPermissionError: [Errno 13] Permission denied\n"
    node = Node(listing_answer=(1, "", error))
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir))
    assert result == {
        "failed": True,
        "msg": f"ubuntu-drivers list --gpgpu failed (rc=1): {error.strip()}",
        "argv": LIST,
    }
    assert [argv for argv, _ in node.calls] == [LIST]


def test_a_failing_dpkg_query_fails_the_module_with_its_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Nothing on stderr: stdout is what the message quotes."""
    sys_dir = sysfs(tmp_path, gpus=8)
    node = Node(
        listing=A100_WITH_KERNEL,
        recommended=(0, A100_RECOMMENDED, ""),
        dpkg_answer=(2, "dpkg-query: error: --showformat needs a value\n", ""),
    )
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir))
    assert result == {
        "failed": True,
        "msg": "dpkg-query failed (rc=2): dpkg-query: error: --showformat needs a value",
        "argv": DPKG_QUERY,
    }


def test_an_unsatisfiable_simulation_fails_the_module_with_apts_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """apt prints the unmet dependencies on stdout and its E: line on stderr: the latter is quoted."""
    sys_dir = sysfs(tmp_path, gpus=8)
    stdout = (
        "Some packages could not be installed. This may mean that you have\n"
        "requested an impossible situation.\n"
        "The following packages have unmet dependencies:\n"
        " nvidia-utils-580-server : Depends: libnvidia-compute-580-server (= 580.178.04-0ubuntu0.22.04.1)\n"
    )
    stderr = "E: Unable to correct problems, you have held broken packages.\n"
    node = Node(
        listing=A100_WITH_KERNEL,
        recommended=(0, A100_RECOMMENDED, ""),
        simulation=(100, stdout, stderr),
    )
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir, fabricmanager="false"))
    packages = [
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-generic",
    ]
    assert result == {
        "failed": True,
        "msg": "apt-get install -s (simulated) failed (rc=100): "
        "E: Unable to correct problems, you have held broken packages.",
        "argv": [*SIMULATE, *packages],
    }


# --- arguments, rollback -----------------------------------------------------------------------------


def test_planning_needs_the_flavour_arguments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node()
    result = run_plan(monkeypatch, capsys, node, branch="auto")
    assert result == {
        "failed": True,
        "msg": "installed_only is False but all of the following are missing: server, open, "
        "kernel_modules, fabricmanager",
    }
    assert node.calls == []


ROLLBACK_DPKG = (
    f"libnvidia-compute-580-server\t{V580}\thi \n"
    f"nvidia-utils-580-server\t{V580}\tii \n"
    f"nvidia-firmware-580-server-580.178.04\t{V580}\thi \n"
    "linux-modules-nvidia-580-server-generic\t6.8.0-90.91\thi \n"
    "libnvidia-compute-470-server\t470.256.02-0ubuntu0.22.04.6\thi \n"
    f"nvidia-kernel-common-580-server\t{V580}\trc \n"
    "libc6\t2.35-0ubuntu3.8\tii \n"
)


@pytest.mark.parametrize("proc_sample", ["open_570_jammy", None])
def test_installed_only_lists_the_branchs_installed_and_held_packages(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], proc: Proc, proc_sample: str | None
) -> None:
    """The rollback's question: only dpkg is asked (with the default sys_dir, so ubuntu-drivers' sysfs
    is not overridden), no planning argument is needed, and whether a module is loaded is reported."""
    proc.text = real("nvidia_version", proc_sample) if proc_sample else None
    node = Node(dpkg=ROLLBACK_DPKG)
    result = run_plan(monkeypatch, capsys, node, branch="580", installed_only=True)
    assert result == {
        "changed": False,
        "branch": "580",
        "installed": [
            "libnvidia-compute-580-server",
            "linux-modules-nvidia-580-server-generic",
            "nvidia-firmware-580-server-580.178.04",
            "nvidia-utils-580-server",
        ],
        "held": [
            "libnvidia-compute-580-server",
            "linux-modules-nvidia-580-server-generic",
            "nvidia-firmware-580-server-580.178.04",
        ],
        "module_loaded": proc_sample is not None,
    }
    assert node.calls == [(DPKG_QUERY, {"LC_ALL": "C"})]


@pytest.mark.parametrize("branch", ["auto", "580-server", "58"])
def test_installed_only_needs_a_branch_number(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], branch: str
) -> None:
    node = Node()
    result = run_plan(monkeypatch, capsys, node, branch=branch, installed_only=True)
    assert result == {"failed": True, "msg": f"installed_only needs a branch number, not {branch!r}"}
    assert node.calls == []


# --- the parsers' edges ------------------------------------------------------------------------------


def test_depends_names_each_groups_first_alternative_without_version_or_architecture() -> None:
    """A Depends field with every form Debian policy (7.1) allows: version constraints (one with an
    epoch), alternatives with and without blanks around '|', an architecture qualifier."""
    control = (
        "Package: xserver-xorg-video-nvidia-580-server\n"
        "Pre-Depends: dpkg (>= 1.19.0)\n"
        "Depends: libc6 (>= 2.14), xserver-xorg-core (>= 2:1.20.13), xorg-video-abi-25 | xorg-video-abi-24, "
        f"libnvidia-cfg1-580-server (= {V580}), python3:any, nvidia-kernel-common-580-server|nvidia-dkms\n"
        "Recommends: nvidia-settings\n"
    )
    assert plan.parse_depends(control) == [
        "libc6",
        "xserver-xorg-core",
        "xorg-video-abi-25",
        "libnvidia-cfg1-580-server",
        "python3",
        "nvidia-kernel-common-580-server",
    ]


@pytest.mark.parametrize(
    ("control", "target"),
    [
        (TRANSITIONAL_570, "nvidia-driver-580-server"),
        # a package naming GPUs (Modaliases) is a real driver, whatever it depends on
        (TRANSITIONAL_570 + "Modaliases: nvidia(pci:v000010DEd000020B0sv*sd*bc03sc*i*)\n", None),
        # two drivers depended on: not the shape of a transitional package
        (
            TRANSITIONAL_570.replace(
                "nvidia-driver-580-server\n", "nvidia-driver-580-server, nvidia-driver-590\n"
            ),
            None,
        ),
        # apt-cache show of a package no source has prints nothing
        ("", None),
    ],
)
def test_a_transitional_package_is_one_without_modaliases_depending_on_one_other_driver(
    control: str, target: str | None
) -> None:
    assert plan.transitional_target("nvidia-driver-570-server", control) == target


def test_only_installed_and_held_packages_count_as_installed() -> None:
    """dpkg's Status-Abbrev: desired state (i install, h hold, r remove, p purge, u unknown), then the
    current one; half-installed, half-configured and removed ones are not installed."""
    states = ["ii", "hi", "iU", "iF", "ri", "pi", "ui", "rc", "un", ""]
    assert [state for state in states if plan.is_installed(state)] == ["ii", "hi"]


def test_the_userspace_version_drops_epoch_and_debian_revision() -> None:
    assert plan.upstream_version("1:580.95.05-0ubuntu0.24.04.2") == "580.95.05"
    assert plan.upstream_version(V580) == "580.178.04"


def test_an_upgrade_in_the_simulation_gives_the_version_apt_would_install_not_the_old_one() -> None:
    """apt-get -s prints an upgrade as `Inst pkg [installed] (candidate suite [arch])`: the old
    version was taken, so an in-branch upgrade reported the old userspace and no reboot needed."""
    upgrade = (
        "Inst nvidia-utils-580-server [580.95.05-0ubuntu0.22.04.2] "
        "(580.178.04-0ubuntu0.22.04.1 Ubuntu:22.04/jammy-updates [amd64])"
    )
    fresh = "Inst nvidia-utils-580-server (580.178.04-0ubuntu0.22.04.1 Ubuntu:22.04/jammy-updates [amd64])"
    assert plan.simulated_version(upgrade, "nvidia-utils-580-server") == "580.178.04-0ubuntu0.22.04.1"
    assert plan.simulated_version(fresh, "nvidia-utils-580-server") == "580.178.04-0ubuntu0.22.04.1"
    assert (
        plan.upstream_version(plan.simulated_version(upgrade, "nvidia-utils-580-server") or "")
        == "580.178.04"
    )
    assert plan.simulated_version("Inst nvidia-utils-580-server [1.0]", "nvidia-utils-580-server") is None
    assert plan.simulated_version(fresh, "nvidia-utils-570-server") is None


def test_a_three_word_inst_line_still_names_its_version() -> None:
    assert plan.simulated_version("Inst nvidia-utils-580 (580.1", "nvidia-utils-580") == "580.1"


def test_a_simulation_that_names_no_userspace_version_claims_no_reboot(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, proc: Proc
) -> None:
    """Nothing installed, and apt's simulation has no `Inst` line for the utils package (only the
    other packages': the version apt would bring is unknown). The plan says so (no userspace version)
    and claims no reboot, instead of reading a version out of nothing or failing with a traceback."""
    proc.text = real("nvidia_version", "open_570_jammy")
    sys_dir = sysfs(tmp_path, gpus=8)
    simulation = SIMULATION_NOTE + f"Inst nvidia-headless-no-dkms-580-server ({V580} {JAMMY})\n"
    node = Node(
        listing=A100_WITH_KERNEL, recommended=(0, A100_RECOMMENDED, ""), simulation=(0, simulation, "")
    )
    result = run_plan(monkeypatch, capsys, node, **planning(sys_dir))
    assert "failed" not in result, result
    assert result["missing"] == result["packages"]
    assert (result["module_loaded"], result["userspace_version"], result["reboot_needed"]) == (
        True,
        None,
        False,
    )
