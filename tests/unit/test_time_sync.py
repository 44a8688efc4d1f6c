"""system.time_sync through recorded command outputs: a container shares its host's clock (skip, as
the lab's nodes and molecule's containers do), `timedatectl show` (systemd 239+) or `status` (older)
say whether the kernel's clock is synchronised, and no answer at all is a skip that says why."""

from __future__ import annotations

from dltune.checks.system import time_sync
from dltune.model import Status
from dltune.probes.clock import parse_timedatectl, read_time_sync
from dltune.probes.runner import RecordedRunner
from dltune.snapshot import Snapshot

NOT_A_CONTAINER = {"systemd-detect-virt --container": {"returncode": 1, "stdout": "none\n"}}


def judged(recordings: dict[str, dict[str, object]]) -> tuple[Status, str]:
    result = time_sync(Snapshot(root="/", time_sync=read_time_sync(RecordedRunner(recordings))))
    # An unsynchronised clock is typically the site's time source failing every node at once.
    assert (result.shared_dependency is not None) is (result.status is Status.FAIL), result
    return result.status, result.summary


def test_a_container_is_judged_on_its_host() -> None:
    status, summary = judged({"systemd-detect-virt --container": {"stdout": "docker\n"}})
    assert status is Status.SKIP and "docker container" in summary


def test_timedatectl_show_says_it_first() -> None:
    show = "Timezone=UTC\nLocalRTC=no\nCanNTP=yes\nNTP=yes\nNTPSynchronized=no\n"
    status, summary = judged({**NOT_A_CONTAINER, "timedatectl show": {"stdout": show}})
    assert status is Status.FAIL and "not synchronised" in summary
    assert parse_timedatectl(show.replace("NTPSynchronized=no", "NTPSynchronized=yes")) is True


def test_no_timedatectl_answer_is_a_skip_naming_why() -> None:
    status, summary = judged(
        {
            **NOT_A_CONTAINER,
            "timedatectl show": {
                "returncode": 1,
                "stderr": "System has not been booted with systemd as init system (PID 1).\n",
            },
            "timedatectl status": {"returncode": 1, "stderr": "Failed to connect to bus: Host is down\n"},
        }
    )
    assert status is Status.SKIP and "Host is down" in summary
    assert parse_timedatectl("Local time: Tue\n") is None
