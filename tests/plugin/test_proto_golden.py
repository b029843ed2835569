"""Wire encodings of the generated kubelet protos against the golden vectors in the protocol notes."""

from __future__ import annotations

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1, v1beta1
from cdctl._proto.pluginregistration import PluginInfo, RegistrationStatus

PREPARE_REQ = bytes.fromhex("0a0e0a026e7312057569642d311a0163")
EMPTY_ENTRY = bytes.fromhex("0a090a057569642d311200")
PLUGIN_INFO = bytes.fromhex(
    "0a09445241506c7567696e1219636f6d707574652d646f6d61696e2e6e76696469612e636f6d1a3b2f7661722f6c69622f"
    "6b7562656c65742f706c7567696e732f636f6d707574652d646f6d61696e2e6e76696469612e636f6d2f6472612e736f63"
    "6b220c76312e445241506c7567696e2211763162657461312e445241506c7567696e"
)


def test_prepare_request_encodes_to_golden_bytes() -> None:
    for mod in (v1, v1beta1):
        req = mod.NodePrepareResourcesRequest(claims=[mod.Claim(namespace="ns", uid="uid-1", name="c")])
        assert bytes(req) == PREPARE_REQ
        back = mod.NodePrepareResourcesRequest.parse(PREPARE_REQ)
        assert [(c.namespace, c.uid, c.name) for c in back.claims] == [("ns", "uid-1", "c")]


def test_response_with_one_empty_entry_decodes_and_keeps_the_entry() -> None:
    for mod in (v1, v1beta1):
        prep = mod.NodePrepareResourcesResponse.parse(EMPTY_ENTRY)
        assert list(prep.claims) == ["uid-1"]
        assert prep.claims["uid-1"].error == ""
        unprep = mod.NodeUnprepareResourcesResponse.parse(EMPTY_ENTRY)
        assert list(unprep.claims) == ["uid-1"]
        encoded = bytes(mod.NodePrepareResourcesResponse(claims={"uid-1": mod.NodePrepareResourceResponse()}))
        # The empty value must still be emitted (12 00), or the kubelet would see a missing entry.
        assert encoded == EMPTY_ENTRY
        unp = mod.NodeUnprepareResourcesResponse(claims={"uid-1": mod.NodeUnprepareResourceResponse()})
        assert bytes(unp) == EMPTY_ENTRY


def test_registration_messages_encode_to_golden_bytes() -> None:
    assert bytes(RegistrationStatus(plugin_registered=True)) == bytes.fromhex("0801")
    info = PluginInfo(
        type="DRAPlugin",
        name="compute-domain.nvidia.com",
        endpoint="/var/lib/kubelet/plugins/compute-domain.nvidia.com/dra.sock",
        supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
    )
    assert bytes(info) == PLUGIN_INFO


def test_device_fields_round_trip_with_their_numbers() -> None:
    dev = v1.Device(request_names=["r"], pool_name="p", device_name="d", cdi_device_ids=["x/y=z"])
    # field 1..4 as length-delimited strings
    assert bytes(dev) == bytes.fromhex("0a0172120170") + bytes.fromhex("1a0164") + b'"\x05x/y=z'
    # a v1 share_id (field 5) from a newer kubelet is kept, not rejected
    with_share = bytes(dev) + bytes.fromhex("2a0173")
    assert bytes(v1.Device.parse(with_share)) == with_share


def test_method_paths_match_the_kubelet() -> None:
    from cdctl._proto.pluginregistration import RegistrationBase

    assert set(v1.DraPluginBase().__mapping__()) == {
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
    }
    assert set(v1beta1.DraPluginBase().__mapping__()) == {
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
    }
    assert set(RegistrationBase().__mapping__()) == {
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    }
