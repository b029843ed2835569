"""No source file, doc or chart file names a metric that does not exist: every `cdctl_*` or `nvidia_dra_*`
name in them is a metric of docs/metrics.md (whose table the scrape tests hold to the real /metrics), a
counter's name as its constructor takes it (without `_total`), or one of the few identifiers below that are
not metrics. A docstring that promised a metric nobody serves is what this catches."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.metricsdocs import documented, queryable_names

ROOT = Path(__file__).resolve().parents[2]
SEARCHED = ("cdctl", "docs", "charts", "bench")
SUFFIXES = {".py", ".md", ".yaml", ".json", ".tpl", ".txt"}
NAME = re.compile(r"\b(?:cdctl|nvidia_dra)_[a-z0-9_]+")
NOT_METRICS = {
    "cdctl_argv",  # a process argument marker (cdctl.sim.rack.components)
    "cdctl_verify",  # a benchmark's step name
    "cdctl_controller_writes",  # ContextVar names (cdctl.controller.actions)
    "cdctl_controller_pipelined",
    "cdctl_command",  # a function: how to run cdctl on this machine (cdctl.invocation)
}


def named_metrics() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    files = [ROOT / "README.md"]
    for top in SEARCHED:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES and "__pycache__" not in p.parts]
    for path in files:
        if path.is_file():
            for name in NAME.findall(path.read_text(errors="replace")):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_metric_named_anywhere_exists() -> None:
    known = queryable_names() | {m.name.removesuffix("_total") for m in documented() if m.type == "counter"}
    named = named_metrics()
    assert "cdctl_leader" in named and "nvidia_dra_requests_total" in named  # the scan finds them
    unknown = {name: sorted(where) for name, where in named.items() if name not in known | NOT_METRICS}
    assert not unknown, unknown
