"""Every sample of tests/fixtures/real/ (outputs that real machines produced, published by others)
through the same code the audit and the roles use, against the verdict its header states."""

from __future__ import annotations

from collections import Counter

import pytest

from dltune.checks.gpu import xid
from dltune.probes import Snapshot
from dltune.probes.mounts import fstab_entry_for, mount_at, parse_fstab, parse_mountinfo, unescape
from dltune.probes.packages import KernelLog
from tests.conftest import load_role_module
from tests.real_corpus import Sample, all_samples, samples

pytest.importorskip("ansible")
plan = load_role_module("roles/nvidia_driver/library/nvidia_driver_plan.py", "nvidia_driver_plan")
data_disks_filters = load_role_module("roles/data_disks/filter_plugins/data_disks.py", "data_disks_filters")

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


@pytest.mark.parametrize("sample", samples("kernel_log"), ids=str)
def test_kernel_logs(sample: Sample) -> None:
    """gpu.xid on the published kernel log (read as root: dmesg_restrict does not apply)."""
    results = xid(Snapshot(root="/", kernel_log=KernelLog(sample.body)))
    verdicts = {r.subject: r.status.value for r in results}
    expected = {}
    for part in sample.expect.split("; "):
        status, subject = part.split(" ", 1)
        expected[subject if subject.startswith("minor") else f"PCI:{subject}"] = status
    assert verdicts == expected, [(r.subject, r.status.value, r.summary) for r in results]
    for result in results:
        assert result.critical == (result.status.value == "fail"), result


def _expectations(sample: Sample) -> list[list[str]]:
    return [part.split(" ") for part in sample.expect.split("; ")]


@pytest.mark.parametrize("sample", samples("fstab"), ids=str)
def test_fstabs(sample: Sample) -> None:
    """The audit's parser (util-linux rules) and the data_disks role's reader agree on every line."""
    fstab = parse_fstab(sample.body)
    for words in _expectations(sample):
        if words[0] == "entries":
            assert len(fstab.entries) == int(words[1]), fstab
        elif words[0] == "unparsed":
            assert len(fstab.unparsed) == int(words[1]), fstab.unparsed
        elif words[0] == "spec":
            entry = fstab_entry_for(fstab, words[1])
            assert entry is not None and entry.spec == words[2], entry
    assert len(fstab.entries) + len(fstab.unparsed) == len(
        [line for line in sample.body.splitlines() if line.strip() and not line.strip().startswith("#")]
    )
    role_points = data_disks_filters.data_disks_fstab_mount_points(sample.body)
    assert role_points == [e.mount_point for e in fstab.entries], (role_points, fstab)


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
