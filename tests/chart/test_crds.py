"""The CRDs carry the Go driver's ComputeDomain API (fields, enums, defaults, the immutable-spec rule) plus
our printer columns and short name, and the DeviceClass CEL selectors pick exactly the devices they should.

Custom resources are validated with jsonschema against each CRD's openAPIV3Schema (kubernetes-validate has no
schema for them); CEL rules and selectors are evaluated with the CEL library the simulated cluster uses.
"""

from __future__ import annotations

from typing import Any

import cel
import jsonschema
import pytest

from tests.chart.conftest import find


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _computedomain(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"channel": {"resourceClaimTemplate": {"name": "train-a-imex-channel"}}}
    body.update(spec)
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "train-a", "namespace": "default"},
        "spec": body,
    }


def test_crd_schemas_are_valid_json_schemas(crd_objects: dict[str, dict[str, Any]]) -> None:
    for crd in crd_objects.values():
        jsonschema.Draft4Validator.check_schema(_schema(crd))


def test_computedomain_crd_shape(crd_objects: dict[str, dict[str, Any]]) -> None:
    crd = crd_objects["ComputeDomain"]
    assert crd["metadata"]["name"] == "computedomains.resource.nvidia.com"
    assert crd["spec"]["group"] == "resource.nvidia.com"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["plural"] == "computedomains"
    assert crd["spec"]["names"]["shortNames"] == ["cd"]
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Status", "string", ".status.status"),
        ("Nodes", "integer", ".spec.numNodes"),
        ("Channels", "string", ".status.channels"),  # channel isolation (docs/channel-isolation.md)
        ("Age", "date", ".metadata.creationTimestamp"),
    ]


def test_computedomain_fields_enums_and_defaults(crd_objects: dict[str, dict[str, Any]]) -> None:
    schema = _schema(crd_objects["ComputeDomain"])
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["channel"]
    assert spec["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
    ]
    num_nodes = spec["properties"]["numNodes"]
    assert (num_nodes["type"], num_nodes["default"], num_nodes["minimum"]) == ("integer", 0, 0)
    channel = spec["properties"]["channel"]
    assert channel["required"] == ["resourceClaimTemplate"]
    assert channel["properties"]["resourceClaimTemplate"]["required"] == ["name"]
    mode = channel["properties"]["allocationMode"]
    assert (mode["default"], sorted(mode["enum"])) == ("Single", ["All", "Single"])
    status = schema["properties"]["status"]
    assert status["required"] == ["status"]
    assert (status["properties"]["status"]["default"], sorted(status["properties"]["status"]["enum"])) == (
        "NotReady",
        ["NotReady", "Ready"],
    )
    nodes = status["properties"]["nodes"]
    assert (nodes["x-kubernetes-list-type"], nodes["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    node = nodes["items"]
    assert sorted(node["required"]) == ["cliqueID", "ipAddress", "name"]
    assert node["properties"]["index"]["type"] == "integer"
    assert node["properties"]["status"]["default"] == "NotReady"


def test_clique_crd_shape(crd_objects: dict[str, dict[str, Any]]) -> None:
    crd = crd_objects["ComputeDomainClique"]
    assert crd["metadata"]["name"] == "computedomaincliques.resource.nvidia.com"
    (version,) = crd["spec"]["versions"]
    assert "subresources" not in version
    schema = _schema(crd)
    assert "spec" not in schema["properties"]
    daemons = schema["properties"]["daemons"]
    assert (daemons["x-kubernetes-list-type"], daemons["x-kubernetes-list-map-keys"]) == ("map", ["nodeName"])
    assert sorted(daemons["items"]["required"]) == ["cliqueID", "ipAddress", "nodeName"]
    assert sorted(daemons["items"]["properties"]["status"]["enum"]) == ["NotReady", "Ready"]


@pytest.mark.parametrize(
    "obj",
    [
        _computedomain(),
        _computedomain(numNodes=0, channel={"resourceClaimTemplate": {"name": "t"}, "allocationMode": "All"}),
        {
            **_computedomain(),
            "status": {
                "status": "Ready",
                "nodes": [
                    {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "u.1", "index": 0, "status": "Ready"}
                ],
            },
        },
    ],
)
def test_valid_computedomains_pass(crd_objects: dict[str, dict[str, Any]], obj: dict[str, Any]) -> None:
    jsonschema.Draft4Validator(_schema(crd_objects["ComputeDomain"])).validate(obj)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({**_computedomain(), "spec": {"numNodes": 1}}, "'channel' is a required property"),
        (_computedomain(numNodes=-1), "less than the minimum of 0"),
        (
            _computedomain(channel={"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Many"}),
            "'Many' is not one of",
        ),
        (_computedomain(channel={"resourceClaimTemplate": {}}), "'name' is a required property"),
        ({**_computedomain(), "status": {"status": "Broken"}}, "'Broken' is not one of"),
        (
            {**_computedomain(), "status": {"status": "Ready", "nodes": [{"name": "n1"}]}},
            "is a required property",
        ),
    ],
)
def test_invalid_computedomains_fail(
    crd_objects: dict[str, dict[str, Any]], obj: dict[str, Any], message: str
) -> None:
    with pytest.raises(jsonschema.ValidationError, match=message):
        jsonschema.Draft4Validator(_schema(crd_objects["ComputeDomain"])).validate(obj)


def test_clique_objects_validate(crd_objects: dict[str, dict[str, Any]]) -> None:
    validator = jsonschema.Draft4Validator(_schema(crd_objects["ComputeDomainClique"]))
    clique = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {"name": "uid.cluster.1", "namespace": "cdctl-system"},
        "daemons": [{"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "cluster.1", "index": 0}],
    }
    validator.validate(clique)
    clique["daemons"] = [{"nodeName": "n1", "ipAddress": "10.0.0.1"}]
    with pytest.raises(jsonschema.ValidationError, match="'cliqueID' is a required property"):
        validator.validate(clique)


def test_spec_immutability_rule(crd_objects: dict[str, dict[str, Any]]) -> None:
    (rule,) = _schema(crd_objects["ComputeDomain"])["properties"]["spec"]["x-kubernetes-validations"]
    old = _computedomain()["spec"]
    assert cel.evaluate(rule["rule"], {"self": old, "oldSelf": old}) is True
    changed = _computedomain(numNodes=4)["spec"]
    assert cel.evaluate(rule["rule"], {"self": changed, "oldSelf": old}) is False


def _device(driver: str, kind: str, index: int) -> dict[str, Any]:
    return {"device": {"driver": driver, "attributes": {driver: {"type": kind, "id": index}}}}


@pytest.mark.parametrize(
    ("device", "channel_class", "daemon_class"),
    [
        (_device("compute-domain.nvidia.com", "channel", 0), True, False),
        (_device("compute-domain.nvidia.com", "channel", 1), False, False),
        (_device("compute-domain.nvidia.com", "daemon", 0), False, True),
        (_device("gpu.nvidia.com", "channel", 0), False, False),
    ],
)
def test_deviceclass_selectors_pick_the_right_devices(
    rendered: dict[str, list[dict[str, Any]]], device: dict[str, Any], channel_class: bool, daemon_class: bool
) -> None:
    classes = {c["metadata"]["name"]: c for c in find(rendered["default"], "DeviceClass")}

    def selects(name: str) -> bool:
        (selector,) = classes[name]["spec"]["selectors"]
        return bool(cel.evaluate(selector["cel"]["expression"], device))

    assert selects("compute-domain-default-channel.nvidia.com") is channel_class
    assert selects("compute-domain-daemon.nvidia.com") is daemon_class


def test_deviceclass_selectors_are_the_go_drivers(rendered: dict[str, list[dict[str, Any]]]) -> None:
    expressions = {
        c["metadata"]["name"]: c["spec"]["selectors"][0]["cel"]["expression"]
        for c in find(rendered["default"], "DeviceClass")
    }
    assert expressions == {
        "compute-domain-default-channel.nvidia.com": (
            "device.driver == 'compute-domain.nvidia.com' && "
            "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
            "device.attributes['compute-domain.nvidia.com'].id == 0"
        ),
        "compute-domain-daemon.nvidia.com": (
            "device.driver == 'compute-domain.nvidia.com' && "
            "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
        ),
    }
