"""The report in a real browser (Debian's chromium, headless), with the network off: every chart renders, the
console stays clean, and an answer made of HTML is data, never markup."""

import html as html_lib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nspec.runners.report import build_report
from nspec.runners.run_store import Run
from tests.families import families  # noqa: F401 - a fixture
from tests.test_audit import scored_run
from tests.test_report_view import VIEW
from tests.test_report_view import scored as scored_family

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("NSPEC_REQUIRE_BROWSER"),
    reason="chromium is not installed (.ci/run installs it)",
)
XSS = "</script><script>alert(1)</script>"
TITLE_XSS = "</script><script>document.title='PWNED'</script>"


CHECKS = Path(__file__).parent / "report_checks.js"


def render(page, tmp_path, checks=False):
    """The DOM after the page's scripts ran, and what the console said; with ``checks``, what the checker found."""
    assert CHROMIUM is not None, "chromium is required here (apt-get install chromium)"
    if checks:
        checked = page.with_name("checked.html")
        head, _, tail = page.read_text().rpartition("</body>")  # the page's own (Vega's code holds the word too)
        checked.write_text(f"{head}<script>{CHECKS.read_text()}</script></body>{tail}")
        page = checked
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
            "--window-size=1400,1000",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=20000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    if not checks:
        return proc.stdout, console
    found = re.findall(r'<pre id="checks">(\{.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-2000:] + "\n".join(console)
    return json.loads(html_lib.unescape(found[-1])), console


def test_report_renders_offline_and_answers_stay_text(spec_file, tmp_path):
    run, _ = scored_run(spec_file, tmp_path)
    results = [json.loads(line) for line in (run / "answers" / "results.jsonl").read_text().splitlines()]
    results[0]["text"], results[1]["text"] = XSS, TITLE_XSS
    (run / "answers" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    page = build_report([Run(run)])
    source = page.read_text()
    assert XSS not in source and TITLE_XSS not in source  # the answers are in the page only as escaped data
    assert "\\u003c/script>\\u003cscript>alert(1)\\u003c/script>" in source
    assert source.count("<title>") == 1
    dom, console = render(page, tmp_path)
    assert "PWNED" not in dom.split("<body>")[0]  # no injected script ran
    assert not [line for line in console if "rror" in line or "Uncaught" in line], console


@pytest.mark.parametrize("runs", [1, 2], ids=["one run", "two runs compared"])
def test_what_a_reader_sees(spec_file, tmp_path, runs):
    """Header and summary on the first screen, every chart with a legend inside the window, no tick labels over
    each other, a click on a heatmap cell lists its cells with the needle highlighted, no network request, a clean
    console; and a title full of what breaks pages shows as text."""
    dirs = [scored_run(spec_file, tmp_path / str(i))[0] for i in range(runs)]
    hostile = "Needles `in` ${haystacks} </title><b>bold</b> & \\u2028 'q' \"qq\" </script>"
    spec = (dirs[0] / "spec.yaml").read_text() + f"report: {{title: {json.dumps(hostile)}}}\n"
    (dirs[0] / "spec.yaml").write_text(spec)
    page = build_report([Run(d) for d in dirs], tmp_path / "report")
    found, console = render(page, tmp_path, checks=True)
    assert found["problems"] == [], found
    facts = found["facts"]
    assert facts["title"] == hostile and facts["titles"] == 1  # the title as text, once
    assert facts["drawn"] >= 4 and facts["failed"] == 0
    assert facts["summaryRows"] == runs
    assert facts["length:legends"] == 1
    assert facts["listed"] >= 1 and facts["needle"] and facts["needle"].startswith("The special magic")
    assert facts["form"]["length"] == str(facts["clicked"]["length"])
    assert " · depth " in facts["firstCell"]["title"] and facts["filters"][-1] == "axis-depth"
    assert facts["resources"] == []  # nothing fetched: everything is in the page
    assert not [line for line in console if "rror" in line or "Uncaught" in line], console


def test_the_caching_section_is_on_screen(spec_file, tmp_path, monkeypatch):
    """A run with a cache control arm: its pass rates against the cached cells' are a table a reader sees."""
    import tests.test_audit

    cached = tests.test_audit.SMALL.replace("context_lengths: [400, 900]", "context_lengths: [1500, 2500]").replace(
        "{id: openai/gpt-4.1-mini,",
        "{id: openai/gpt-4.1-mini, mode: live,",  # OpenAI caches live, not in batches
    )
    monkeypatch.setattr(tests.test_audit, "SMALL", cached + "cache: {mode: auto, control: 0.5}\n")  # long enough
    run, cells = scored_run(spec_file, tmp_path)
    assert {c["cache"]["arm"] for c in cells} == {"cached", "control"}
    page = build_report([Run(run)])
    found, console = render(page, tmp_path, checks=True)
    assert found["problems"] == [], found
    assert found["facts"]["cachingRows"] == 1
    assert "openai/gpt-4.1-mini" in found["facts"]["cachingText"] and "%" in found["facts"]["cachingText"]
    assert not [line for line in console if "rror" in line or "Uncaught" in line], console


@pytest.mark.usefixtures("families")
def test_a_family_without_depths_is_browsed_by_its_own_axes(cli, spec_file, tmp_path):
    """Its cells are titled and filtered by the axes its family declares, show its details, and no depth."""
    run = scored_family(cli, spec_file, tmp_path, VIEW)
    page = build_report([Run(run)])
    found, console = render(page, tmp_path, checks=True)
    assert found["problems"] == [], found
    facts = found["facts"]
    assert facts["filters"] == ["model", "verdict", "length", "axis-vocabulary"]
    title = facts["firstCell"]["title"]
    assert re.search(r" · (1K|1,500) tokens \([\d,]+ compiled\) · Words to count from [35] · trial [12]$", title)
    assert "list length" in facts["firstCell"]["fields"] and "depth" not in title
    assert "clicked" not in facts  # no heatmap to click
    assert not [line for line in console if "rror" in line or "Uncaught" in line], console
