"""Check a report page in a real browser: headless Chromium (Debian package ``chromium``).

`page_images` loads the page with its figures, waits for the window's load
event (every <img> has then either loaded or failed) and reads, per image,
whether it decoded (``complete`` and ``naturalWidth > 0``).  It works on a
copy of the page with a small script added, next to the page so that the
relative ``plots/...`` URLs resolve as they do for the real page; the copy
is removed afterwards.  `screenshot` renders the page to a PNG.

Missing browser: the test fails naming it (the project's one policy for
missing resources; CI installs chromium through the Makefile's deps-apt).
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser")
"""Executable names of Debian's (and Ubuntu's) Chromium."""

TIMEOUT_S = 120
"""Limit of one headless Chromium run (its own readiness: it exits when the page has loaded)."""

_CHECK_SCRIPT = """<script>
window.addEventListener("load", function () {
  for (const img of document.images) {
    img.setAttribute("data-check", img.complete && img.naturalWidth > 0 ? "loaded" : "failed");
    img.setAttribute("data-width", String(img.naturalWidth));
  }
  document.body.setAttribute("data-checked", "yes");
});
</script>"""


def chromium() -> str:
    """Path of the Chromium executable; fails the test naming it when it is not installed."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("missing: chromium (headless browser to check report.html): apt-get install -y chromium "
                "(the Makefile's deps-apt installs it)", pytrace=False)


def _run(args: list[str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="ccplab-chromium-") as profile:
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--allow-file-access-from-files", f"--user-data-dir={profile}", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        pytest.fail(f"chromium failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return proc


def page_images(page: Path) -> list[dict]:
    """Load ``page`` in headless Chromium; one dict per <img>: src, status ("loaded"/"failed"), width (px)."""
    page = Path(page).resolve()
    text = page.read_text(encoding="utf-8")
    if "</body>" not in text:
        pytest.fail(f"{page}: no </body> in the page")
    probe = page.with_name(f".browser-check-{page.stem}.html")
    probe.write_text(text.replace("</body>", _CHECK_SCRIPT + "</body>", 1), encoding="utf-8")
    try:
        # --virtual-time-budget lets the page finish loading (images, load event) before the DOM is dumped.
        dom = _run(["--virtual-time-budget=20000", "--run-all-compositor-stages-before-draw", "--dump-dom",
                    probe.as_uri()]).stdout
    finally:
        probe.unlink(missing_ok=True)
    if 'data-checked="yes"' not in dom:
        pytest.fail(f"{page}: the page's load event never fired in chromium (DOM dump: {dom[:500]!r})")
    out = []
    for tag in re.findall(r"<img\b[^>]*>", dom):
        attrs = dict((k, html.unescape(v)) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag))
        out.append({"src": attrs.get("src"), "status": attrs.get("data-check"),
                    "width": int(attrs.get("data-width", "0"))})
    return out


def screenshot(page: Path, png: Path, width: int = 1200, height: int = 3000) -> Path:
    """Render ``page`` headless into ``png`` (window width x height px); returns ``png``."""
    _run([f"--screenshot={Path(png).resolve()}", f"--window-size={width},{height}",
          "--virtual-time-budget=20000", Path(page).resolve().as_uri()])
    if not Path(png).is_file() or Path(png).stat().st_size == 0:
        pytest.fail(f"chromium wrote no screenshot {png}")
    return Path(png)
