"""Every sample of tests/fixtures/real/ (outputs that real machines produced, published by others)
through the same code the audit and the roles use, against the verdict its header states."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

import pytest

from dltune.bench.specs import spec_for
from dltune.checks.dcgm import dcgm as dcgm_check
from dltune.checks.fabric import ib_ports, pcie_aer
from dltune.checks.gpu import sxid, xid
from dltune.checks.system import cpu_governor, time_sync
from dltune.probes import collect_snapshot, nvidia_module_version
from dltune.probes.clock import parse_timedatectl, read_time_sync
from dltune.probes.dcgm import run_dcgm_diag
from dltune.probes.fabric import parse_aer
from dltune.probes.mounts import parse_fstab, parse_mountinfo, unescape
from dltune.probes.mountstats import parse_mountstats
from dltune.probes.network import route_to
from dltune.probes.packages import kernel_log_of
from dltune.probes.runner import RecordedRunner
from dltune.snapshot import Fstab, Snapshot, fstab_entry_for, mount_at
from tests.conftest import load_role_module
from tests.fabric_tree import pci_device, write
from tests.real_corpus import Sample, all_samples, samples

pytest.importorskip("ansible")
plan = load_role_module("plugins/modules/nvidia_driver_plan.py")
data_disks_filters = load_role_module("plugins/filter/data_disks.py")

MINIMUM_PER_KIND = 5


def test_the_corpus_is_large_enough_and_every_sample_names_its_source() -> None:
    corpus = all_samples()
    per_kind = Counter(sample.kind for sample in corpus)
    assert len(corpus) >= 40, per_kind
    assert all(count >= MINIMUM_PER_KIND for count in per_kind.values()), per_kind
    for sample in corpus:
        assert sample.header.get("SOURCE") and sample.header.get("EXPECT") and sample.header.get("QUOTE"), (
            sample
        )
        assert sample.body.strip(), sample


@pytest.mark.parametrize("sample", samples("ubuntu_drivers"), ids=str)
def test_ubuntu_drivers_offers(sample: Sample) -> None:
    """The role's default settings (branch auto, -server, open auto, prebuilt modules); these listings
    come without a recommendation, as from an ubuntu-drivers too old to give one."""
    expect = sample.expect
    if expect.startswith("recommendation "):
        package, modules = expect.removeprefix("recommendation ").split()
        rec = plan.recommendation(sample.body)
        assert rec is not None and (rec.package, rec.modules_package) == (package, modules)
        return
    chosen, _ = plan.choose(plan.parse_gpgpu_list(sample.body), "auto", True, "auto")
    packages, problems = plan.wanted_packages(chosen, "prebuilt", False)
    if expect.startswith("refuse prebuilt: "):
        assert problems and chosen.package in expect, (chosen, problems)
        return
    package, modules = expect.split()
    assert (chosen.package, problems) == (package, []), (chosen, problems)
    assert modules in packages


def _verdicts_expected(expect: str) -> dict[str | None, str]:
    """ "pass", or "fail 0000:05:00; warn 0000:06:00" (per PCI device) as subject -> status."""
    if expect == "pass":
        return {None: "pass"}
    expected: dict[str | None, str] = {}
    for part in expect.split("; "):
        status, subject = part.split(" ", 1)
        expected[subject if subject.startswith("minor") or subject == "unknown" else f"PCI:{subject}"] = (
            status
        )
    return expected


@pytest.mark.parametrize("sample", samples("sxid"), ids=str)
def test_nvswitch_sxids(sample: Sample) -> None:
    """gpu.sxid on published kernel logs of NVSwitch systems: per switch, fatal (by the line's word or
    NVIDIA's list) fails, non-fatal warns, a log of switches without SXid passes."""
    results = sxid(Snapshot(root="/", kernel_log=kernel_log_of(sample.body)))
    verdicts = {r.subject: r.status.value for r in results}
    assert verdicts == _verdicts_expected(sample.expect), [
        (r.subject, r.status.value, r.summary) for r in results
    ]


@pytest.mark.parametrize("sample", samples("kernel_log"), ids=str)
def test_kernel_logs(sample: Sample) -> None:
    """gpu.xid on the published kernel log (read as root: dmesg_restrict does not apply)."""
    results = xid(Snapshot(root="/", kernel_log=kernel_log_of(sample.body)))
    verdicts = {r.subject: r.status.value for r in results}
    assert verdicts == _verdicts_expected(sample.expect), [
        (r.subject, r.status.value, r.summary) for r in results
    ]
    for result in results:
        assert result.critical == (result.status.value == "fail"), result


def _expectations(sample: Sample) -> list[list[str]]:
    return [part.split(" ") for part in sample.expect.split("; ")]


def libmount_mount_points(fstab: Fstab) -> list[str]:
    """The mount points of the lines libmount reads as entries, in file order: the audit's entries and
    the lines it reports though libmount takes them (a type field holding options)."""
    kept = [(u.line_no, u.mount_point) for u in fstab.unparsed if u.mount_point is not None]
    return [point for _, point in sorted([*((e.line_no, e.mount_point) for e in fstab.entries), *kept])]


@pytest.mark.parametrize("sample", samples("fstab"), ids=str)
def test_fstabs(sample: Sample) -> None:
    """The audit's parser (util-linux rules) on every line, and the data_disks role's reader on the
    lines libmount reads (it must find a line mount(8) cannot mount to replace it in place)."""
    fstab = parse_fstab(sample.body)
    for words in _expectations(sample):
        if words[0] == "entries":
            assert len(fstab.entries) == int(words[1]), fstab
        elif words[0] == "unparsed":
            assert len(fstab.unparsed) == int(words[1]), fstab.unparsed
        elif words[0] == "unparsed_at":
            assert int(words[1]) in [u.line_no for u in fstab.unparsed], fstab.unparsed
        elif words[0] == "kept_for":
            assert words[1] in [u.mount_point for u in fstab.unparsed], fstab.unparsed
        elif words[0] == "spec":
            entry = fstab_entry_for(fstab, unescape(words[1]))
            assert entry is not None and entry.spec == words[2], entry
    assert len(fstab.entries) + len(fstab.unparsed) == len(
        [line for line in sample.body.splitlines() if line.strip() and not line.strip().startswith("#")]
    )
    role_points = data_disks_filters.data_disks_fstab_mount_points(sample.body)
    assert role_points == libmount_mount_points(fstab), (role_points, fstab)


@pytest.mark.parametrize("sample", samples("mountinfo"), ids=str)
def test_mountinfos(sample: Sample) -> None:
    mounts = parse_mountinfo(sample.body)
    for words in _expectations(sample):
        if words[0] == "mounts":
            assert len(mounts) == int(words[1])
        elif words[0] == "visible":
            mount = mount_at(mounts, unescape(words[1]))
            assert mount is not None and mount.fstype == words[2], mount
            if len(words) > 3:
                assert words[3] in mount.options, mount


@pytest.mark.parametrize("sample", samples("mountstats"), ids=str)
def test_mountstats(sample: Sample) -> None:
    stats = parse_mountstats(sample.body)
    by_point = {m.mount_point: m for m in stats.nfs}
    for words in _expectations(sample):
        if words[0] == "nfs":
            assert len(stats.nfs) == int(words[1]), stats
        elif words[0] == "other":
            assert stats.other_mounts == int(words[1]), stats
        elif words[0] == "mount":
            mount = by_point[words[1]]
            assert mount.fstype == words[2]
            protocol, port = words[3], words[4]
            if protocol == "-":
                assert mount.transports == ()
            else:
                assert mount.transports[0].protocol == protocol
                if port != "-":
                    assert mount.transports[0].source_port == int(port)
            for option in words[5:]:
                key, _, value = option.partition("=")
                assert mount.options.get(key) == value, mount.options
    assert stats.stray_lines == 0


@pytest.mark.parametrize("sample", samples("nvidia_version"), ids=str)
def test_nvidia_versions(sample: Sample) -> None:
    """The audit's reading of the loaded module and the driver role's (which decides a reboot) agree."""
    assert nvidia_module_version(sample.body) == sample.expect
    assert plan.loaded_module_version(sample.body) == sample.expect


@pytest.mark.parametrize("sample", samples("ip_route_get"), ids=str)
def test_ip_route_get(sample: Sample) -> None:
    words = sample.expect.split()
    command = "ip -j route get 192.0.2.1"
    runner = RecordedRunner({command: {"stdout": sample.body}})
    choice = route_to(runner, "192.0.2.1")
    assert (choice.dev, choice.prefsrc or "-", choice.error) == (words[1], words[3], None)


@pytest.mark.parametrize("sample", samples("gpu_names"), ids=str)
def test_gpu_names_map_to_their_own_peak(sample: Sample) -> None:
    """Exact device names as NVML, nvidia-smi and torch printed them on real nodes: each maps to its own
    variant's figures (PCIe vs SXM vs NVL, 40 vs 80 GB, GH200 vs H200), a MIG slice and an unlisted
    card to none (compared with the node's other devices of the same name only)."""
    name = sample.header["NAME"]
    assert name in sample.body
    spec = spec_for(name)
    assert (spec.model if spec else "none") == sample.expect


def cpufreq_tree(sample: Sample, root: Path) -> Path:
    """A sysfs tree holding what the sample shows: "path = value" lines as they are, or one value per
    CPU of the file its COMMAND reads (with the GOVERNOR its header names, where the sample has none)."""
    files: dict[str, str] = {}
    lines = [line for line in sample.body.splitlines() if line.strip()]
    if all(" = " in line for line in lines):
        for line in lines:
            path, _, value = line.partition(" = ")
            files[path.strip()] = value.split(" [")[0].strip()
    else:
        name = next(
            n for n in ("scaling_governor", "energy_performance_preference") if n in sample.header["COMMAND"]
        )
        for cpu, value in enumerate(lines):
            files[f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/{name}"] = value.strip()
            if "GOVERNOR" in sample.header:
                files[f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"] = sample.header[
                    "GOVERNOR"
                ]
    for path, value in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(value + "\n")
    return root


@pytest.mark.parametrize("sample", samples("cpufreq"), ids=str)
def test_cpu_governors(sample: Sample, tmp_path: Path) -> None:
    snapshot = collect_snapshot(cpufreq_tree(sample, tmp_path), areas=["system"])
    assert cpu_governor(snapshot).status.value == sample.expect, cpu_governor(snapshot).summary


@pytest.mark.parametrize("sample", samples("timedatectl"), ids=str)
def test_timedatectl(sample: Sample) -> None:
    """Both wordings of `timedatectl status` (and `show`'s NTPSynchronized=, tested beside)."""
    assert parse_timedatectl(sample.body) is (sample.expect == "yes")
    recorded = RecordedRunner(
        {
            "systemd-detect-virt --container": {"returncode": 1, "stdout": "none\n"},
            "timedatectl status": {"stdout": sample.body},
        }
    )
    sync = read_time_sync(recorded)
    assert sync.synchronized is (sample.expect == "yes") and sync.source == "timedatectl status"
    assert time_sync(Snapshot(root="/", time_sync=sync)).status.value == (
        "pass" if sample.expect == "yes" else "fail"
    )


@pytest.mark.parametrize("sample", samples("aer"), ids=str)
def test_aer_counters(sample: Sample, tmp_path: Path) -> None:
    """The published file as a GPU's aer_dev_* file under sysfs, through the probe and fabric.pcie_aer."""
    pci_device(tmp_path, "0000:18:00.0")
    write(tmp_path, f"/sys/devices/pci0000:00/0000:18:00.0/{sample.header['FILE']}", sample.body)
    assert parse_aer(sample.body)[0] == int(sample.header["TOTAL"])
    snapshot = collect_snapshot(tmp_path, areas=["fabric"])
    (result,) = pcie_aer(snapshot)
    assert result.status.value == sample.expect, result.summary


def ibstatus_ports(text: str) -> list[tuple[str, int, dict[str, str]]]:
    """ibstatus's blocks: ("Infiniband device 'mlx5_0' port 1 status:", then "key: value" lines,
    each value a sysfs file's content as ibstatus printed it)."""
    ports: list[tuple[str, int, dict[str, str]]] = []
    for line in text.splitlines():
        found = re.match(r"Infiniband device '([^']+)' port (\d+) status:", line.strip())
        if found:
            ports.append((found.group(1), int(found.group(2)), {}))
        elif ports and ":" in line:
            key, _, value = line.partition(":")
            ports[-1][2][key.strip()] = value.strip()
    return ports


def ibstatus_tree(sample: Sample, root: Path) -> list[tuple[str, int, dict[str, str]]]:
    ports = ibstatus_ports(sample.body)
    files = {"state": "state", "phys state": "phys_state", "rate": "rate", "link_layer": "link_layer"}
    for device, number, values in ports:
        for key, name in files.items():
            write(root, f"/sys/class/infiniband/{device}/ports/{number}/{name}", values[key] + "\n")
    return ports


@pytest.mark.parametrize("sample", samples("ibstatus"), ids=str)
def test_ibstatus_ports(sample: Sample, tmp_path: Path) -> None:
    """Each port's files rebuilt under sysfs from ibstatus (which prints them as they are), read by
    the audit's probe (its grep child), judged with no expectations, then with each active port
    expected at its own rate (pass) and at twice it (fail)."""
    ports = ibstatus_tree(sample, tmp_path)
    snapshot = collect_snapshot(tmp_path, areas=["fabric"])
    assert len(snapshot.fabric.ib_ports) == len(ports)
    verdicts = {r.subject: r.status.value for r in ib_ports(snapshot)}
    expected = dict(pair.split("=") for pair in sample.expect.split())
    assert verdicts == expected
    active = [p for p in snapshot.fabric.ib_ports if p.linked]
    for factor, status in ((1, "pass"), (2, "fail")):
        wanted = [
            {
                "device": p.device,
                "port": p.port,
                "rate_gbps": (p.rate_gbps or 0) * factor,
                "link_layer": p.link_layer,
            }
            for p in active
        ]
        judged = ib_ports(dataclasses.replace(snapshot, expected={"health": {"ib_ports": wanted}}))
        assert {r.status.value for r in judged if r.subject in {p.name for p in active}} == {status}


@pytest.mark.parametrize("sample", samples("dcgm_diag"), ids=str)
def test_dcgm_diagnostics(sample: Sample) -> None:
    """Both of dcgmi's JSON shapes (3.x "DCGM GPU Diagnostic", 4.x "DCGM Diagnostic" with entities),
    through the probe's runner path and the gpu.dcgm check: every result's id and status."""
    recorded = RecordedRunner({"dcgmi diag -r 1 -j --timeout 60": {"returncode": 0, "stdout": sample.body}})
    diag = run_dcgm_diag(recorded, 1, 60)
    assert diag.error is None, diag.error
    judged = {r.id: r.status.value for r in dcgm_check(Snapshot(root="/", dcgm=diag))}
    assert judged == dict(pair.split("=") for pair in sample.expect.split())
    if "VERSION" in sample.header:
        assert diag.version == sample.header["VERSION"]
