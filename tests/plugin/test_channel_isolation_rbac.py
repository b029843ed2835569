"""The plugin under channel isolation with the chart's own RBAC and admission policies for that install:
start, slices, the clique's channel, the shared daemon's pod, Prepare and Unprepare are refused nothing,
and the plugin's account can no longer patch Nodes (no label is used in this mode)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.api.isolation import ImexIsolation
from cdctl.k8s.rest import KubeApi
from cdctl.sim.apiserver.server import ApiServer
from tests.chart.conftest import chart_policies, chart_rbac
from tests.plugin.test_app import U, config, seed_claim, serving_plugin
from tests.plugin.test_app_rbac import PLUGIN_ACCOUNT
from tests.plugin.test_channel_isolation_app import CLIQUES, shared_daemon_pod, use_shared_device

Env = tuple[ApiServer, KubeApi, Path]
VALUES = {"allowDefaultNamespace": True, "resources": {"computeDomains": {"imex": {"isolation": "channel"}}}}


@pytest.mark.parametrize("host_managed", [False, True])
async def test_the_chart_grants_the_channel_isolation_plugin_what_it_asks(
    env: Env, host_managed: bool
) -> None:
    server, api, base = env
    values = {**VALUES, "featureGates": {"HostManagedIMEX": host_managed}}
    clique = f"{U}.7"
    domain_uid, claim_uid = await seed_claim(api, clique)
    await use_shared_device(api)
    name = f"{domain_uid}.{clique}"
    obj = await api.get(f"{CLIQUES}/{name}")
    obj["imexChannel"] = 12
    await api.replace(f"{CLIQUES}/{name}", obj)
    await shared_daemon_pod(api, ready=True)
    server.rbac.load(chart_rbac("default", values))
    server.load_policies(chart_policies("default", values))
    kubeconfig = server.write_kubeconfig(base / "kubeconfig-plugin", PLUGIN_ACCOUNT)
    cfg = dataclasses.replace(
        config(base), kubeconfig=str(kubeconfig), isolation=ImexIsolation.CHANNEL, channel_slots=2
    )
    if host_managed:
        from cdctl.api.gates import parse_feature_gates

        cfg = dataclasses.replace(cfg, gates=parse_feature_gates("HostManagedIMEX=true"))
    async with serving_plugin(cfg, api) as (_, stub):
        ref = v1.Claim(namespace="default", name="rc", uid=claim_uid)
        prepared = await asyncio.wait_for(
            stub.node_prepare_resources(v1.NodePrepareResourcesRequest(claims=[ref])), 30
        )
        unprepared = await stub.node_unprepare_resources(v1.NodeUnprepareResourcesRequest(claims=[ref]))
    assert (prepared.claims[claim_uid].error, unprepared.claims[claim_uid].error) == ("", "")
    assert server.rbac.denials == []
    assert server.store.policies.denials == []
    rules = _plugin_rules(values)
    node_verbs = {v for r in rules if "nodes" in r.get("resources", []) for v in r["verbs"]}
    assert node_verbs == {"get"}
    pod_verbs = {v for r in rules if "pods" in r.get("resources", []) for v in r["verbs"]}
    assert pod_verbs == (set() if host_managed else {"get", "list", "watch"})


def _plugin_rules(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        r
        for o in chart_rbac("default", values)
        if "kubelet-plugin" in o["metadata"]["name"]
        for r in o.get("rules") or []
    ]
