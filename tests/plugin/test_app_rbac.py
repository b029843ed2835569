"""The plugin process under the chart's own RBAC and admission policies: the simulated API server enforces the
rendered roles and policies for the plugin's service account (its token bound to a pod on its node), so a
request the chart does not grant fails here as it would on a real cluster.

A whole start, slice publishing, Prepare and Unprepare through the socket must be refused nothing; and
without the Node `patch` verb, the Prepare fails with the API server's words instead of labelling the Node.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.rbac import service_account_token
from cdctl.sim.apiserver.server import ApiServer
from tests.chart.conftest import chart_policies, chart_rbac
from tests.plugin.test_app import NODE, U, config, seed_claim, serving_plugin

Env = tuple[ApiServer, KubeApi, Path]
PLUGIN_ACCOUNT = service_account_token(
    "default", "cdctl-kubelet-plugin", pod="cdctl-kubelet-plugin-x", pod_uid="uid-plugin", node=NODE
)


@pytest.fixture(scope="module")
def plugin_rbac() -> list[dict[str, Any]]:
    # The namespace the test's cliques live in (the chart refuses "default" unless told).
    return chart_rbac("default", {"allowDefaultNamespace": True})


def without_node_patch(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    trimmed = []
    for obj in objects:
        rules = [
            {**rule, "verbs": [v for v in rule["verbs"] if v != "patch"]}
            if "nodes" in rule.get("resources", [])
            else rule
            for rule in obj.get("rules") or []
        ]
        trimmed.append({**obj, "rules": rules} if "rules" in obj else obj)
    return trimmed


async def prepare_and_unprepare(env: Env, rbac: list[dict[str, Any]]) -> tuple[str, str]:
    """Run the plugin as its service account; the Prepare's error ('' if none) and the Unprepare's."""
    server, api, base = env
    domain_uid, claim_uid = await seed_claim(api, f"{U}.7")
    server.rbac.load(rbac)
    server.load_policies(chart_policies("default", {"allowDefaultNamespace": True}))
    kubeconfig = server.write_kubeconfig(base / "kubeconfig-plugin", PLUGIN_ACCOUNT)
    cfg = dataclasses.replace(config(base), kubeconfig=str(kubeconfig))
    async with serving_plugin(cfg, api, (domain_uid,)) as (_, stub):
        ref = v1.Claim(namespace="default", name="rc", uid=claim_uid)
        prepared = await stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref]))
        unprepared = await stub.node_unprepare_resources(v1.NodeUnprepareResourcesRequest(claims=[ref]))
    return prepared.claims[claim_uid].error, unprepared.claims[claim_uid].error


async def test_the_chart_grants_everything_the_plugin_asks_for(
    env: Env, plugin_rbac: list[dict[str, Any]]
) -> None:
    server, _, _ = env
    assert await prepare_and_unprepare(env, plugin_rbac) == ("", "")
    assert server.rbac.denials == []
    assert server.store.policies.denials == []


async def test_a_verb_the_chart_does_not_grant_fails_the_prepare_with_the_servers_words(
    env: Env, plugin_rbac: list[dict[str, Any]]
) -> None:
    server, _, _ = env
    prepare_error, _ = await prepare_and_unprepare(env, without_node_patch(plugin_rbac))
    assert "cannot patch resource" in prepare_error
    assert any('cannot patch resource "nodes"' in denial for denial in server.rbac.denials)
