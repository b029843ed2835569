"""values.yaml, values.schema.json and the templates agree: every value a template reads exists, every
value is read and documented, and the schema refuses wrong types and unknown feature gates (in Helm and in
cdctl.sim.rack.chart).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from helm_python import chart as hc
from helm_python.errors import HelmValuesError

from cdctl.sim.rack import chart as sim_chart
from tests.chart.conftest import CHART_DIR

# `.Values.a.b` or `$.Values.a.b` in a template.
VALUE_REFERENCE = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
# A YAML mapping key or list item at the start of a line (not a comment).
KEY_LINE = re.compile(r"^\s*(-\s+)?[A-Za-z_][A-Za-z0-9_.-]*:(\s|$)|^\s*-\s")


def _defaults() -> dict[str, Any]:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert isinstance(values, dict)
    return values


def _template_references() -> dict[tuple[str, ...], list[str]]:
    references: dict[tuple[str, ...], list[str]] = {}
    for template in sorted(p for p in (CHART_DIR / "templates").rglob("*") if p.is_file()):
        for match in VALUE_REFERENCE.finditer(template.read_text()):
            path = tuple(match.group(1).lstrip(".").split("."))
            references.setdefault(path, []).append(template.name)
    return references


def _resolves(values: Any, path: tuple[str, ...]) -> bool:
    node = values
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _leaf_paths(values: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(values, dict) and values:
        return [p for key, child in values.items() for p in _leaf_paths(child, (*prefix, key))]
    return [prefix]


def test_templates_reference_only_values_that_exist() -> None:
    references = _template_references()
    assert len(references) > 30  # the scan does find the templates' references
    defaults = _defaults()
    missing = {".".join(path): files for path, files in references.items() if not _resolves(defaults, path)}
    assert missing == {}


def test_the_reference_scan_catches_a_misspelt_value() -> None:
    text = "image: {{ .Values.image.repositry }} {{ $.Values.controller.replicas }}"
    paths = [tuple(m.group(1).lstrip(".").split(".")) for m in VALUE_REFERENCE.finditer(text)]
    assert paths == [("image", "repositry"), ("controller", "replicas")]
    assert not _resolves(_defaults(), paths[0])
    assert _resolves(_defaults(), paths[1])


def test_every_value_is_read_by_a_template() -> None:
    referenced = set(_template_references())
    unread = [
        ".".join(leaf)
        for leaf in _leaf_paths(_defaults())
        if not any(leaf[: len(ref)] == ref for ref in referenced)
    ]
    assert unread == []


def _undocumented_keys(text: str) -> list[str]:
    """Keys and list items neither preceded by a comment line nor carrying a trailing comment."""
    lines = text.splitlines()
    undocumented = []
    for number, line in enumerate(lines):
        if not KEY_LINE.match(line) or "#" in line:
            continue
        previous = next((p for p in reversed(lines[:number]) if p.strip()), "")
        if not previous.lstrip().startswith("#"):
            undocumented.append(f"{number + 1}: {line.strip()}")
    return undocumented


def test_values_yaml_is_documented_line_by_line() -> None:
    assert _undocumented_keys((CHART_DIR / "values.yaml").read_text()) == []


def test_the_documentation_check_finds_a_bare_key() -> None:
    text = "# Documented.\na: 1\nb:\n  # Also documented.\n  c: 2\n  d: 3  # trailing\n  e:\n    - x\n"
    assert _undocumented_keys(text) == ["3: b:", "7: e:", "8: - x"]


def test_schema_accepts_the_defaults_and_every_known_gate(helm_chart: hc.Chart) -> None:
    helm_chart.validate_schema({})
    gates = {name: True for name in sim_chart.GATE_DEFAULTS}
    helm_chart.validate_schema({"featureGates": gates})
    assert sim_chart.merged_values({"featureGates": gates})["featureGates"] == gates


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"featureGates": {"NotAGate": True}}, "/featureGates"),
        ({"featureGates": {"HostManagedIMEX": "yes"}}, "/featureGates/HostManagedIMEX"),
        ({"controller": {"replicas": "two"}}, "/controller/replicas"),
        ({"controller": {"leaderElection": {"enabled": "true"}}}, "/controller/leaderElection/enabled"),
        (
            {"controller": {"leaderElection": {"leaseDuration": 15}}},
            "/controller/leaderElection/leaseDuration",
        ),
        ({"kubeletPlugin": {"healthcheckPort": 70000}}, "/kubeletPlugin/healthcheckPort"),
        ({"kubeletPlugin": {"privileged": "false"}}, "/kubeletPlugin/privileged"),
        ({"image": {"repository": 5}}, "/image/repository"),
        ({"logVerbosity": 4}, "/logVerbosity"),
        ({"resourceApiVersion": "v2"}, "/resourceApiVersion"),
        ({"additionalNamespaces": ["Not_A_Namespace"]}, "/additionalNamespaces/0"),
        ({"unknownTopLevel": 1}, ""),
    ],
)
def test_schema_rejects_wrong_types_and_unknown_keys(
    helm_chart: hc.Chart, values: dict[str, Any], where: str
) -> None:
    with pytest.raises(HelmValuesError, match=f"at '{re.escape(where)}'"):
        helm_chart.validate_schema(values)
    with pytest.raises(sim_chart.ChartValuesError, match=f"at '{re.escape(where)}'"):
        sim_chart.merged_values(values, chart=CHART_DIR)


def test_render_refuses_values_the_schema_rejects(helm_chart: hc.Chart) -> None:
    with pytest.raises(HelmValuesError):
        helm_chart.render({"featureGates": {"NotAGate": True}}, name="cdctl", namespace="cdctl-system")


def test_chart_app_version_is_the_package_version() -> None:
    import cdctl

    metadata = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert metadata["appVersion"] == cdctl.__version__
    assert metadata["kubeVersion"] == ">=1.32.0-0"
