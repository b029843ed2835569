"""The controller's identity under the chart's RBAC and admission policies: its DaemonSet and
ResourceClaimTemplate writes keep to objects carrying the ComputeDomain label, and on Nodes it may only patch
that label. A compromised controller cannot rewrite the privileged kubelet plugin DaemonSet or a user's
templates, nor cordon or taint a node.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdctl.domain.computedomains import LABEL_COMPUTE_DOMAIN
from cdctl.k8s.resources import DAEMON_SETS, NODES, ResourceType
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.identity import service_account_token
from cdctl.sim.apiserver.server import ApiServer
from tests.chart.conftest import NAMESPACE
from tests.chart.enforcing import enforcing_server, identity, refused, seed

USER_NAMESPACE = "team-a"
RESOURCE_CLAIM_TEMPLATES = ResourceType(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True
)
OURS = {LABEL_COMPUTE_DOMAIN: "uid-1"}


def daemon_set(name: str, labels: dict[str, str]) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "cdctl:1"}]},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": template},
    }


def template(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": labels},
        "spec": {"spec": {"devices": {"requests": []}}},
    }


@dataclass
class Env:
    server: ApiServer
    api: KubeApi


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[Env]:
    async with enforcing_server(NAMESPACE) as server:
        seed(server, "apps", "daemonsets", NAMESPACE, daemon_set("cdctl-kubelet-plugin", {"app": "plugin"}))
        seed(server, "apps", "daemonsets", NAMESPACE, daemon_set("computedomain-daemon-uid-1", OURS))
        seed(server, "resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, template("users", {}))
        seed(
            server, "resource.k8s.io", "resourceclaimtemplates", USER_NAMESPACE, template("cd1-channel", OURS)
        )
        seed(server, "", "nodes", "", {"metadata": {"name": "n0", "labels": {**OURS, "role": "gpu"}}})
        token = service_account_token(NAMESPACE, "cdctl-controller", pod="cdctl-controller-0", node="cp0")
        async with identity(server, tmp_path, token) as api:
            yield Env(server, api)


def ds_path(name: str) -> str:
    return DAEMON_SETS.object_path(NAMESPACE, name)


def rct_path(name: str) -> str:
    return RESOURCE_CLAIM_TEMPLATES.object_path(USER_NAMESPACE, name)


async def test_the_controller_writes_its_own_labelled_objects(controller: Env) -> None:
    api = controller.api
    current = await api.get(ds_path("computedomain-daemon-uid-1"))
    current["metadata"]["finalizers"] = ["resource.nvidia.com/computeDomain"]
    await api.replace(ds_path("computedomain-daemon-uid-1"), current)
    await api.create(DAEMON_SETS.collection_path(NAMESPACE), daemon_set("computedomain-daemon-uid-2", OURS))
    await api.delete(rct_path("cd1-channel"))
    await api.create(RESOURCE_CLAIM_TEMPLATES.collection_path(USER_NAMESPACE), template("cd2-channel", OURS))


async def test_the_controller_cannot_rewrite_the_plugin_daemon_set(controller: Env) -> None:
    api = controller.api
    plugin = await api.get(ds_path("cdctl-kubelet-plugin"))
    plugin["spec"]["template"]["spec"]["containers"][0]["image"] = "attacker:latest"
    assert await refused(api.replace(ds_path("cdctl-kubelet-plugin"), plugin)) == 422
    image = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "attacker:latest"}]
    assert await refused(api.json_patch(ds_path("cdctl-kubelet-plugin"), image)) == 422
    assert await refused(api.delete(ds_path("cdctl-kubelet-plugin"))) == 422
    # Adding the label to take the DaemonSet over is itself a write of an unlabelled object.
    label = {"metadata": {"labels": OURS}}
    assert await refused(api.merge_patch(ds_path("cdctl-kubelet-plugin"), label)) == 422
    unlabelled = daemon_set("rogue", {"app": "rogue"})
    assert await refused(api.create(DAEMON_SETS.collection_path(NAMESPACE), unlabelled)) == 422


async def test_the_controller_cannot_rewrite_or_delete_a_users_template(controller: Env) -> None:
    api = controller.api
    users = await api.get(rct_path("users"))
    users["spec"]["spec"]["devices"]["requests"] = [{"name": "r", "exactly": {"deviceClassName": "x"}}]
    assert await refused(api.replace(rct_path("users"), users)) == 422
    assert await refused(api.delete(rct_path("users"))) == 422
    plain = template("plain", {})
    assert await refused(api.create(RESOURCE_CLAIM_TEMPLATES.collection_path(USER_NAMESPACE), plain)) == 422


async def test_on_nodes_the_controller_may_only_patch_the_compute_domain_label(controller: Env) -> None:
    api = controller.api
    node = await api.get(NODES.object_path(None, "n0"))
    assert await refused(api.replace(NODES.object_path(None, "n0"), node)) == 403  # no update grant
    for patch in (
        {"spec": {"unschedulable": True}},
        {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}},
        {"metadata": {"labels": {"role": None}}},
    ):
        assert await refused(api.merge_patch(NODES.object_path(None, "n0"), patch)) == 422
    patched = await api.merge_patch(
        NODES.object_path(None, "n0"), {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: None}}}
    )
    assert patched["metadata"]["labels"] == {"role": "gpu"}
