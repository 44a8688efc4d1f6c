"""Operators' acknowledgements (dltune.fleet.acks, `dltune ack`): what they change in a result, when they end,
which files are trusted, and what the audit, the metrics and the health check make of them."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dltune.cli import app, run
from dltune.fleet import acks
from dltune.fleet.slurm_health import Policy, apply
from dltune.model import InputError, Result, Status
from dltune.outputs.prometheus import render_prometheus
from tests.unit.test_slurm_health import FakeSlurm

NOW = 1.9e9
DAY = 86400.0
GPU2 = "2:GPU-1f2e3d4c-0000-1111-2222-333344445555"
ECC_GPU2 = Result("gpu.ecc", Status.FAIL, "4 uncorrected ECC errors", GPU2, critical=True)
ECC_GPU3 = Result("gpu.ecc", Status.FAIL, "1 uncorrected ECC error", "3:GPU-aa", critical=True)
RMA = acks.Ack("gpu.ecc", GPU2, "alice", "RMA 4711 pending", NOW - DAY, NOW + 14 * DAY)


def test_an_acknowledged_fail_reads_warn_not_critical_and_says_who_why_and_until_when() -> None:
    marked = acks.apply([ECC_GPU2, ECC_GPU3], [RMA], NOW)
    assert (marked[0].status, marked[0].critical) == (Status.WARN, False)
    assert marked[0].summary == (
        "acknowledged by alice until 2030-03-31T17:46:40Z (RMA 4711 pending): 4 uncorrected ECC errors"
    )
    assert marked[0].acknowledged == {
        "by": "alice",
        "why": "RMA 4711 pending",
        "since": "2030-03-16T17:46:40Z",
        "until": "2030-03-31T17:46:40Z",
        "until_timestamp": NOW + 14 * DAY,
        "was": "fail",
        "was_critical": True,
    }
    assert marked[1] == ECC_GPU3  # another GPU: not covered


def test_an_acknowledgement_without_a_subject_covers_every_subject_of_its_check_only() -> None:
    every = acks.Ack("gpu.ecc", None, "bob", "policy", NOW, NOW + DAY)
    other = Result("gpu.xid", Status.FAIL, "Xid 79", GPU2, critical=True)
    marked = acks.apply([ECC_GPU2, ECC_GPU3, other], [every], NOW)
    assert [r.status for r in marked] == [Status.WARN, Status.WARN, Status.FAIL]


@pytest.mark.parametrize(
    ("now", "applies"),
    [(NOW + 14 * DAY - 1, True), (NOW + 14 * DAY, False), (NOW - DAY - 60, True), (NOW - DAY - 61, False)],
)
def test_an_acknowledgement_ends_at_its_until_by_itself(now: float, applies: bool) -> None:
    """In force from its since (a minute of clock slack) to strictly before its until."""
    marked = acks.apply([ECC_GPU2], [RMA], now)
    assert (marked[0].acknowledged is not None) is applies


@pytest.mark.parametrize("status", [Status.PASS, Status.ERROR, Status.SKIP])
def test_an_acknowledgement_never_changes_a_pass_an_error_or_a_skip(status: Status) -> None:
    result = Result("gpu.ecc", status, "whatever", GPU2, critical=True)
    assert acks.apply([result], [RMA], NOW) == [result]


def test_an_acknowledged_finding_no_longer_drains(tmp_path: Path) -> None:
    slurm = FakeSlurm({f"gpu{i:02d}": ("IDLE", "gpu", "") for i in range(1, 31)})
    said, _ = apply("gpu01", acks.apply([ECC_GPU2], [RMA], NOW), slurm, Policy(), None, NOW)
    assert said == "gpu01 left as it is (IDLE)" and slurm.nodes["gpu01"][0] == "IDLE"
    # Expired: the same finding drains.
    said, _ = apply("gpu01", acks.apply([ECC_GPU2], [RMA], NOW + 15 * DAY), slurm, Policy(), None, NOW)
    assert said == "drained gpu01: dltune: gpu.ecc"


def test_an_acknowledged_finding_is_in_the_metrics_with_its_end() -> None:
    text = render_prometheus(acks.apply([ECC_GPU2], [RMA], NOW), datetime.fromtimestamp(NOW, timezone.utc))
    labels = 'check="gpu.ecc",area="gpu",gpu="2",UUID="GPU-1f2e3d4c-0000-1111-2222-333344445555"'
    assert f"dltune_check_acknowledged{{{labels}}} 1.0" in text
    assert f"dltune_check_acknowledged_until_timestamp_seconds{{{labels}}} {NOW + 14 * DAY!r}" in text
    assert f"dltune_check_critical{{{labels}}} 0.0" in text


@pytest.mark.parametrize(
    ("given", "until"),
    [
        ("90m", NOW + 5400),
        ("12h", NOW + 12 * 3600),
        ("7d", NOW + 7 * DAY),
        ("2w", NOW + 14 * DAY),
        ("90d", NOW + 90 * DAY),
        ("2030-04-01", datetime(2030, 4, 1, tzinfo=timezone.utc).timestamp()),
        ("2030-04-01T18:00Z", datetime(2030, 4, 1, 18, tzinfo=timezone.utc).timestamp()),
    ],
)
def test_until_is_a_duration_or_a_utc_date(given: str, until: float) -> None:
    assert acks.parse_until(given, NOW) == until


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("91d", "--until='91d' is more than 90 days ahead: acknowledge for less, renew later"),
        ("13w", "--until='13w' is more than 90 days ahead: acknowledge for less, renew later"),
        ("0m", "--until='0m' is not in the future"),
        ("2020-01-01", "--until='2020-01-01' is not in the future"),
        ("forever", "--until='forever': give a duration (90m, 12h, 7d, 2w) or a UTC date (2026-12-24 or "
         "2026-12-24T18:00)"),
        ("7 d", "--until='7 d': give a duration (90m, 12h, 7d, 2w) or a UTC date (2026-12-24 or "
         "2026-12-24T18:00)"),
    ],
)  # fmt: skip
def test_an_until_that_is_past_too_far_or_unreadable_is_refused_naming_it(given: str, said: str) -> None:
    with pytest.raises(InputError) as refused:
        acks.parse_until(given, NOW)
    assert str(refused.value) == said


def test_the_file_round_trips_and_replacing_keeps_one_per_check_and_subject(tmp_path: Path) -> None:
    path = str(tmp_path / "etc" / "acks.json")
    renewed = acks.Ack("gpu.ecc", GPU2, "carol", "RMA 4711 still pending", NOW, NOW + 30 * DAY)
    ended = acks.Ack("gpu.xid", None, "dave", "old", NOW - 9 * DAY, NOW - DAY)
    kept = acks.added([RMA, ended], renewed, NOW)
    assert kept == [renewed]  # the ended one dropped, the same check and subject replaced
    acks.save(path, kept)
    assert acks.load(path) == ([renewed], "")
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    remaining, removed = acks.removed(kept, "gpu.ecc", None, NOW)
    assert (remaining, removed) == ([], 1)


@pytest.mark.parametrize(
    ("plant", "said"),
    [
        ("other_writable", "not a regular file of root's that only root may write"),
        ("link", "not a regular file of root's that only root may write"),
        ("fifo", "not a regular file of root's that only root may write"),
        ("open_dir", "its directory may be written by others"),
        ("not_json", "Expecting property name"),
        ("wrong_shape", "not an object with a list 'acks'"),
        ("bad_item", "since and until must be times (epoch seconds)"),
    ],
)
def test_a_file_a_user_could_have_written_or_of_another_shape_is_not_used(
    tmp_path: Path, plant: str, said: str
) -> None:
    """A user who could write the file could silence any finding: only root's (or, in a fixture tree,
    this user's) file that no one else may write, in such a directory, is used; the note says why."""
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o755)
    path = directory / "acks.json"
    good = json.dumps({"acks": [RMA.to_json()]})
    if plant == "link":
        (tmp_path / "elsewhere.json").write_text(good)
        path.symlink_to(tmp_path / "elsewhere.json")
    elif plant == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(
            {"not_json": "{", "wrong_shape": "[]", "bad_item": '{"acks": [{"check": "gpu.ecc", "by": "a", '
             '"why": "b", "since": "now", "until": 1}]}'}.get(plant, good)
        )  # fmt: skip
        path.chmod(0o666 if plant == "other_writable" else 0o644)
    if plant == "open_dir":
        directory.chmod(0o777)
    found, note = acks.load(str(path))
    assert found == [] and note.startswith(f"acknowledgements {path} not used: ") and said in note


def test_dltune_ack_records_lists_and_clears_and_refuses_bad_input_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "acks.json"
    runner = CliRunner()
    common = ["--ack-file", str(path)]
    done = runner.invoke(app, ["ack", "gpu.ecc", "--subject", GPU2, "--why", "RMA 4711", "--until", "7d",
                               "--by", "alice", *common])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert re.fullmatch(
        rf"dltune ack: gpu.ecc {GPU2} acknowledged by alice until \S+Z \(RMA 4711\)\n", done.stdout
    )
    listed = runner.invoke(app, ["ack", "--list", *common])
    assert [json.loads(line)["why"] for line in listed.stdout.splitlines()] == ["RMA 4711"]
    before = path.read_bytes()
    for argv, said in (
        (
            ["ack", "gpu.nope", "--why", "x", "--until", "1d"],
            "CHECK='gpu.nope' is not one of dltune's checks",
        ),
        (["ack", "gpu.ecc", "--why", "x", "--until", "1y"], "--until='1y': give a duration"),
        (["ack", "gpu.ecc", "--why", "  ", "--until", "1d"], "--why is empty"),
        (["ack", "gpu.ecc", "--why", "a\nb", "--until", "1d"], "--why: one line"),
        (["ack", "gpu.ecc", "--until", "1d"], "--why and --until are both needed"),
        (["ack"], "CHECK is missing"),
    ):
        code = run([*argv, *common])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("dltune ack: ") and said in err, (argv, err)
        assert len(err.strip().splitlines()) == 1
    assert path.read_bytes() == before
    cleared = runner.invoke(app, ["ack", "gpu.ecc", "--clear", *common])
    assert cleared.exit_code == 0 and "1 acknowledgement(s) of gpu.ecc ended" in cleared.stdout
    assert runner.invoke(app, ["ack", "--list", *common]).stdout == ""


def test_the_audit_applies_the_nodes_acknowledgements_and_warns_about_an_untrusted_file(
    tmp_path: Path,
) -> None:
    from dltune.commands.node import acknowledged

    (tmp_path / "etc" / "dltune").mkdir(parents=True)
    acks.save(str(tmp_path / "etc" / "dltune" / "acks.json"), [RMA])
    marked = acknowledged([ECC_GPU2], tmp_path)
    # RMA's window is around NOW (2030): today it has not begun, so nothing is acknowledged.
    assert marked == [ECC_GPU2]
    live = acks.Ack("gpu.ecc", GPU2, "alice", "RMA", 0.0, 4e9)
    acks.save(str(tmp_path / "etc" / "dltune" / "acks.json"), [live])
    assert acknowledged([ECC_GPU2], tmp_path)[0].status is Status.WARN
    (tmp_path / "etc" / "dltune" / "acks.json").chmod(0o666)
    marked = acknowledged([ECC_GPU2], tmp_path)
    assert marked[0] == ECC_GPU2 and marked[1].id == "system.acknowledgements"
    assert marked[1].status is Status.WARN and "not used" in marked[1].summary
