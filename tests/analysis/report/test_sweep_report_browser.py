"""A real report's index.html, opened in headless Chromium with no network: every figure
loads and every table-of-contents link lands on a heading of the page.

Needs the ``chromium`` binary (Debian: ``apt-get install chromium``; ``.ci/run`` installs
it). Without one the test is skipped and says so.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from small_sweep import small_sweep

from analysis.report import write_report

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary on PATH (apt-get install chromium); the report was not opened in a browser",
)

# Runs in the page once everything has loaded, and writes what it saw into the DOM for --dump-dom.
CHECK = """<script>window.addEventListener('load', () => {
  const imgs = [...document.images].map(i => ({src: i.src.slice(0, 40), complete: i.complete, width: i.naturalWidth}));
  const toc = [...document.querySelectorAll('nav a')].map(a => ({href: a.getAttribute('href'),
      target: (a.getAttribute('href') || '').startsWith('#')
              && !!document.getElementById(a.getAttribute('href').slice(1))}));
  const fetched = performance.getEntriesByType('resource').map(r => r.name).filter(n => !n.startsWith('data:'));
  const wide = [...document.querySelectorAll('table, img, pre, p')].filter(e => e.id !== 'shardlab-check')
      .map(e => ({tag: e.tagName, right: Math.ceil(e.getBoundingClientRect().right)})).filter(w => w.right > 1280);
  const page = document.documentElement.scrollWidth;
  const out = document.createElement('pre');
  out.id = 'shardlab-check';
  out.textContent = JSON.stringify({imgs, toc, h2: document.querySelectorAll('h2[id]').length, fetched, wide, page});
  document.body.appendChild(out);
});</script>"""


def _open_in_chromium(page, profile) -> dict:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: a remote asset would fail to load
        "--window-size=1280,2000",  # a 1280-px page: no table or figure may be wider
        "--virtual-time-budget=10000",
        "--dump-dom",
        page.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="shardlab-check">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"chromium printed no check result (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def test_report_opens_offline_fits_a_1280px_page_with_its_figures_and_a_working_contents(tmp_path, compose_cfg):
    root = small_sweep(tmp_path / "sweep", compose_cfg, extra=["trace.enabled=false"])
    # a failed point with a long error and a long point name, which once ran off the page
    from runner import run

    run(
        compose_cfg(["op.size_bytes=7", "timing.rounds=1"]),
        root / "3_op.size_bytes=7,timing.budget_s=0.2,trace.enabled=false",
    )
    index = write_report(root)
    html = index.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the report refers to a remote asset"
    # the check script goes into a copy beside the real page, so relative paths resolve the same
    page = index.with_name("index.check.html")
    page.write_text(html.replace("</body>", CHECK + "</body>"))

    seen = _open_in_chromium(page, tmp_path / "chromium-profile")

    assert len(seen["imgs"]) >= 2, seen
    for img in seen["imgs"]:
        assert img["complete"] and img["width"] > 0, f"figure did not load: {img}"
    assert len(seen["toc"]) == seen["h2"] >= 5, seen
    for link in seen["toc"]:
        assert link["target"], f"contents link goes nowhere: {link['href']}"
    assert seen["fetched"] == [], f"the page fetched files: {seen['fetched']}"
    assert seen["wide"] == [] and seen["page"] <= 1280, f"wider than a 1280-px page: {seen['wide']} {seen['page']}"
