"""The IMEX daemon's identity under the chart's RBAC and admission policies: it may set its own pod's clique
label and its readiness-gate condition, and nothing else. A compromised daemon cannot rewrite the privileged
kubelet plugin pod beside it (node root), another daemon's pod, or its own pod's spec and other labels; nor,
through the status, its podIP (what its peers dial), its phase, the kubelet's Ready or another pod's gate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.domain.computedomains import CONDITION_IMEX_READY, LABEL_CLIQUE_ID
from cdctl.k8s.daemonpods import set_own_pod_imex_ready
from cdctl.k8s.resources import PODS
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.identity import service_account_token
from tests.chart.enforcing import enforcing_server, identity, refused, seed
from tests.daemon.rig import DRIVER_NAMESPACE

DAEMON_ACCOUNT = "compute-domain-daemon-service-account"
PLUGIN_POD = "cdctl-kubelet-plugin-abcde"


def pod(name: str, node: str, image: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": image}]},
    }


def seed_running(server: Any, body: dict[str, Any]) -> None:
    """The pod, and the status its kubelet wrote: Running at its IP, not Ready yet."""
    seed(server, "", "pods", DRIVER_NAMESPACE, body)
    pods, name = server.store.type_of("", "pods"), body["metadata"]["name"]
    status = {"phase": "Running", "podIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "False"}]}
    latest = server.store.get(pods, DRIVER_NAMESPACE, name)
    server.store.update(pods, DRIVER_NAMESPACE, name, {**latest, "status": status}, subresource="status")


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[KubeApi]:
    """The daemon of pod d0 on node n0, with the daemon d1 and the kubelet plugin's pod beside it."""
    async with enforcing_server(DRIVER_NAMESPACE) as server:
        for name, node in (("d0", "n0"), ("d1", "n1"), (PLUGIN_POD, "n0")):
            seed_running(server, pod(name, node, "cdctl:1"))
        token = service_account_token(DRIVER_NAMESPACE, DAEMON_ACCOUNT, pod="d0", pod_uid="u0", node="n0")
        async with identity(server, tmp_path, token) as api:
            yield api


def path(name: str) -> str:
    return PODS.object_path(DRIVER_NAMESPACE, name)


async def test_the_daemon_labels_its_own_pod_with_its_clique(daemon: KubeApi) -> None:
    patched = await daemon.merge_patch(path("d0"), {"metadata": {"labels": {LABEL_CLIQUE_ID: "c.7"}}})
    assert patched["metadata"]["labels"][LABEL_CLIQUE_ID] == "c.7"


async def test_the_daemon_cannot_patch_the_plugin_pods_image(daemon: KubeApi) -> None:
    image = [{"op": "replace", "path": "/spec/containers/0/image", "value": "attacker:latest"}]
    assert await refused(daemon.json_patch(path(PLUGIN_POD), image)) == 422
    assert await refused(
        daemon.merge_patch(path(PLUGIN_POD), {"metadata": {"labels": {LABEL_CLIQUE_ID: "x"}}})
    )


async def test_the_daemon_cannot_read_pods(daemon: KubeApi) -> None:
    assert await refused(daemon.get(path(PLUGIN_POD))) == 403


async def test_the_daemon_cannot_label_another_daemons_pod(daemon: KubeApi) -> None:
    assert (
        await refused(daemon.merge_patch(path("d1"), {"metadata": {"labels": {LABEL_CLIQUE_ID: "c.9"}}}))
        == 422
    )


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"containers": [{"name": "c", "image": "attacker:latest"}]}},
        {"metadata": {"labels": {"app": "other"}}},
        {"metadata": {"annotations": {"a": "b"}}},
    ],
)
async def test_the_daemon_may_change_nothing_else_on_its_own_pod(
    daemon: KubeApi, patch: dict[str, Any]
) -> None:
    assert await refused(daemon.merge_patch(path("d0"), patch)) == 422


async def test_a_daemon_token_bound_to_no_pod_labels_nothing(tmp_path: Path) -> None:
    async with enforcing_server(DRIVER_NAMESPACE) as server:
        seed(server, "", "pods", DRIVER_NAMESPACE, pod("d0", "n0", "cdctl:1"))
        async with identity(server, tmp_path, service_account_token(DRIVER_NAMESPACE, DAEMON_ACCOUNT)) as api:
            label = {"metadata": {"labels": {LABEL_CLIQUE_ID: "c.7"}}}
            assert await refused(api.merge_patch(path("d0"), label)) == 422


async def test_the_daemon_sets_its_own_pods_readiness_gate(daemon: KubeApi) -> None:
    pod = await set_own_pod_imex_ready(daemon, DRIVER_NAMESPACE, "d0", True, "READY", "2026-12-07T00:00:00Z")
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions == {"Ready": "False", CONDITION_IMEX_READY: "True"}, (
        "merged by type: the kubelet's stay"
    )
    await set_own_pod_imex_ready(daemon, DRIVER_NAMESPACE, "d0", False, "NOT_READY", "2026-12-07T00:00:01Z")


async def test_the_daemon_cannot_set_another_pods_readiness_gate(daemon: KubeApi) -> None:
    assert await refused(set_own_pod_imex_ready(daemon, DRIVER_NAMESPACE, "d1", True, "", "")) == 422


@pytest.mark.parametrize(
    "status",
    [
        {"podIP": "10.9.9.9"},
        {"podIPs": [{"ip": "10.9.9.9"}]},
        {"phase": "Failed"},
        {"conditions": [{"type": "Ready", "status": "True"}]},
    ],
    ids=["its podIP", "its podIPs", "its phase", "the kubelet's Ready"],
)
async def test_the_daemon_may_change_nothing_else_in_its_pods_status(
    daemon: KubeApi, status: dict[str, Any]
) -> None:
    assert await refused(daemon.strategic_merge_patch(f"{path('d0')}/status", {"status": status})) == 422
