"""slurm.conf has two readers: the audit (probes/jobenv.parse_slurm_conf, then
checks/job_scratch.prolog_runs_at_allocation) and role slurm_tmpdir's module (parse, runs_at_allocation),
which writes the file. Both must read any slurm.conf alike: the same effective Prolog, Epilog,
TaskProlog and PrologFlags (keys case-insensitive, the last assignment wins) and the same decision on
whether the Prolog runs at allocation. Fed the same real files (tests/fixtures/real/slurm_conf, each
with the verdict its header states) and generated lines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dltune.checks.job_scratch import prolog_runs_at_allocation
from dltune.probes.jobenv import parse_slurm_conf
from tests.conftest import load_role_module
from tests.real_corpus import Sample, samples

conf = load_role_module("plugins/modules/slurm_tmpdir_conf.py")
KEYS = ("prolog", "epilog", "taskprolog", "prologflags")


def both_readings(text: str) -> tuple[dict[str, str], dict[str, str]]:
    audit = parse_slurm_conf(text)
    role = conf.parse(text)
    return {k: audit[k] for k in KEYS if k in audit}, {k: role[k] for k in KEYS if k in role}


def expected(sample: Sample) -> tuple[bool, dict[str, str]]:
    """`alloc; prolog=/p; epilog=none; ...` as (runs at allocation, key -> value, 'none' absent)."""
    verdict, *assignments = [part.strip() for part in sample.expect.split(";")]
    assert verdict in ("alloc", "no-alloc"), sample
    values = dict(part.split("=", 1) for part in assignments)
    return verdict == "alloc", values


@pytest.mark.parametrize("sample", samples("slurm_conf"), ids=str)
def test_real_slurm_conf_is_read_alike_by_the_audit_and_the_role(sample: Sample) -> None:
    audit, role = both_readings(sample.body)
    assert audit == role, sample
    at_allocation, values = expected(sample)
    flags = audit.get("prologflags", "")
    assert prolog_runs_at_allocation(flags) is conf.runs_at_allocation(flags) is at_allocation, flags
    for key, value in values.items():
        assert audit.get(key, "none") == value, (sample, key)


def test_the_corpus_has_both_verdicts() -> None:
    verdicts = {expected(sample)[0] for sample in samples("slurm_conf")}
    assert verdicts == {True, False}


KEY_SPELLINGS = st.sampled_from(["Prolog", "prolog", "PROLOG", "Epilog", "TaskProlog", "PrologFlags",
                                 "prologflags", "NodeName", "SlurmctldHost"])  # fmt: skip
VALUES = st.sampled_from(["/etc/slurm/prolog.sh", "Alloc", "Contain", "alloc,contain", "X11", "Contain,X11",
                          "NoHold", "", "Alloc,", ",Contain", "a b", "x\tContain"])  # fmt: skip
LINES = st.builds(
    lambda indent, key, eq, value, comment: f"{indent}{key}{eq}{value}{comment}",
    st.sampled_from(["", " ", "\t"]),
    KEY_SPELLINGS,
    st.sampled_from(["=", " = ", "= ", " ="]),
    VALUES,
    st.sampled_from(["", " # note", "#", "   "]),
) | st.sampled_from(["# PrologFlags=Alloc", "NodeName=n1 CPUs=4 State=UNKNOWN", "", "include other.conf"])


@settings(max_examples=300)
@given(st.lists(LINES, max_size=8).map("\n".join))
def test_any_slurm_conf_is_read_alike(text: str) -> None:
    audit, role = both_readings(text)
    assert audit == role
    flags = audit.get("prologflags", "")
    assert prolog_runs_at_allocation(flags) is conf.runs_at_allocation(flags)
