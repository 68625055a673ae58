"""The report in a real browser (Debian's chromium, headless), with the network off: every chart renders, the
console stays clean, and an answer made of HTML is data, never markup."""

import json
import os
import shutil
import subprocess

import pytest

from nspec.runners.report import build_report
from nspec.runners.rundir import Run
from tests.test_audit import scored_run

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("NSPEC_REQUIRE_BROWSER"),
    reason="chromium is not installed (.ci/run installs it)",
)
XSS = "</script><script>alert(1)</script>"
TITLE_XSS = "</script><script>document.title='PWNED'</script>"


def render(page, tmp_path):
    """The DOM after the page's scripts ran, and what the console said."""
    assert CHROMIUM is not None, "chromium is required here (apt-get install chromium)"
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",  # the network is off
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.stdout, [line for line in proc.stderr.splitlines() if "CONSOLE" in line]


def test_report_renders_offline_and_answers_stay_text(spec_file, tmp_path):
    run, _ = scored_run(spec_file, tmp_path)
    results = [json.loads(line) for line in (run / "answers" / "results.jsonl").read_text().splitlines()]
    results[0]["text"], results[1]["text"] = XSS, TITLE_XSS
    (run / "answers" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    page = build_report([Run(run)])
    source = page.read_text()
    assert XSS not in source and TITLE_XSS not in source  # the answers are in the page only as escaped data
    assert "<\\/script><script>alert(1)<\\/script>" in source
    dom, console = render(page, tmp_path)
    assert "<title>small</title>" in dom and "PWNED" not in dom.split("<body>")[0]  # no injected script ran
    assert dom.count('class="marks"') == 1  # the whole report is one rendered Vega view
    for title in (
        "pass rate by depth and context length",
        "every answer",
        "Pass rate by context length",
        "Cost per model",
    ):
        assert title in dom, title
    assert "Summary" in dom and "every depth passes up to 400 tokens" in dom
    assert not [line for line in console if "rror" in line or "Uncaught" in line], console
