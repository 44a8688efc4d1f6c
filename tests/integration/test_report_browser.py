"""The HTML report as a person sees it: 200 nodes rendered by headless Chromium (Debian's `chromium`
package) in a 1,400-pixel-wide window. Every area header must lie inside the window and be the
element actually drawn at its own centre (an overflow that hides or covers it does not count), and
the page must not scroll sideways; the bench charts of 200 nodes x 8 GPUs stay under 600 pixels high
and inside the window, with no label running into its bars."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dltune.fleet.cluster import load, render_html
from dltune.model import AREAS

SCREEN_WIDTH = 1400
# What a large audit produces: every area, several checks in each, long check ids and subjects.
CHECKS_PER_AREA = 7
GPUS_PER_NODE = 8
# A chart at 200 x 8 GPUs fits one screen's height (it grew 22 px per GPU: 35,000 px).
CHART_MAX_HEIGHT = 600

MEASURE = """
<script>
window.addEventListener("load", () => {
  // The grid follows the report's first section (what to fix first): measured where it is drawn.
  document.querySelector("table.matrix").scrollIntoView();
  const headers = [...document.querySelectorAll("table.matrix tr:first-child th")].slice(1);
  const found = headers.map((th) => {
    const box = th.getBoundingClientRect();
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    return {text: th.textContent, left: box.left, right: box.right, drawn: !!hit && th.contains(hit)};
  });
  const out = document.createElement("pre");
  out.id = "measured";
  const charts = [...document.querySelectorAll("svg")].map((svg) => {
    const box = svg.getBoundingClientRect();
    const labels = [...svg.querySelectorAll("text")].filter((t) => t.getAttribute("x") === "0"
      && Number(t.getAttribute("y")) > 20);
    return {
      title: svg.querySelector("title").textContent,
      width: box.width, height: box.height, right: box.right,
      widest_label: Math.max(0, ...labels.map((t) => t.getBBox().width)),
      text_right: Math.max(...[...svg.querySelectorAll("text")]
        .map((t) => t.getBBox().x + t.getBBox().width)),
      svg_width: svg.width.baseVal.value,
      first_bar: Math.min(...[...svg.querySelectorAll("rect")].map((r) => Number(r.getAttribute("x")))),
    };
  });
  out.textContent = JSON.stringify({
    charts: charts,
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
        # The bench of an 8-GPU node: one matmul figure per GPU, one training figure per node.
        bench = [
            {
                "id": "bench.matmul",
                "area": "bench",
                "status": "pass",
                "subject": f"cuda:{g}:bf16",
                "summary": "bf16 matmul",
                "metrics": {"tflops": rng.uniform(760.0, 800.0) if rng.random() > 0.005 else 450.0},
            }
            for g in range(GPUS_PER_NODE)
        ]
        bench.append(
            {
                "id": "bench.train_synthetic",
                "area": "bench",
                "status": "pass",
                "subject": "cuda:0",
                "summary": "resnet50",
                "metrics": {"images_per_s": rng.uniform(2000.0, 3000.0)},
            }
        )
        (directory / f"gpu-node-{n:03d}.bench.json").write_text(json.dumps({**document, "results": bench}))


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
    charts = measured["charts"]
    assert {c["title"] for c in charts} == {
        "matmul bf16 per GPU",
        "training throughput (synthetic data) per node",
    }
    for chart in charts:
        assert chart["height"] <= CHART_MAX_HEIGHT and chart["right"] <= SCREEN_WIDTH, chart
        # Every label ends before the bars begin: none is clipped by or drawn over a bar.
        assert 0 < chart["widest_label"] <= chart["first_bar"], chart
        assert chart["text_right"] <= chart["svg_width"], f"a text runs out of its chart: {chart}"
