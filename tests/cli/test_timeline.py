"""`cdctl timeline`: the page, SVG and PNG of a domain's formation from a log, and its errors.

The page is checked parsed (a row and every milestone per node, no external URL: it must open offline) and,
where Debian's chromium is installed, rendered by it headless: the DOM after its script ran says it drew
every node of the domain.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.cli.conftest import invoke

DOMAIN = "computedomain/team-a/nvl72-job"
NODES = [f"gb200-r01-n0{i}" for i in range(1, 5)]
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]  # fmt: skip


class Page(HTMLParser):
    """What the page holds: node rows, marks by node, every URL-bearing attribute and script source."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[str] = []
        self.marks: dict[str, set[str]] = {}
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if "node-row" in classes:
            self.rows.append(str(found["data-node"]))
        if "mark" in classes:
            self.marks.setdefault(str(found["data-node"]), set()).add(str(found["data-key"]))
        for name in ("href", "src", "xlink:href", "xmlns", "action"):
            if found.get(name):
                self.urls.append(f"{tag} {name}={found[name]}")


def test_the_page_has_a_row_and_every_milestone_per_node_and_needs_no_network(
    log: Path, tmp_path: Path
) -> None:
    out = tmp_path / "formation.html"
    code, stdout, stderr = invoke("timeline", "--db", str(log), DOMAIN, "-o", str(out))
    assert code == 0, stderr
    assert "formation: " in stdout and "slowest node: " in stdout and f"wrote {out}" in stdout
    text = out.read_text()
    page = Page()
    page.feed(text)
    assert page.rows == NODES
    present = {"daemon-claim", "listed", "worker"}  # the demo's log: no labels, daemons or pod readiness
    assert all(present <= page.marks[node] for node in NODES)
    assert "not in this file: node labelled, daemon started, daemon Ready" in text
    assert page.urls == []
    assert not re.search(
        r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text.replace("http://www.w3.org/2000/svg", "")
    )
    assert "@import" not in text and "url(" not in text


def test_svg_and_png_carry_the_summary_and_every_node(log: Path, tmp_path: Path) -> None:
    svg, png = tmp_path / "t.svg", tmp_path / "t.png"
    assert invoke("timeline", "--db", str(log), DOMAIN, "-o", str(svg))[0] == 0
    assert invoke("timeline", "--db", str(log), DOMAIN, "-o", str(png))[0] == 0
    text = svg.read_text()
    assert text.startswith("<svg xmlns=") and "formation: " in text
    assert ElementTree.fromstring(text).tag == "{http://www.w3.org/2000/svg}svg"  # well-formed XML
    assert all(f">{node}</text>" in text for node in NODES)
    assert text.count("<title>") > 3 * len(NODES)  # each mark has its event as a hover
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_claim_is_its_nodes_row_of_its_domain(log: Path, tmp_path: Path) -> None:
    out = tmp_path / "claim.html"
    code, stdout, stderr = invoke(
        "timeline", "--db", str(log), "resourceclaim/team-a/worker-2-channel", "-o", str(out)
    )
    assert code == 0, stderr
    page = Page()
    page.feed(out.read_text())
    assert page.rows == ["gb200-r01-n03"]
    assert "slowest node: gb200-r01-n03" in stdout


@pytest.mark.parametrize(
    ("subject", "output", "says"),
    [
        ("computedomain/team-a/nope", "t.html", "SUBJECT: no computedomain team-a/nope observed in"),
        (
            "computedomain/team-a",
            "t.html",
            "SUBJECT: 'computedomain/team-a' is not computedomain/NAMESPACE/NAME",
        ),
        (
            "node/gb200-r01-n01",
            "t.html",
            "SUBJECT: 'node/gb200-r01-n01': a timeline is of a computedomain or",
        ),
        (
            "plugin/gb200-r01-n01",
            "t.html",
            "SUBJECT: 'plugin/gb200-r01-n01' is not domain/<uid> or claim/<uid>",
        ),
        ("resourceclaim/team-a/nope", "t.html", "SUBJECT: no resourceclaim team-a/nope observed in"),
        (DOMAIN, "t.pdf", "-o: "),
        (DOMAIN, "missing/t.html", "-o: "),
    ],
)
def test_bad_input_is_one_line_naming_the_field_and_exits_2(
    log: Path, tmp_path: Path, subject: str, output: str, says: str
) -> None:
    code, stdout, stderr = invoke("timeline", "--db", str(log), subject, "-o", str(tmp_path / output))
    assert code == 2, stdout + stderr
    assert stderr.startswith("cdctl: error: cdctl timeline: ") and says in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_a_file_that_is_not_a_log_exits_3(tmp_path: Path) -> None:
    bogus = tmp_path / "x.db"
    bogus.write_text("not sqlite")
    code, _, stderr = invoke("timeline", "--db", str(bogus), DOMAIN, "-o", str(tmp_path / "t.html"))
    assert code == 3 and str(bogus) in stderr


def _dump_dom(chromium: str, page: Path, tmp_path: Path) -> str:
    """The DOM after the page's script ran. A browser killed by a signal (headless chromium on a loaded
    machine now and then dies with SIGTRAP before it loads anything) is started again, up to three times,
    with a fresh profile; a page that fails to draw fails the test either way."""
    # An environment of its own: a short TMPDIR (the browser's sockets go there, and a socket path over 107
    # bytes is fatal to it; tests that leave a long TMPDIR behind made it crash) and a HOME of its own.
    short = Path(tempfile.mkdtemp(prefix="cr-", dir="/tmp"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(short), "TMPDIR": str(short)}
    for attempt in range(3):
        done = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / f'profile-{attempt}'}", "--dump-dom",
             page.as_uri()],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        if done.returncode >= 0:
            break
    shutil.rmtree(short, ignore_errors=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return done.stdout


def test_chromium_draws_every_node(log: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip(
            "no chromium installed (Debian: apt-get install chromium): the page is checked parsed only"
        )
    out = tmp_path / "formation.html"
    assert invoke("timeline", "--db", str(log), DOMAIN, "-o", str(out))[0] == 0
    dom = _dump_dom(chromium, out, tmp_path)
    status = re.search(r'<span id="status">([^<]*)</span>', dom)
    assert status is not None, dom[:2000]
    assert status.group(1).startswith(f"drawn: {len(NODES)} of {len(NODES)} nodes"), status.group(1)
    assert "missing" not in status.group(1)
    assert f'data-drawn-nodes="{len(NODES)}"' in dom
    page = Page()
    page.feed(dom)
    assert page.rows == NODES


def test_names_and_data_from_a_log_cannot_inject_markup_into_the_page(tmp_path: Path) -> None:
    """A compromised daemon or plugin writes what it likes into its log; the page shows it as text."""
    from cdctl.domain.events import RecordedEvent
    from cdctl.projections.formation import formation_view
    from cdctl.projections.formationpage import page
    from cdctl.projections.timeline import Line

    evil = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    uid = "5a0f2a55-1111-4222-8333-444455556666"
    events = [
        RecordedEvent(1, f"domain/{uid}", 1, "ComputeDomainObserved", 1,
                      {"uid": uid, "namespace": "ns", "name": evil, "change": "ADDED"}, {},
                      datetime(2026, 1, 1, tzinfo=UTC), "0" * 64),
        RecordedEvent(2, f"node/{evil}", 1, "ImexDaemonStarted", 1,
                      {"node": evil, "domain_uid": uid, "pod_name": "</script><script>alert(3)</script>"}, {},
                      datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC), "0" * 64),
    ]  # fmt: skip
    text = page(formation_view([Line("", e) for e in events], uid, "cd"))
    parsed = Page()
    parsed.feed(text)
    assert parsed.rows == [evil]  # the name, as text
    assert text.count("<script") == 2 and "<img" not in text and "alert(3)</script>" not in text


def test_the_page_shows_the_explanation_on_top_and_marks_the_critical_path(log: Path, tmp_path: Path) -> None:
    out = tmp_path / "formation.html"
    code, stdout, _ = invoke("timeline", "--db", str(log), DOMAIN, "-o", str(out))
    assert code == 0, stdout
    html = out.read_text()
    slowest = re.search(r"slowest node: (gb200-r01-n0\d)", stdout)
    assert slowest is not None
    explained = html.index('<section id="explanation">')
    assert html.index("</header>") < explained < html.index("<svg"), "the explanation is on top"
    assert f"critical path ({slowest.group(1)}):" in html[explained:]
    bands = re.findall(r'class="critical-path longest" data-node="([^"]+)" data-step="([a-z-]+)"', html)
    legs = re.findall(r'class="critical-path" data-node="([^"]+)"', html)
    assert len(bands) == 1 and bands[0][0] == slowest.group(1), "one band: the slowest node's longest wait"
    assert legs and set(legs) == {slowest.group(1)}, "the path is drawn on its row alone"
