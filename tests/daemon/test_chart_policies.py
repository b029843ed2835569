"""The IMEX daemon's identity under the chart's RBAC and admission policies: it may set its own pod's clique
label and nothing else. A compromised daemon cannot rewrite the privileged kubelet plugin pod beside it (node
root), another daemon's pod, or its own pod's spec and other labels.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.domain.computedomains import LABEL_CLIQUE_ID
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


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[KubeApi]:
    """The daemon of pod d0 on node n0, with the daemon d1 and the kubelet plugin's pod beside it."""
    async with enforcing_server(DRIVER_NAMESPACE) as server:
        seed(server, "", "pods", DRIVER_NAMESPACE, pod("d0", "n0", "cdctl:1"))
        seed(server, "", "pods", DRIVER_NAMESPACE, pod("d1", "n1", "cdctl:1"))
        seed(server, "", "pods", DRIVER_NAMESPACE, pod(PLUGIN_POD, "n0", "cdctl:1"))
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
