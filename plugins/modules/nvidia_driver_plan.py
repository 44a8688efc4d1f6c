#!/usr/bin/python3
"""Decide which NVIDIA driver packages this node needs, from what ubuntu-drivers offers for its GPUs.

Read-only (safe in check mode): runs `ubuntu-drivers list --gpgpu`, `apt-cache show`, `dpkg-query` and
`apt-get install -s`, and returns the plan the role then applies. The decision logic is plain functions,
unit-tested in tests/unit/test_nvidia_driver_plan.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: nvidia_driver_plan
short_description: Choose the NVIDIA driver packages for this node from ubuntu-drivers' recommendation
description:
  - Never changes the node. Fails, naming the variable, when the wanted driver is not offered.
options:
  branch: {type: str, required: true, description: "'auto' or a branch number such as '580'."}
  # server, open, kernel_modules and fabricmanager are required unless installed_only.
  server: {type: bool, description: Use the -server (datacenter) branches.}
  open: {type: str, choices: ['true', 'false', auto], description: Open kernel modules.}
  kernel_modules: {type: str, choices: [prebuilt, dkms, none]}
  fabricmanager: {type: str, choices: ['true', 'false', auto]}
  sys_dir: {type: path, default: /sys, description: sysfs root (UBUNTU_DRIVERS_SYS_DIR).}
  installed_only:
    type: bool
    default: false
    description: >-
      For the rollback: only list the installed (and held) packages of C(branch), a branch number;
      ubuntu-drivers is not asked, and the planning options are not needed.
"""

NVIDIA_VENDOR = "0x10de"
# PCI classes: 0x0300 VGA, 0x0302 3D controller (datacenter GPUs), 0x0680 other bridge (NVSwitch).
GPU_CLASSES = ("0x0300", "0x0302")
NVSWITCH_CLASS = "0x0680"
# Packages that make up an installed NVIDIA driver: holding all of them keeps module and userspace
# from drifting apart under unattended-upgrades.
DRIVER_PACKAGE = re.compile(
    r"^(nvidia-|libnvidia-|linux-modules-nvidia-|linux-objects-nvidia-|linux-signatures-nvidia-"
    r"|xserver-xorg-video-nvidia-)"
)
# One offer of `ubuntu-drivers list --gpgpu`: "PKG, (kernel modules provided by MODS)", or with
# --recommended "PKG MODS", or PKG alone. Older releases print "None" when no module package exists.
CANDIDATE = re.compile(
    r"^nvidia-(?:driver|headless-no-dkms)-(?P<branch>[0-9]+)(?P<server>-server)?(?P<open>-open)?"
    r"(?:,?\s*\(kernel modules provided by (?P<modules>[A-Za-z0-9.+-]+)\)|\s+(?P<bare>[a-z0-9.+-]+))?\s*$"
)
PREBUILT_MODULES = "linux-modules-nvidia-"
TRANSITIONAL_DEPTH = 5


class PlanError(Exception):
    """A wanted driver this node cannot have; the message names the variable to change."""


@dataclass(frozen=True)
class Candidate:
    branch: str
    server: bool
    open: bool
    modules_package: str | None = None

    @property
    def suffix(self) -> str:
        return ("-server" if self.server else "") + ("-open" if self.open else "")

    @property
    def package(self) -> str:
        return f"nvidia-driver-{self.branch}{self.suffix}"

    @property
    def prebuilt(self) -> bool:
        """Signed kernel modules built by Ubuntu for the installed kernel (not DKMS)."""
        return bool(self.modules_package and self.modules_package.startswith(PREBUILT_MODULES))

    def fits(self, server: bool, open_modules: str) -> bool:
        return self.server == server and (open_modules == "auto" or self.open == (open_modules == "true"))


def parse_gpgpu_list(text: str) -> list[Candidate]:
    """`ubuntu-drivers list --gpgpu [--recommended]` output in its printed order (which is no order of
    preference: see choose); other lines (warnings) are ignored."""
    found = []
    for line in text.splitlines():
        match = CANDIDATE.match(line.strip())
        if match:
            modules = match["modules"] or match["bare"]
            found.append(
                Candidate(
                    match["branch"],
                    bool(match["server"]),
                    bool(match["open"]),
                    None if modules in (None, "None") else modules,
                )
            )
    return found


def recommendation(text: str | None) -> Candidate | None:
    """ubuntu-drivers' own choice from `list --gpgpu --recommended`; None where this ubuntu-drivers has
    no such option (an error) or prints more than one NVIDIA driver (an old release ignoring it)."""
    if text is None:
        return None
    found = {c.package: c for c in parse_gpgpu_list(text)}
    return next(iter(found.values())) if len(found) == 1 else None


def _newest(candidates: list[Candidate]) -> Candidate:
    """The highest branch; between the same branch's variants, closed before open (ubuntu-drivers'
    own comparator sorts -open after the closed driver)."""
    return max(candidates, key=lambda c: (int(c.branch), not c.open))


def count_pci_devices(sys_dir: str | Path) -> tuple[int, int]:
    """NVIDIA GPUs and NVSwitches under <sys_dir>/bus/pci/devices."""
    gpus = switches = 0
    devices = Path(sys_dir) / "bus" / "pci" / "devices"
    if not devices.is_dir():
        return 0, 0
    for device in sorted(devices.iterdir()):
        try:
            vendor = (device / "vendor").read_text().strip().lower()
            pci_class = (device / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor != NVIDIA_VENDOR:
            continue
        if pci_class.startswith(GPU_CLASSES):
            gpus += 1
        elif pci_class.startswith(NVSWITCH_CLASS):
            switches += 1
    return gpus, switches


def parse_depends(control: str) -> list[str]:
    """Package names in the Depends field of one `apt-cache show --no-all-versions` stanza."""
    for line in control.splitlines():
        if line.startswith("Depends:"):
            names = []
            for alternative_group in line.split(":", 1)[1].split(","):
                first = alternative_group.split("|")[0].strip()
                names.append(first.split(" ", 1)[0].split(":", 1)[0])
            return names
    return []


def transitional_target(package: str, control: str) -> str | None:
    """The driver a transitional package pulls in (535-server -> 580-server), or None if it is real.

    Ubuntu's transitional driver packages carry no Modaliases and depend on exactly one other
    nvidia-driver-NNN package."""
    if "Modaliases:" in control:
        return None
    depends = [name for name in parse_depends(control) if name.startswith("nvidia-driver-")]
    if len(depends) == 1 and depends[0] != package:
        return depends[0]
    return None


def choose(
    candidates: list[Candidate],
    branch: str,
    server: bool,
    open_modules: str,
    resolve_transitional: dict[str, str] | None = None,
    recommended: Candidate | None = None,
) -> tuple[Candidate, list[str]]:
    """The candidate to install, and what to tell the user about how it was chosen.

    resolve_transitional maps a pinned branch's package name to the package it really installs;
    recommended is ubuntu-drivers' own choice (`list --gpgpu --recommended`), None where it has none.
    The listing's order is never used: ubuntu-drivers prints a dictionary, in no preference order."""
    notes: list[str] = []
    offered = ", ".join(c.package for c in candidates) or "nothing"
    flavour = [c for c in candidates if c.fits(server, open_modules)]
    if not flavour:
        raise PlanError(
            f"ubuntu-drivers offers no {'-server' if server else 'non-server'} driver"
            f"{' with open kernel modules' if open_modules == 'true' else ''}"
            f"{' with closed kernel modules' if open_modules == 'false' else ''} for this GPU "
            f"(offered: {offered}); change nvidia_driver_server or nvidia_driver_open"
        )
    if branch == "auto":
        return _choose_auto(candidates, flavour, server, open_modules, recommended)
    wanted = branch
    pinned_package = f"nvidia-driver-{branch}{'-server' if server else ''}"
    real = (resolve_transitional or {}).get(pinned_package)
    if real:
        match = CANDIDATE.match(real)
        if match:
            wanted = match["branch"]
            notes.append(
                f"nvidia_driver_branch={branch} is a transitional package in this archive: "
                f"{pinned_package} installs {real}, so branch {wanted} is what gets installed"
            )
    pinned = [c for c in flavour if c.branch == wanted]
    if pinned:
        # open=auto and both variants offered: the variant ubuntu-drivers recommends, else the closed one.
        prefer_open = recommended.open if recommended else False
        candidate = next((c for c in pinned if c.open == prefer_open), pinned[0])
        notes.append(f"pinned branch {branch} gives {candidate.package}")
        return candidate, notes
    raise PlanError(
        f"nvidia_driver_branch={branch} is not offered by ubuntu-drivers for this GPU"
        f"{' (it resolves to branch ' + wanted + ')' if wanted != branch else ''} "
        f"with these settings (offered: {offered}); pin one of the offered branches or use 'auto'"
    )


def _flavour_words(server: bool, open_modules: str) -> str:
    words = "-server" if server else "non-server"
    if open_modules != "auto":
        words += f" with {'open' if open_modules == 'true' else 'closed'} kernel modules"
    return words


def _choose_auto(
    candidates: list[Candidate],
    flavour: list[Candidate],
    server: bool,
    open_modules: str,
    recommended: Candidate | None,
) -> tuple[Candidate, list[str]]:
    listed = {c.package: c for c in candidates}
    if recommended is None:
        chosen = _newest(flavour)
        return chosen, [
            "this ubuntu-drivers gives no recommendation (no `list --gpgpu --recommended`): took the "
            f"highest branch offered as {_flavour_words(server, open_modules)}: {chosen.package}"
        ]
    if recommended.fits(server, open_modules):
        # The full listing names the kernel modules package where the recommendation line does not.
        chosen = listed.get(recommended.package, recommended)
        if chosen.modules_package is None and recommended.modules_package:
            chosen = recommended
        return chosen, [f"ubuntu-drivers recommends {recommended.package}"]
    same_branch = [c for c in flavour if c.branch == recommended.branch]
    if not same_branch:
        raise PlanError(
            f"ubuntu-drivers recommends {recommended.package}, and its branch {recommended.branch} is not "
            f"offered as {_flavour_words(server, open_modules)} (offered: {', '.join(listed) or 'nothing'}); "
            "change nvidia_driver_server or nvidia_driver_open, or pin nvidia_driver_branch"
        )
    chosen = next((c for c in same_branch if c.open == recommended.open), same_branch[0])
    return chosen, [
        f"ubuntu-drivers recommends {recommended.package}; with nvidia_driver_server={server} and "
        f"nvidia_driver_open={open_modules} its branch {recommended.branch} gives {chosen.package}"
    ]


def wanted_packages(
    chosen: Candidate, kernel_modules: str, fabricmanager: bool
) -> tuple[list[str], list[str]]:
    """(packages to install, problems). Userspace without the X/desktop stack, plus the kernel module."""
    packages = [
        f"nvidia-headless-no-dkms-{chosen.branch}{chosen.suffix}",
        f"nvidia-utils-{chosen.branch}{'-server' if chosen.server else ''}",
    ]
    problems = []
    if kernel_modules == "prebuilt":
        if chosen.prebuilt:
            packages.append(str(chosen.modules_package))
        elif chosen.modules_package:
            problems.append(
                f"nvidia_driver_kernel_modules=prebuilt but ubuntu-drivers offers {chosen.package} only with "
                f"DKMS kernel modules ({chosen.modules_package}): Ubuntu builds no signed modules of this "
                "branch for this kernel; set nvidia_driver_kernel_modules: dkms, or pin a branch that "
                "has linux-modules-nvidia packages"
            )
        else:
            problems.append(
                "nvidia_driver_kernel_modules=prebuilt but ubuntu-drivers names no prebuilt "
                f"linux-modules-nvidia package for {chosen.package} (is a linux-image metapackage such "
                "as linux-image-generic installed?); use dkms, or none where modules come from elsewhere"
            )
    elif kernel_modules == "dkms":
        packages.append(f"nvidia-dkms-{chosen.branch}{chosen.suffix}")
    if fabricmanager:
        packages.append(f"nvidia-fabricmanager-{chosen.branch}")
    return packages, problems


def parse_dpkg_status(text: str) -> dict[str, tuple[str, str]]:
    """`dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'` -> name: (version, abbrev)."""
    status = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            status[parts[0]] = (parts[1], parts[2].strip())
    return status


def is_installed(abbrev: str) -> bool:
    # "ii" installed, "hi" installed and held; anything else is half-installed or removed.
    return len(abbrev) >= 2 and abbrev[1] == "i" and abbrev[0] in "ih"


def is_held(abbrev: str) -> bool:
    """dpkg's selection is hold (the abbreviation's first letter: "hi", "hc", ...)."""
    return abbrev.startswith("h")


def parse_simulation(text: str) -> tuple[list[str], list[str]]:
    """`apt-get install -s` -> (packages it would install or upgrade, packages it would remove)."""
    install, remove = [], []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "Inst":
            install.append(parts[1])
        elif len(parts) >= 2 and parts[0] == "Remv":
            remove.append(parts[1])
    return install, remove


def upstream_version(debian_version: str) -> str:
    """580.178.04-0ubuntu0.22.04.1 -> 580.178.04 (what /proc/driver/nvidia/version shows)."""
    return debian_version.split(":", 1)[-1].split("-", 1)[0]


def simulated_version(simulation: str, package: str) -> str | None:
    """The version `apt-get install -s` would install for one package: the one in parentheses (an
    upgrade prints the installed one first, in brackets: `Inst pkg [old] (new suite [arch])`)."""
    for line in simulation.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "Inst" and parts[1] == package:
            new = next((part for part in parts[2:] if part.startswith("(")), None)
            return new[1:] if new else None
    return None


def loaded_module_version(proc_text: str | None) -> str | None:
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9]+(?:\.[0-9]+)+)", proc_text or "")
    return match.group(1) if match else None


def belongs_to_branch(package: str, branch: str) -> bool:
    return bool(DRIVER_PACKAGE.match(package)) and re.search(rf"-{branch}(-|\.|$)", package) is not None


def hold_set(
    branch: str,
    wanted: list[str],
    dpkg: dict[str, tuple[str, str]],
    to_install: list[str],
    to_remove: Sequence[str] = (),
) -> list[str]:
    """Every package of the chosen branch that is or will be installed (and is not being replaced)."""
    present = {name for name, (_, abbrev) in dpkg.items() if is_installed(abbrev)}
    names = set(wanted) | {n for n in present | set(to_install) if belongs_to_branch(n, branch)}
    return sorted(names - set(to_remove))


def holds_to_release(dpkg: dict[str, tuple[str, str]], hold: list[str]) -> list[str]:
    """Held driver packages outside the new hold set: another branch or flavour being replaced.
    Their holds would make apt refuse the switch."""
    return sorted(
        name
        for name, (_, abbrev) in dpkg.items()
        if is_held(abbrev) and DRIVER_PACKAGE.match(name) and name not in hold
    )


def not_yet_held(dpkg: dict[str, tuple[str, str]], hold: list[str]) -> list[str]:
    """The packages of the hold set that dpkg does not hold yet (those still to install among them):
    the role holds only these, one module run each, so a node already held costs none (a fleet's
    idempotent run made ten runs per node of them)."""
    return [name for name in hold if not is_held(dpkg.get(name, ("", ""))[1])]


def installed_branch_packages(dpkg: dict[str, tuple[str, str]], branch: str) -> tuple[list[str], list[str]]:
    """(installed, held): the packages of `branch` that dpkg has, and those of them on hold."""
    installed = sorted(
        name for name, (_, abbrev) in dpkg.items() if is_installed(abbrev) and belongs_to_branch(name, branch)
    )
    return installed, [name for name in installed if is_held(dpkg[name][1])]


def loaded_module() -> str | None:
    try:
        return loaded_module_version(Path("/proc/driver/nvidia/version").read_text())
    except OSError:
        return None


class _Host:
    """The module's commands, run with LC_ALL=C (and ubuntu-drivers pointed at a test sysfs)."""

    def __init__(self, module: AnsibleModule, sys_dir: str) -> None:
        self.module = module
        self.env = {"LC_ALL": "C"}
        if sys_dir != "/sys":
            self.env["UBUNTU_DRIVERS_SYS_DIR"] = sys_dir

    def run(self, argv: list[str], what: str, check_rc: bool = True) -> str:
        rc, out, err = self.module.run_command(argv, environ_update=self.env)
        if rc != 0 and check_rc:
            self.module.fail_json(msg=f"{what} failed (rc={rc}): {err.strip() or out.strip()}", argv=argv)
        return str(out)

    def dpkg_status(self) -> dict[str, tuple[str, str]]:
        return parse_dpkg_status(
            self.run(
                ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"], "dpkg-query"
            )
        )

    def recommended(self) -> Candidate | None:
        # An ubuntu-drivers without --recommended exits non-zero (a usage error): no recommendation.
        rc, out, _ = self.module.run_command(
            ["ubuntu-drivers", "list", "--gpgpu", "--recommended"], environ_update=self.env
        )
        return recommendation(str(out) if rc == 0 else None)

    def in_apt_sources(self, package: str) -> bool:
        return bool(
            self.run(["apt-cache", "show", "--no-all-versions", package], "apt-cache", check_rc=False).strip()
        )

    def transitional_targets(self, branch: str, server: bool) -> dict[str, str]:
        """The asked branch's driver package -> what its transitional package now installs (if it is one)."""
        package = f"nvidia-driver-{branch}{'-server' if server else ''}"
        seen = package
        for _ in range(TRANSITIONAL_DEPTH):
            control = self.run(
                ["apt-cache", "show", "--no-all-versions", seen], "apt-cache show", check_rc=False
            )
            target = transitional_target(seen, control)
            if not target:
                break
            seen = target
        return {package: seen} if seen != package else {}


def _installed_only(host: _Host, branch: str) -> None:
    """installed_only: what of this branch dpkg has, for rollback; exits the module."""
    if not re.fullmatch(r"[0-9]{3,4}", branch):
        host.module.fail_json(msg=f"installed_only needs a branch number, not {branch!r}")
    installed, held = installed_branch_packages(host.dpkg_status(), branch)
    host.module.exit_json(
        changed=False,
        branch=branch,
        installed=installed,
        held=held,
        module_loaded=loaded_module() is not None,
    )


def _chosen_packages(
    host: _Host, p: dict[str, Any], candidates: list[Candidate], recommended: Candidate | None, switches: int
) -> tuple[Candidate, list[str], list[str], bool]:
    """The driver to install and its packages (with Fabric Manager where wanted), each in the apt
    sources: (chosen, notes, packages, Fabric Manager wanted). PlanError says why there is none."""
    resolved = host.transitional_targets(p["branch"], p["server"]) if p["branch"] != "auto" else {}
    chosen, notes = choose(candidates, p["branch"], p["server"], p["open"], resolved, recommended)
    want_fm = p["fabricmanager"] == "true" or (p["fabricmanager"] == "auto" and switches > 0)
    packages, problems = wanted_packages(chosen, p["kernel_modules"], want_fm)
    if problems:
        raise PlanError("; ".join(problems))
    unknown = [name for name in packages if not host.in_apt_sources(name)]
    if unknown:
        hint = ""
        if any(name.startswith("nvidia-fabricmanager-") for name in unknown):
            hint = (
                f" ({switches} NVSwitch(es) found: Fabric Manager must match the driver branch; add "
                "an apt source that has it, or set nvidia_driver_fabricmanager: false)"
            )
        raise PlanError(f"not in the configured apt sources: {', '.join(unknown)}{hint}")
    return chosen, notes, packages, want_fm


def _changes(
    host: _Host, packages: list[str], dpkg: dict[str, tuple[str, str]]
) -> tuple[list[str], list[str], list[str], str | None]:
    """(missing, to_install, to_remove, userspace version after the install) from apt's simulation."""
    missing = [name for name in packages if not is_installed(dpkg.get(name, ("", ""))[1])]
    to_install: list[str] = []
    to_remove: list[str] = []
    utils = packages[1]
    installed_version = dpkg[utils][0] if is_installed(dpkg.get(utils, ("", ""))[1]) else None
    if missing:
        simulation = host.run(
            # The holds of a branch being replaced are released before the real install.
            ["apt-get", "install", "-s", "--no-install-recommends", "--ignore-hold", *packages],
            "apt-get install -s (simulated)",
        )
        to_install, to_remove = parse_simulation(simulation)
        installed_version = simulated_version(simulation, utils) or installed_version
    return missing, to_install, to_remove, installed_version


ARGUMENT_SPEC = {
    "branch": {"type": "str", "required": True},
    "server": {"type": "bool"},
    "open": {"type": "str", "choices": ["true", "false", "auto"]},
    "kernel_modules": {"type": "str", "choices": ["prebuilt", "dkms", "none"]},
    "fabricmanager": {"type": "str", "choices": ["true", "false", "auto"]},
    "sys_dir": {"type": "path", "default": "/sys"},
    "installed_only": {"type": "bool", "default": False},
}


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("installed_only", False, ("server", "open", "kernel_modules", "fabricmanager"))],
        supports_check_mode=True,
    )
    p = module.params
    host = _Host(module, p["sys_dir"])
    if p["installed_only"]:
        _installed_only(host, p["branch"])
    gpus, switches = count_pci_devices(p["sys_dir"])
    listing = host.run(["ubuntu-drivers", "list", "--gpgpu"], "ubuntu-drivers list --gpgpu")
    candidates = parse_gpgpu_list(listing)
    recommended = host.recommended()
    if gpus == 0 and not candidates:
        module.fail_json(
            msg=f"no NVIDIA GPU found under {p['sys_dir']}/bus/pci/devices: apply nvidia_driver "
            "only to GPU nodes (or set nvidia_driver_sys_dir for a test tree)",
            ubuntu_drivers=listing,
        )
    try:
        chosen, notes, packages, want_fm = _chosen_packages(host, p, candidates, recommended, switches)
    except PlanError as exc:
        module.fail_json(msg=str(exc), offered=[c.package for c in candidates], gpu_count=gpus)
    dpkg = host.dpkg_status()
    missing, to_install, to_remove, installed_version = _changes(host, packages, dpkg)
    loaded = loaded_module()
    userspace = upstream_version(installed_version) if installed_version else None
    hold = hold_set(chosen.branch, packages, dpkg, to_install, to_remove)
    module.exit_json(
        changed=False,
        offered=[c.package for c in candidates],
        recommended=recommended.package if recommended else None,
        driver_package=chosen.package,
        branch=chosen.branch,
        server=chosen.server,
        open=chosen.open,
        notes=notes,
        packages=packages,
        missing=missing,
        to_install=to_install,
        to_remove=to_remove,
        hold=hold,
        hold_needed=not_yet_held(dpkg, hold),
        release_holds=holds_to_release(dpkg, hold) if missing else [],
        gpu_count=gpus,
        nvswitch_count=switches,
        fabricmanager=want_fm,
        module_loaded=loaded is not None,
        loaded_version=loaded,
        userspace_version=userspace,
        # The kernel module that runs is not the userspace just installed (or none runs): only a
        # reboot brings them together. Judged from state, so an interrupted run still records it.
        reboot_needed=userspace is not None and loaded != userspace,
    )


if __name__ == "__main__":
    run_module()
