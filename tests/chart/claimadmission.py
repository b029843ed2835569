"""The rig of the claim admission tests: a simulated API server holding the chart's CRDs and the admission
policies Helm renders for given values, written to in any served version as any user, and claims built in
every shape a version has.

`AdmissionCluster(objects)` loads the ValidatingAdmissionPolicies among `objects` (Helm's rendering, never a
copy); `write(body, user=...)` creates `body` in the version its apiVersion names, as the HTTP handlers do
(converted to storage, judged in its own version); `refusal(body, ...)` returns the message of the 422 a
policy answers. `claim(...)` and `template(...)` build a channel or daemon claim in v1, v1beta2 or v1beta1
shape. `plugin_words(parameters, host_managed)` is what the kubelet plugin's Prepare says of the same config
(cdctl/api/configs.py, cdctl/plugin/prepare.py), for the "same words" checks. Used by
tests/chart/test_claim_admission*.py.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdctl.api.configs import decode_config
from cdctl.domain.errors import InvalidInput, PermanentError
from cdctl.plugin.preparesettings import check_host_managed_config
from cdctl.sim.apiserver.conversion import convert
from cdctl.sim.apiserver.errors import ApiError
from cdctl.sim.apiserver.identity import ADMIN, UserInfo, service_account_token, user_for_token
from cdctl.sim.apiserver.store import ObjectStore
from cdctl.sim.controllers.claimtemplates import RESOURCE_CLAIM_CONTROLLER
from cdctl.sim.rack import chart as sim_chart
from tests.chart.conftest import NAMESPACE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claims"
TENANT_NS = "team-a"
DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
API_VERSION = "resource.nvidia.com/v1beta1"
CHANNEL = "ComputeDomainChannelConfig"
DAEMON = "ComputeDomainDaemonConfig"
UID = "6f1b2c3d-0000-4000-8000-000000000001"

CONTROLLER = user_for_token(service_account_token(NAMESPACE, "cdctl-controller"))
TENANT = user_for_token(service_account_token(TENANT_NS, "trainer"))
KCM = RESOURCE_CLAIM_CONTROLLER
KCM_ITSELF = UserInfo("system:kube-controller-manager", ("system:authenticated",))
_PLURALS = {
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ComputeDomain": "computedomains",
}


def channel(**fields: Any) -> dict[str, Any]:
    """ComputeDomainChannelConfig parameters; a field given None is left out."""
    params = {"apiVersion": API_VERSION, "kind": CHANNEL, "domainID": UID, **fields}
    return {k: v for k, v in params.items() if v is not None}


def daemon(**fields: Any) -> dict[str, Any]:
    params = {"apiVersion": API_VERSION, "kind": DAEMON, "domainID": UID, **fields}
    return {k: v for k, v in params.items() if v is not None}


def request(name: str, version: str, device_class: str = CHANNEL_CLASS, **fields: Any) -> dict[str, Any]:
    """One device request: v1 and v1beta2 nest its fields under `exactly`, v1beta1 keeps them flat."""
    exact = {"deviceClassName": device_class, **fields}
    return {"name": name, **exact} if version == "v1beta1" else {"name": name, "exactly": exact}


def config(parameters: Any, requests: Iterable[str] = ("channel",), driver: str = DRIVER) -> dict[str, Any]:
    entry: dict[str, Any] = {"opaque": {"driver": driver, "parameters": parameters}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def claim_spec(
    configs: list[dict[str, Any]], version: str = "v1", requests: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"devices": {"requests": requests or [request("channel", version)], "config": configs}}


def claim(
    parameters: Any = None,
    *,
    version: str = "v1",
    name: str = "c",
    configs: list[dict[str, Any]] | None = None,
    requests: list[dict[str, Any]] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim in `version`'s shape with one config of `parameters` (or `configs`)."""
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, **(metadata or {})},
        "spec": claim_spec(configs if configs is not None else [config(parameters)], version, requests),
    }


def template(
    parameters: Any = None, *, version: str = "v1", name: str = "t", **kwargs: Any
) -> dict[str, Any]:
    """The same as a ResourceClaimTemplate (the claim spec nested under spec.spec)."""
    inner = claim(parameters, version=version, name=name, **kwargs)
    return {
        "apiVersion": inner["apiVersion"],
        "kind": "ResourceClaimTemplate",
        "metadata": inner["metadata"],
        "spec": {"spec": inner["spec"]},
    }


def from_pod(pod_uid: str = "pod-uid") -> dict[str, Any]:
    """The metadata the resource-claim controller gives a claim it makes for a pod from its template."""
    return {
        "annotations": {"resource.kubernetes.io/pod-claim-name": "daemon"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod_uid, "controller": True}
        ],
    }


def fixture(name: str) -> list[dict[str, Any]]:
    """The documents of tests/fixtures/claims/<name>."""
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def plugin_words(parameters: Any, host_managed: bool, obj: str = f"ResourceClaim {TENANT_NS}/c") -> str:
    """What Prepare says of the config: `field: problem` of an InvalidInput, the message of another
    PermanentError, "" when it accepts it (the plugin's own functions, in its order)."""
    try:
        decoded = decode_config(parameters, strict=True, obj=obj)
        if host_managed:
            check_host_managed_config(decoded)
        decoded.validate(obj)
    except InvalidInput as error:
        return f"{error.field}: {error.problem}"
    except PermanentError as error:
        return str(error)
    return ""


class AdmissionCluster:
    """An API server with the chart's CRDs, the tenant and driver namespaces and the given policies."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self.store = ObjectStore()
        for crd in sim_chart.crds():
            self.store.create(
                self.store.type_of("apiextensions.k8s.io", "customresourcedefinitions"), "", crd
            )
        for namespace in (TENANT_NS, NAMESPACE, "cw-nvidia-gpu-operator"):
            self.store.create(self.store.type_of("", "namespaces"), "", {"metadata": {"name": namespace}})
        self.load(objects)

    def load(self, objects: Iterable[dict[str, Any]]) -> None:
        wanted = [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
        for obj in sorted(wanted, key=lambda o: o["kind"] != "ValidatingAdmissionPolicy"):
            plural = (
                "validatingadmissionpolicies"
                if obj["kind"].endswith("Policy")
                else "validatingadmissionpolicybindings"
            )
            self.store.create(
                self.store.type_of("admissionregistration.k8s.io", plural), "", copy.deepcopy(obj)
            )

    def write(
        self, body: dict[str, Any], *, user: UserInfo = ADMIN, namespace: str | None = None
    ) -> dict[str, Any]:
        group, _, version = body["apiVersion"].rpartition("/")
        plural = _PLURALS[body["kind"]]
        served = self.store.registry.get(group, version, plural)
        storage = self.store.type_of(group, plural)
        namespace = namespace or body["metadata"].get("namespace") or TENANT_NS
        stored = convert(copy.deepcopy(body), served, storage)
        return self.store.create(storage, namespace, stored, served=served, user=user)

    def refusal(self, body: dict[str, Any], *, user: UserInfo = ADMIN, namespace: str | None = None) -> str:
        """The message a policy refuses `body` with (the test fails unless it is a policy's 422)."""
        with pytest.raises(ApiError) as caught:
            self.write(body, user=user, namespace=namespace)
        assert caught.value.code == 422, caught.value.message
        assert "ValidatingAdmissionPolicy" in caught.value.message, caught.value.message
        return caught.value.message.split(" denied request: ", 1)[1]
