"""Open an HTML page in headless Chromium and check that its plotly figures rendered.

Needs Debian's ``chromium`` package at ``/usr/bin/chromium`` (CI installs it in
``.ci/run``); without it the check fails rather than skips, so a CI image that lost it is
noticed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["CHROMIUM", "assert_plots_rendered", "rendered_dom"]

CHROMIUM = Path("/usr/bin/chromium")


def rendered_dom(page: Path, scratch: Path) -> str:
    """The DOM of ``page`` after its scripts ran (``--dump-dom``), with Chromium's profile,
    home and sockets under ``scratch`` (or a short folder under /tmp, removed after)."""
    if not CHROMIUM.exists():
        raise AssertionError(
            f"{CHROMIUM} is missing: this check needs Debian's chromium package, which CI "
            "installs (apt-get install chromium); install it to run the page checks"
        )
    home = scratch / "home"
    home.mkdir(parents=True, exist_ok=True)
    # Chromium puts its singleton socket in TMPDIR; a Unix socket path must stay short.
    own_tmp = len(str(scratch)) + len("/t/org.chromium.Chromium.XXXXXX/SingletonSocket") >= 100
    tmp = Path(tempfile.mkdtemp(prefix="blis-chr-", dir="/tmp")) if own_tmp else scratch / "t"
    tmp.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-breakpad",
        "--disable-crash-reporter",
        f"--user-data-dir={scratch / 'chromium-profile'}",
        "--virtual-time-budget=10000",
        "--dump-dom",
        page.as_uri(),
    ]
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=180, env=env, check=False
        )
    finally:
        if own_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def assert_plots_rendered(dom: str) -> list[str]:
    """Check that every ``blis-plot`` div of ``dom`` was drawn by plotly.js (it carries
    ``js-plotly-plot`` and holds an SVG); returns the divs' ``data-plot`` names in order."""
    divs = list(re.finditer(r'<div\b[^>]*\bclass="([^"]*\bblis-plot\b[^"]*)"[^>]*>', dom))
    names = []
    for m in divs:
        name = re.search(r'data-plot="([^"]*)"', m.group(0))
        assert name is not None, m.group(0)
        names.append(name.group(1))
    ends = [m.start() for m in divs[1:]] + [len(dom)]
    for m, end in zip(divs, ends, strict=True):
        assert "js-plotly-plot" in m.group(1).split(), m.group(0)
        assert 'class="main-svg"' in dom[m.end() : end], m.group(0)
    return names
