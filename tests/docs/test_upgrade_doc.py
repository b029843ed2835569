"""docs/upgrade-from-nvidia.md maps every value of the Go chart (the fixture written from its defaults) and
every flag of its ComputeDomain controller and kubelet plugin, and the values file it shows installs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "upgrade-from-nvidia.md").read_text()
FIXTURE = ROOT / "tests" / "fixtures" / "upstream" / "values-v0.5.0.yaml"
# Values whose children are free-form (maps, lists of objects): the key itself is the row.
WHOLE = {
    "affinity", "tolerations", "nodeSelector", "podAnnotations", "annotations", "env",
    "securityContext", "selectorLabelsOverride", "podSecurityContext", "strategy", "updateStrategy",
    "featureGates", "imagePullSecrets", "dnsNames",
}  # fmt: skip
# The Go driver's flags (cmd/compute-domain-controller and cmd/compute-domain-kubelet-plugin, v0.5.0-dev).
GO_FLAGS = (
    "--pod-name", "--namespace", "--image-name", "--cd-daemon-image-pull-secret-names",
    "--cd-daemon-priority-class-name", "--cd-daemon-resources-json", "--log-verbosity-cd-daemon",
    "--max-nodes-per-imex-domain", "--imex-mode", "--imex-isolation", "--http-endpoint", "--metrics-path",
    "--pprof-path", "--additional-namespaces", "--leader-election-enabled",
    "--leader-election-lease-lock-namespace", "--leader-election-lease-lock-name",
    "--leader-election-lease-duration", "--leader-election-renew-deadline", "--leader-election-retry-period",
    "--kubeconfig", "--kube-api-qps", "--kube-api-burst", "--feature-gates", "--node-name", "--cdi-root",
    "--nvidia-driver-root", "--host-driver-root", "--container-driver-root", "--nvidia-cdi-hook-path",
    "--kubelet-registrar-directory-path", "--kubelet-plugins-directory-path", "--pod-uid",
    "--healthcheck-port", "--gpu-clique-label-enabled", "--imex-host-socket-path", "--logging-format",
    "--vmodule",
)  # fmt: skip


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in WHOLE and not (key == "resources" and prefix):
            out += _leaves(value, f"{path}.")
        else:
            out.append(path)
    return out


def test_every_go_chart_value_has_a_row() -> None:
    values = yaml.safe_load(FIXTURE.read_text())
    leaves = [*_leaves(values), "image.repository"]  # the fixture drops it, the table says why
    assert len(leaves) > 80
    missing = [path for path in leaves if f"`{path}`" not in DOC]
    assert missing == []


def test_every_go_flag_has_a_row() -> None:
    missing = [flag for flag in GO_FLAGS if f"`{flag}`" not in DOC]
    assert missing == []


def test_every_upstream_gate_is_mapped() -> None:
    from cdctl.api import gates

    for name in [*gates.GPU_SIDE_GATES, *gates.UNIMPLEMENTED_GATES, gates.HOST_MANAGED_IMEX_DAEMON]:
        assert f"`{name}`" in DOC, name
