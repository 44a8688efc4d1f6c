"""The HTML report as a person sees it: 200 nodes rendered by headless Chromium (Debian's `chromium`
package) in a 1,400-pixel-wide window. Every area header must lie inside the window and be the
element actually drawn at its own centre (an overflow that hides or covers it does not count), and
the page must not scroll sideways."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dltune.cluster import load, render_html
from dltune.model import AREAS

SCREEN_WIDTH = 1400
# What a large audit produces: every area, several checks in each, long check ids and subjects.
CHECKS_PER_AREA = 7

MEASURE = """
<script>
window.addEventListener("load", () => {
  const headers = [...document.querySelectorAll("table.matrix tr:first-child th")].slice(1);
  const found = headers.map((th) => {
    const box = th.getBoundingClientRect();
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    return {text: th.textContent, left: box.left, right: box.right, drawn: !!hit && th.contains(hit)};
  });
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({
    headers: found,
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
  });
  document.body.appendChild(out);
});
</script>
"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("DLTUNE_LAB_REQUIRED"):
            pytest.fail("chromium is not installed (make pytest installs Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def write_nodes(directory: Path, count: int) -> None:
    rng = random.Random(7)  # noqa: S311 - test data, not secrets
    for n in range(count):
        results = []
        for area in AREAS:
            for c in range(CHECKS_PER_AREA):
                status = rng.choices(["pass", "warn", "fail", "skip", "error"], [80, 8, 4, 7, 1])[0]
                results.append(
                    {
                        "id": f"{area}.a_rather_long_check_name_{c}",
                        "area": area,
                        "status": status,
                        "subject": f"/data/volume-{c}/with/a/long/path",
                        "summary": f"{status}: what the check found on this node, in a sentence",
                    }
                )
        document = {
            "schema_version": 1,
            "host": f"gpu-node-{n:03d}.cluster.example.org",
            "valid_until": "2999-01-01T00:00:00+00:00",
            "results": results,
        }
        (directory / f"gpu-node-{n:03d}.audit.json").write_text(json.dumps(document))


def test_two_hundred_nodes_fit_a_1400_pixel_screen(tmp_path: Path) -> None:
    browser = chromium()
    reports = tmp_path / "reports"
    reports.mkdir()
    write_nodes(reports, 200)
    page = render_html(load([reports]), "2026-11-24T00:00:00+00:00")
    assert page.count("<tr><th>gpu-node-") == 200
    measured_page = tmp_path / "report.html"
    measured_page.write_text(page.replace("</body>", MEASURE + "</body>"))
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--window-size={SCREEN_WIDTH},900",
            "--virtual-time-budget=5000",
            "--dump-dom",
            measured_page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    match = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, flags=re.DOTALL)
    assert match, f"no measurement from chromium (rc {done.returncode}): {done.stderr[-2000:]}"
    measured = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert measured["innerWidth"] == SCREEN_WIDTH
    headers = measured["headers"]
    assert [h["text"] for h in headers] == list(AREAS)
    for header in headers:
        assert header["left"] >= 0 and header["right"] <= SCREEN_WIDTH, header
        assert header["drawn"], f"{header['text']} is covered or clipped"
    assert measured["scrollWidth"] <= SCREEN_WIDTH, "the page scrolls sideways"
