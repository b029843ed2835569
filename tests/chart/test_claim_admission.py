"""The chart's claim admission policy, as Helm renders it, in the simulated API server: every config the
kubelet plugin's Prepare refuses is refused at create time, in every served resource.k8s.io version, for
claims and templates, with a message naming the object, the config index and the field, in the plugin's own
words; other drivers' configs and good configs pass; HostManagedIMEX adds its allowlist and refuses
multi-device requests; objects made before the policy stay writable.
"""

from __future__ import annotations

from typing import Any

import pytest
from helm_python import chart as hc

from cdctl.sim.apiserver.errors import ApiError
from tests.chart.claimadmission import (
    CHANNEL_CLASS,
    TENANT,
    TENANT_NS,
    UID,
    AdmissionCluster,
    channel,
    claim,
    config,
    daemon,
    plugin_words,
    request,
    template,
)
from tests.chart.conftest import render_objects

VERSIONS = ("v1", "v1beta2", "v1beta1")
HOST_MANAGED = {"featureGates": {"HostManagedIMEX": True}}
ONE_CHANNEL = (
    "is not supported with HostManagedIMEX: a node has one channel device (channel 0), request exactly one"
)


@pytest.fixture(scope="module")
def driver_managed(helm_chart: hc.Chart) -> list[dict[str, Any]]:
    return render_objects(helm_chart, {})


@pytest.fixture(scope="module")
def host_managed(helm_chart: hc.Chart) -> list[dict[str, Any]]:
    return render_objects(helm_chart, HOST_MANAGED)


@pytest.fixture
def cluster(driver_managed: list[dict[str, Any]]) -> AdmissionCluster:
    return AdmissionCluster(driver_managed)


@pytest.fixture(scope="module")
def refusing(driver_managed: list[dict[str, Any]]) -> AdmissionCluster:
    """One cluster for the tests that only make writes it refuses (nothing is stored)."""
    return AdmissionCluster(driver_managed)


@pytest.fixture
def hm_cluster(host_managed: list[dict[str, Any]]) -> AdmissionCluster:
    return AdmissionCluster(host_managed)


# Configs Prepare refuses in either mode, and what the policy says (below `opaque.`): the plugin's words.
REFUSED: list[tuple[str, Any, str]] = [
    ("no domainID", channel(domainID=None), "parameters.domainID: domainID cannot be empty"),
    ("empty domainID", channel(domainID=""), "parameters.domainID: domainID cannot be empty"),
    ("daemon without domainID", daemon(domainID=None), "parameters.domainID: domainID cannot be empty"),
    (
        "unknown allocationMode",
        channel(allocationMode="Many"),
        "parameters.allocationMode: unknown allocationMode 'Many' (want Single or All)",
    ),
    (
        "unknown field",
        channel(unexpectedField="foo"),
        "parameters.unexpectedField: error decoding config parameters: strict decoding error: unknown field "
        '"unexpectedField"',
    ),
    (
        "allocationMode in a daemon config",
        daemon(allocationMode="Single"),
        "parameters.allocationMode: error decoding config parameters: strict decoding error: unknown field "
        '"allocationMode"',
    ),
    (
        "another apiVersion",
        channel(apiVersion="resource.nvidia.com/v1"),
        "parameters.apiVersion: error decoding config parameters: unsupported apiVersion "
        "'resource.nvidia.com/v1'",
    ),
    (
        "no apiVersion",
        channel(apiVersion=None),
        "parameters.apiVersion: error decoding config parameters: unsupported apiVersion ''",
    ),
    (
        "another kind",
        channel(kind="GpuConfig"),
        "parameters.kind: error decoding config parameters: unsupported kind 'GpuConfig'",
    ),
    ("no kind", channel(kind=None), "parameters.kind: error decoding config parameters: unsupported kind ''"),
    (
        "numeric domainID",
        channel(domainID=7),
        "parameters.domainID: error decoding config parameters: domainID must be a string",
    ),
    (
        "boolean allocationMode",
        channel(allocationMode=True),
        "parameters.allocationMode: error decoding config parameters: allocationMode must be a string",
    ),
    (
        "numeric apiVersion",
        channel(apiVersion=1),
        "parameters.apiVersion: error decoding config parameters: apiVersion must be a string",
    ),
    (
        "list kind",
        channel(kind=["x"]),
        "parameters.kind: error decoding config parameters: kind must be a string",
    ),
    (
        "domainID not a uid",
        channel(domainID="my-domain"),
        "parameters.domainID: domainID must be a ComputeDomain uid (a UUID), got 'my-domain'",
    ),
    (
        "domainID an uppercase uid",
        daemon(domainID=UID.upper()),
        f"parameters.domainID: domainID must be a ComputeDomain uid (a UUID), got '{UID.upper()}'",
    ),
    # Values are echoed cut to 200 characters, and a long field name to 60.
    (
        "a long allocationMode",
        channel(allocationMode="x" * 300),
        "parameters.allocationMode: unknown allocationMode '" + "x" * 199 + "... (302 characters) "
        "(want Single or All)",
    ),
    (
        "a long kind",
        channel(kind="K" * 250),
        "parameters.kind: error decoding config parameters: unsupported kind '"
        + "K" * 199
        + "... (252 characters)",
    ),
    (
        "a long unknown field",
        channel(**{"y" * 300: 1}),
        "parameters."
        + "y" * 60
        + "...: error decoding config parameters: strict decoding error: unknown field "
        '"' + "y" * 199 + "... (300 characters)",
    ),
]
ACCEPTED = [
    channel(),
    channel(allocationMode="Single"),
    channel(allocationMode="All"),
    channel(allocationMode=""),
    channel(allocationMode=None),
    {**channel(), "allocationMode": None},  # JSON null: the plugin reads ""
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("make", [claim, template], ids=["claim", "template"])
@pytest.mark.parametrize(("case", "parameters", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_what_prepare_refuses_is_refused_at_create(
    refusing: AdmissionCluster, version: str, make: Any, case: str, parameters: Any, words: str
) -> None:
    body = make(parameters, version=version)
    kind, path = (
        ("ResourceClaim", "spec.devices") if make is claim else ("ResourceClaimTemplate", "spec.spec.devices")
    )
    message = refusing.refusal(body, user=TENANT)
    assert message == f"{kind} {TENANT_NS}/{body['metadata']['name']}: {path}.config[0].opaque.{words}"


@pytest.mark.parametrize(("case", "parameters", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_policy_speaks_the_plugins_words(
    refusing: AdmissionCluster, case: str, parameters: Any, words: str
) -> None:
    prepare = plugin_words(parameters, host_managed=False)
    assert prepare and words.endswith(prepare)
    assert words[: -len(prepare)] in ("parameters.", "")  # the plugin's field, below the config's path
    message = refusing.refusal(claim(parameters), user=TENANT)
    assert message.startswith(f"ResourceClaim {TENANT_NS}/c: ") and message.endswith(prepare)


@pytest.mark.parametrize("make", [claim, template], ids=["claim", "template"])
def test_parameters_that_are_no_object_are_refused_before_any_policy(
    refusing: AdmissionCluster, make: Any
) -> None:
    """As a real kube-apiserver v1.36 refuses them: its own validation, not the claim policy."""
    body = make(["x"])
    path = "spec.devices" if make is claim else "spec.spec.devices"
    with pytest.raises(ApiError) as caught:
        refusing.write(body, user=TENANT)
    assert (caught.value.code, caught.value.message) == (
        422,
        f'{body["kind"]} "{body["metadata"]["name"]}" is invalid: {path}.config[0].opaque.parameters: '
        'Invalid value: "<value omitted>": must be a valid JSON object',
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("parameters", ACCEPTED)
def test_configs_prepare_accepts_pass(cluster: AdmissionCluster, version: str, parameters: Any) -> None:
    assert plugin_words(parameters, host_managed=False) == ""
    cluster.write(claim(parameters, version=version), user=TENANT)
    cluster.write(template(parameters, version=version), user=TENANT)
    assert cluster.store.policies.denials == []
    assert cluster.store.policies.admitted[("claims-policy-cdctl", TENANT.username)] == 2


def test_the_message_names_the_index_of_the_first_bad_config(cluster: AdmissionCluster) -> None:
    configs = [
        config({"anything": ["goes"]}, driver="gpu.nvidia.com"),  # another driver's: none of our business
        config(channel()),
        config(channel(domainID=None)),
        config(channel(unexpectedField=1)),
    ]
    message = cluster.refusal(claim(configs=configs), user=TENANT)
    # As Prepare: every config is decoded before any is validated, so the decoding error comes first.
    assert message.startswith(
        f"ResourceClaim {TENANT_NS}/c: spec.devices.config[3].opaque.parameters.unexpectedField"
    )
    message = cluster.refusal(claim(configs=configs[:3]), user=TENANT)
    assert message.endswith("spec.devices.config[2].opaque.parameters.domainID: domainID cannot be empty")


def test_claims_without_this_drivers_configs_are_not_looked_at(cluster: AdmissionCluster) -> None:
    # Parameters this driver would refuse (a kind it does not know); a real server refuses a non-object for
    # any driver before the policy, so the case is an object.
    other = claim(
        configs=[config({"apiVersion": "gpu.nvidia.com/v1", "kind": "GpuConfig"}, driver="gpu.nvidia.com")]
    )
    cluster.write(other, user=TENANT)
    cluster.write({**claim(configs=[]), "metadata": {"name": "no-config"}}, user=TENANT)
    assert cluster.store.policies.admitted[("claims-policy-cdctl", TENANT.username)] == 0


def test_a_generated_name_is_named(cluster: AdmissionCluster) -> None:
    body = claim(channel(domainID=""), metadata={"generateName": "worker-"})
    del body["metadata"]["name"]
    message = cluster.refusal(body, user=TENANT)
    assert message.startswith(f"ResourceClaim {TENANT_NS}/worker-") and "config[0]" in message


# ---- HostManagedIMEX -------------------------------------------------------------------------------------
HM_REFUSED: list[tuple[str, Any, str]] = [
    (
        "allocationMode All",
        channel(allocationMode="All"),
        "parameters.allocationMode: allocationMode All is not supported with HostManagedIMEX: only Single "
        "(or unset) is allowed, one channel (channel 0) per node",
    ),
    (
        "unknown allocationMode",
        channel(allocationMode="Many"),
        "parameters.allocationMode: allocationMode Many is not supported with HostManagedIMEX: only Single "
        "(or unset) is allowed, one channel (channel 0) per node",
    ),
    (
        "a daemon config",
        daemon(),
        "parameters.kind: daemon claims are disabled under HostManagedIMEX: the host's nvidia-imex owns the "
        "IMEX domain (no daemon device is published, no daemon claim template made: a stale or hand-made "
        "claim)",
    ),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("case", "parameters", "words"), HM_REFUSED, ids=[c[0] for c in HM_REFUSED])
def test_host_managed_refuses_what_its_prepare_refuses_in_its_words(
    hm_cluster: AdmissionCluster, version: str, case: str, parameters: Any, words: str
) -> None:
    prepare = plugin_words(parameters, host_managed=True)
    assert words.endswith(prepare)
    message = hm_cluster.refusal(claim(parameters, version=version), user=TENANT)
    assert message == f"ResourceClaim {TENANT_NS}/c: spec.devices.config[0].opaque.{words}"
    message = hm_cluster.refusal(template(parameters, version=version), user=TENANT)
    assert message == f"ResourceClaimTemplate {TENANT_NS}/t: spec.spec.devices.config[0].opaque.{words}"


def test_the_host_managed_rules_are_off_when_the_driver_manages_imex(cluster: AdmissionCluster) -> None:
    cluster.write(claim(channel(allocationMode="All")), user=TENANT)
    many = [request("channel", "v1", count=2)]
    cluster.write(claim(channel(), name="two", requests=many), user=TENANT)
    alternatives = [{"name": "channel", "firstAvailable": [{"name": "a", "deviceClassName": CHANNEL_CLASS}]}]
    cluster.write(claim(channel(), name="alt", requests=alternatives), user=TENANT)


@pytest.mark.parametrize(
    ("version", "requests", "words"),
    [
        (
            "v1",
            [request("channel", "v1", count=2)],
            f"requests[0].exactly.count: count 2 {ONE_CHANNEL}",
        ),
        (
            "v1beta1",
            [request("channel", "v1beta1", count=3, allocationMode="ExactCount")],
            f"requests[0].count: count 3 {ONE_CHANNEL}",
        ),
        (
            "v1",
            [
                request("gpus", "v1", device_class="gpu.nvidia.com", count=4),
                {"name": "channel", "firstAvailable": [{"name": "a", "deviceClassName": CHANNEL_CLASS}]},
            ],
            "requests[1].firstAvailable: firstAvailable is not supported with HostManagedIMEX: request "
            "exactly one channel device by its class",
        ),
        (
            "v1",  # a class of the operator's own, named by this driver's config
            [request("channel", "v1", device_class="my-channels.example.com", count=2)],
            f"requests[0].exactly.count: count 2 {ONE_CHANNEL}",
        ),
    ],
)
def test_host_managed_refuses_requests_for_more_than_one_channel(
    hm_cluster: AdmissionCluster, version: str, requests: list[dict[str, Any]], words: str
) -> None:
    message = hm_cluster.refusal(claim(channel(), version=version, requests=requests), user=TENANT)
    assert message == f"ResourceClaim {TENANT_NS}/c: spec.devices.{words}"


def test_host_managed_leaves_other_drivers_requests_and_one_channel_alone(
    hm_cluster: AdmissionCluster,
) -> None:
    requests = [
        request("gpus", "v1", device_class="gpu.nvidia.com", count=4),
        request("channel", "v1", count=1, allocationMode="ExactCount"),
    ]
    hm_cluster.write(claim(channel(), requests=requests), user=TENANT)
    flat = [request("channel", "v1beta1", count=1, allocationMode="ExactCount")]
    hm_cluster.write(claim(channel(allocationMode="Single"), version="v1beta1", name="flat", requests=flat))


# ---- objects made before the policy ----------------------------------------------------------------------
def test_a_claim_made_before_the_policy_stays_writable(driver_managed: list[dict[str, Any]]) -> None:
    cluster = AdmissionCluster([])
    made = cluster.write(claim(channel(unexpectedField="foo")), user=TENANT)  # no policy yet
    cluster.load(driver_managed)
    store, claims = cluster.store, cluster.store.type_of("resource.k8s.io", "resourceclaims")
    made["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    made = store.update(claims, TENANT_NS, "c", made, user=TENANT)
    made["status"] = {"allocation": {"devices": {"results": []}}}
    made = store.update(claims, TENANT_NS, "c", made, subresource="status", user=TENANT)
    made["metadata"]["finalizers"] = []
    store.update(claims, TENANT_NS, "c", made, user=TENANT)
    store.delete(claims, TENANT_NS, "c", user=TENANT)
    assert store.policies.denials == []
    # The same claim made now is refused: CREATE is what the policy judges.
    assert "unknown field" in cluster.refusal(claim(channel(unexpectedField="foo")), user=TENANT)


def test_admission_disabled_installs_no_claim_policy(helm_chart: hc.Chart) -> None:
    cluster = AdmissionCluster(render_objects(helm_chart, {"admission": {"enabled": False}}))
    cluster.write(claim(channel(unexpectedField="foo")), user=TENANT)
    assert not any(
        name.startswith(("claims-", "computedomains-")) for name in cluster.store.policies.policies
    )
