"""The claim admission policy is advisory: Prepare stays the judge.

In the host-managed cluster (the real controller and kubelet plugins), two claims are made before the chart's
admission policies exist, as on a cluster upgraded to this chart: one asking for all channels, one with an
unknown config field. Once the policies are installed, the same claims are refused at create time; the
existing ones still reach a node, and the plugin's Prepare fails them with the same words the policy used.
"""

from __future__ import annotations

from typing import Any

import pytest

from cdctl.sim.apiserver.errors import ApiError
from cdctl.sim.rack.chart import admission_policies
from tests.hostmanaged.conftest import DRIVER, NAMESPACE, HostManagedCluster, until

pytestmark = pytest.mark.integration

CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
ALL_WORDS = (
    "allocationMode All is not supported with HostManagedIMEX: only Single (or unset) is allowed, "
    "one channel (channel 0) per node"
)
FIELD_WORDS = (
    "unexpectedField: error decoding config parameters: strict decoding error: "
    'unknown field "unexpectedField"'
)


def claim(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}],
                "config": [{"requests": ["channel"], "opaque": {"driver": DRIVER, "parameters": parameters}}],
            }
        },
    }


def pod(name: str, node: str, claim_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "channel"}]}}],
            "resourceClaims": [{"name": "channel", "resourceClaimName": claim_name}],
        },
    }


async def test_a_claim_made_before_the_policy_still_fails_at_prepare_in_the_same_words(
    cluster: HostManagedCluster,
) -> None:
    uid = (await cluster.admitted_domain("train-a"))["metadata"]["uid"]
    base = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
    }
    cases = {
        "all-channels": ({**base, "allocationMode": "All"}, ALL_WORDS),
        "unexpected": ({**base, "unexpectedField": "foo"}, FIELD_WORDS),
    }
    store = cluster.sim.store
    claims = cluster.type_of("resource.k8s.io", "resourceclaims")
    for name, (parameters, _) in cases.items():
        store.create(claims, NAMESPACE, claim(name, parameters))  # no policy yet: accepted

    values = {"featureGates": {"HostManagedIMEX": True}}
    assert cluster.sim.apiserver.load_policies(admission_policies(values, namespace="cdctl-system")) > 0
    for name, (parameters, words) in cases.items():
        with pytest.raises(ApiError) as caught:
            store.create(claims, NAMESPACE, claim(f"{name}-again", parameters))
        assert caught.value.code == 422
        refusal = caught.value.message
        assert f"ResourceClaim {NAMESPACE}/{name}-again: spec.devices.config[0].opaque.parameters." in refusal
        assert refusal.endswith(words)

    for (name, (_, words)), node in zip(cases.items(), cluster.fabric_nodes, strict=True):
        made = store.create(cluster.type_of("", "pods"), NAMESPACE, pod(f"uses-{name}", node, name))
        # The kubelet's first attempts may wait for the claim's allocation; then Prepare answers.
        await until(lambda made=made, words=words: words in cluster.prepare_error(made), f"{name}: {words}")
        row = await cluster.refused(node, name)
        assert row["state"] == "PrepareFailed" and words in row["last_error"]
        assert not cluster.running(f"uses-{name}")
