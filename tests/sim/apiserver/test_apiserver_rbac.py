"""RBAC in the simulated API server: request attributes as Kubernetes derives them, role and binding scopes,
and a refused request as the real client sees it (a 403 Status naming the user, verb, resource and scope)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdctl.k8s.errors import ForbiddenError
from cdctl.k8s.plugincluster import connect, disconnect
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.rbac import Rbac, RequestAttributes, request_attributes, service_account_token
from cdctl.sim.apiserver.server import ApiServer

PLUGIN = service_account_token("cdctl", "plugin")


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/nodes/n1", {}, ("get", "", "nodes", "", "n1")),
        ("GET", "/api/v1/nodes", {}, ("list", "", "nodes", "", "")),
        ("GET", "/api/v1/nodes", {"watch": "true"}, ("watch", "", "nodes", "", "")),
        ("PATCH", "/api/v1/nodes/n1", {}, ("patch", "", "nodes", "", "n1")),
        ("PUT", "/api/v1/nodes/n1", {}, ("update", "", "nodes", "", "n1")),
        (
            "PUT",
            "/apis/resource.nvidia.com/v1beta1/namespaces/ns/computedomains/cd/status",
            {},
            ("update", "resource.nvidia.com", "computedomains/status", "ns", "cd"),
        ),
        (
            "POST",
            "/apis/resource.k8s.io/v1/resourceslices",
            {},
            ("create", "resource.k8s.io", "resourceslices", "", ""),
        ),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, ("delete", "", "pods", "ns", "p")),
        ("DELETE", "/api/v1/namespaces/ns/pods", {}, ("deletecollection", "", "pods", "ns", "")),
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "namespaces", "ns", "ns")),
    ],
)
def test_request_attributes(
    method: str, path: str, query: dict[str, str], expected: tuple[str, str, str, str, str]
) -> None:
    assert request_attributes(method, path, query) == RequestAttributes(*expected)


@pytest.mark.parametrize("path", ["/api", "/apis", "/apis/resource.k8s.io/v1", "/version", "/api/v1"])
def test_discovery_is_not_a_resource_request(path: str) -> None:
    assert request_attributes("GET", path, {}) is None


def roles() -> list[dict[str, Any]]:
    cluster_role = {
        "kind": "ClusterRole",
        "metadata": {"name": "plugin"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}],
    }
    role = {
        "kind": "Role",
        "metadata": {"name": "plugin", "namespace": "cdctl"},
        "rules": [
            {"apiGroups": ["resource.nvidia.com"], "resources": ["computedomaincliques"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["p1"]},
        ],
    }
    subjects = [{"kind": "ServiceAccount", "name": "plugin", "namespace": "cdctl"}]
    return [
        cluster_role,
        role,
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "plugin"},
            "roleRef": {"kind": "ClusterRole", "name": "plugin"},
            "subjects": subjects,
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "plugin", "namespace": "cdctl"},
            "roleRef": {"kind": "Role", "name": "plugin"},
            "subjects": subjects,
        },
    ]


def test_bindings_scope_the_rules() -> None:
    rbac = Rbac()
    rbac.load(roles())

    def allowed(verb: str, group: str, resource: str, namespace: str = "", name: str = "") -> bool:
        return rbac.check(PLUGIN, RequestAttributes(verb, group, resource, namespace, name)) is None

    assert allowed("watch", "", "nodes")
    assert not allowed("patch", "", "nodes", name="n1")
    clique = "computedomaincliques"
    assert allowed("get", "resource.nvidia.com", clique, "cdctl", "c")
    assert not allowed("get", "resource.nvidia.com", clique, "other", "c")  # a RoleBinding grants in one ns
    assert not allowed("list", "resource.nvidia.com", clique, "cdctl")
    assert allowed("get", "", "pods", "cdctl", "p1")
    assert not allowed("get", "", "pods", "cdctl", "p2")  # resourceNames
    assert rbac.check("cdctl-sim", RequestAttributes("delete", "", "nodes", "", "n1")) is None  # the admin
    other = service_account_token("cdctl", "someone-else")
    assert rbac.check(other, RequestAttributes("get", "", "nodes", "", "n1")) is not None
    assert len(rbac.denials) == 5


def test_nothing_is_enforced_before_roles_are_loaded() -> None:
    assert Rbac().check(PLUGIN, RequestAttributes("delete", "", "nodes", "", "n1")) is None


async def test_a_refused_request_is_a_403_status_for_the_real_client(tmp_path: Path) -> None:
    async with ApiServer() as server:
        server.rbac.load(roles())
        admin = await connect(str(server.write_kubeconfig(tmp_path / "admin")), 0, 0)
        plugin: KubeApi = await connect(str(server.write_kubeconfig(tmp_path / "sa", PLUGIN)), 0, 0)
        try:
            await admin.create(
                "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
            )
            assert (await plugin.get("/api/v1/nodes/n1"))["metadata"]["name"] == "n1"
            with pytest.raises(ForbiddenError, match="cannot patch resource"):
                await plugin.merge_patch("/api/v1/nodes/n1", {"metadata": {"labels": {"a": "b"}}})
            assert server.rbac.denials == [
                f'nodes "n1" is forbidden: User "{PLUGIN}" cannot patch resource "nodes" in API group ""'
                " at the cluster scope"
            ]
        finally:
            await disconnect(plugin)
            await disconnect(admin)
