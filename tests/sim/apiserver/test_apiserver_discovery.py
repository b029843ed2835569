"""Contract tests: discovery documents, read by kubernetes_asyncio and by kubectl when it is installed."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from cdctl.sim.apiserver.server import ApiServer
from tests.sim.fixtures import compute_domain, compute_domain_crd


async def test_group_list_prefers_resource_v1(api: client.ApiClient) -> None:
    groups = await client.ApisApi(api).get_api_versions()
    resource = next(g for g in groups.groups if g.name == "resource.k8s.io")
    assert resource.preferred_version.version == "v1"
    assert {v.version for v in resource.versions} >= {"v1", "v1beta1"}


async def test_resource_list_names_subresources(api: client.ApiClient) -> None:
    resources = await client.CoreV1Api(api).get_api_resources()
    names = {r.name: r for r in resources.resources}
    assert names["pods"].namespaced and "watch" in names["pods"].verbs
    assert "pods/status" in names
    assert not names["nodes"].namespaced


async def test_created_crd_appears_in_discovery(api: client.ApiClient) -> None:
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(compute_domain_crd())
    resources = await client.CustomObjectsApi(api).get_api_resources("resource.nvidia.com", "v1beta1")
    assert {r.name for r in resources.resources} == {"computedomains", "computedomains/status"}


async def test_version_endpoint(api: client.ApiClient) -> None:
    version = await client.VersionApi(api).get_code()
    assert version.major == "1" and int(version.minor) >= 32


async def _kubectl(kubeconfig: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        "kubectl",
        f"--kubeconfig={kubeconfig}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, output.decode()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_creates_and_gets_custom_objects(apiserver: ApiServer, tmp_path: Path) -> None:
    """No OpenAPI document is served, so kubectl's client-side schema validation is turned off."""
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    crd_file = tmp_path / "crd.json"
    crd_file.write_text(json.dumps(compute_domain_crd()))
    code, output = await _kubectl(kubeconfig, "create", "--validate=false", "-f", str(crd_file))
    assert code == 0, output
    cd_file = tmp_path / "cd.json"
    cd_file.write_text(json.dumps(compute_domain("cd1")))
    code, output = await _kubectl(
        kubeconfig, "create", "--validate=false", "-n", "default", "-f", str(cd_file)
    )
    assert code == 0, output
    code, output = await _kubectl(kubeconfig, "get", "computedomains", "-n", "default")
    assert code == 0, output
    assert "cd1" in output
    code, output = await _kubectl(kubeconfig, "get", "computedomain", "cd1", "-n", "default", "-o", "json")
    assert code == 0, output
    assert json.loads(output)["spec"]["channel"]["allocationMode"] == "Single"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_apply_server_side_apply_and_delete(apiserver: ApiServer, tmp_path: Path) -> None:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    crd_file, cd_file = tmp_path / "crd.json", tmp_path / "cd.json"
    crd_file.write_text(json.dumps(compute_domain_crd()))
    cd_file.write_text(json.dumps(compute_domain("cd1", team="a")))
    for args in (
        ("apply", "--validate=false", "-f", str(crd_file)),
        ("apply", "--validate=false", "-n", "default", "-f", str(cd_file)),
        ("apply", "--server-side", "--validate=false", "-n", "default", "-f", str(cd_file)),
    ):
        code, output = await _kubectl(kubeconfig, *args)
        assert code == 0, output
    stored = apiserver.store.get(
        apiserver.store.type_of("resource.nvidia.com", "computedomains"), "default", "cd1"
    )
    assert stored["metadata"]["labels"] == {"team": "a"}
    code, output = await _kubectl(kubeconfig, "delete", "-n", "default", "computedomain", "cd1")
    assert code == 0, output
    code, output = await _kubectl(kubeconfig, "get", "computedomains", "-n", "default")
    assert code == 0 and "No resources found" in output
