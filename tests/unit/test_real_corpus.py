"""Every sample of tests/fixtures/real/ (outputs that real machines produced, published by others)
through the same code the audit and the roles use, against the verdict its header states."""

from __future__ import annotations

from collections import Counter

import pytest

from dltune.checks.gpu import xid
from dltune.probes import Snapshot
from dltune.probes.packages import KernelLog
from tests.conftest import load_role_module
from tests.real_corpus import Sample, all_samples, samples

pytest.importorskip("ansible")
plan = load_role_module("roles/nvidia_driver/library/nvidia_driver_plan.py", "nvidia_driver_plan")

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
