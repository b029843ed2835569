"""What docs/metrics.md promises, read back for the tests: its metric table, a scrape's metric families, and
the metric names a PromQL expression reads.

Used by tests/controller/test_metrics_docs.py and tests/plugin/test_metrics_docs.py (each scrapes its own
component and compares with the table) and tests/chart/test_monitoring.py (the dashboard and the alerts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
HEADER = "| Metric | Type | Labels | Component | Meaning |"
# What one histogram or counter family is queried as: its samples' names.
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "inf", "nan",
}  # fmt: skip


@dataclass(frozen=True)
class DocumentedMetric:
    name: str
    type: str
    labels: frozenset[str]
    component: str  # controller, kubelet-plugin or all


def documented(text: str | None = None) -> list[DocumentedMetric]:
    """The rows of the metric table of docs/metrics.md."""
    lines = (text if text is not None else DOC.read_text()).splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        name, type_, labels, component, _ = (c.strip() for c in line.strip("|").split("|", 4))
        rows.append(
            DocumentedMetric(
                name.strip("`"),
                type_,
                frozenset(label.strip(" `") for label in labels.split(",") if label.strip()),
                component,
            )
        )
    return rows


def documented_for(component: str) -> dict[str, str]:
    """name -> type of every metric docs/metrics.md says `component` serves."""
    return {m.name: m.type for m in documented() if m.component in (component, "all")}


def exposed(scrape: str) -> dict[str, str]:
    """name -> type of every family a text exposition declares (`# TYPE` lines: counters with `_total`)."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", scrape, flags=re.MULTILINE))


def exposed_labels(scrape: str, name: str) -> set[str]:
    """The label names on the samples of family `name` (a histogram's `le` left out)."""
    labels: set[str] = set()
    for match in re.finditer(
        rf"^{re.escape(name)}(?:_bucket|_sum|_count)?\{{([^}}]*)\}}", scrape, re.MULTILINE
    ):
        labels |= {part.split("=", 1)[0] for part in re.findall(r'(\w+)="', match.group(1))}
    return labels - {"le"}


def queryable_names() -> set[str]:
    """Every series name a query may use for the documented metrics (histograms by their samples)."""
    names: set[str] = set()
    for metric in documented():
        names.add(metric.name)
        names.update(metric.name + suffix for suffix in SUFFIXES.get(metric.type, ()))
    return names


def promql_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels and durations left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations (Grafana's $__rate_interval too)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\w+", "", text)  # Grafana variables outside ranges
    names = set()
    for match in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names
