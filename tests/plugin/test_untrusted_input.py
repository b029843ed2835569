"""Untrusted input at Prepare: every malformed claim gets a clear per-claim error (never "internal error"),
echoed input is cut, a bad claim reference is refused before any request, and a malformed protobuf body is
answered INVALID_ARGUMENT and logged once per window without a stack."""

from __future__ import annotations

import asyncio
import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdctl._proto.k8s.io.kubelet.pkg.apis.dra import v1
from cdctl.api.refs import DomainInfo
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef
from cdctl.plugin.driver import ERROR_LIMIT, Driver, RetryPolicy
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.plugin.wire import RequestCodec
from cdctl.store import InMemoryEventStore
from tests.plugin.conftest import CLIQUE, Node, node_settings
from tests.plugin.fakes import C1, DOM1, FakeCluster, FakeGates, channel_claim, daemon_claim

POLICY = RetryPolicy(base_s=0.001, cap_s=0.002, budget_s=0.05)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
DEVICES = ("status", "allocation", "devices")
PATHS: list[tuple[Any, ...]] = [
    ("metadata",), ("metadata", "ownerReferences"), ("metadata", "ownerReferences", 0),
    ("metadata", "ownerReferences", 0, "kind"), ("status",), ("status", "reservedFor"),
    ("status", "reservedFor", 0), ("status", "allocation"), ("status", "allocation", "allocationTimestamp"),
    (*DEVICES,), (*DEVICES, "results"), (*DEVICES, "results", 0), (*DEVICES, "results", 0, "device"),
    (*DEVICES, "results", 0, "request"), (*DEVICES, "results", 0, "driver"),
    (*DEVICES, "results", 0, "adminAccess"), (*DEVICES, "config"), (*DEVICES, "config", 0),
    (*DEVICES, "config", 0, "source"), (*DEVICES, "config", 0, "requests"), (*DEVICES, "config", 0, "opaque"),
    (*DEVICES, "config", 0, "opaque", "driver"), (*DEVICES, "config", 0, "opaque", "parameters"),
    (*DEVICES, "config", 0, "opaque", "parameters", "domainID"),
    (*DEVICES, "config", 0, "opaque", "parameters", "kind"),
    (*DEVICES, "config", 0, "opaque", "parameters", "apiVersion"),
    (*DEVICES, "config", 0, "opaque", "parameters", "allocationMode"),
]  # fmt: skip


def mutated(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    target: Any = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module")
def plugin_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cdu") as tmp:
        yield Path(tmp)


async def answer(root: Path, obj: dict[str, Any]) -> str:
    cluster = FakeCluster()
    cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "nvidia")
    cluster.ready.add((DOM1, "node-a"))
    cluster.claims[("nvidia", "rc")] = obj
    store = InMemoryEventStore()
    settings_ = node_settings(root)
    state = DeviceState(
        settings_, await ClaimBook.load(store, "node-a"), cluster, FabricStatus(CLIQUE), FakeGates()
    )
    outcome = (await Driver(state, cluster, POLICY).prepare_resources([ClaimRef(C1, "nvidia", "rc")]))[C1]
    await store.close()
    return outcome.error


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    base=st.sampled_from(["channel", "daemon"]),
    path=st.sampled_from(PATHS),
    value=JSON,
)
def test_malformed_claims_get_a_clear_error_never_an_internal_one(
    runner: asyncio.Runner, plugin_root: Path, base: str, path: tuple[Any, ...], value: Any
) -> None:
    good = (channel_claim if base == "channel" else daemon_claim)(C1, DOM1, name="rc", namespace="nvidia")
    try:
        obj = mutated(good, path, value)
    except (KeyError, IndexError, TypeError):
        return  # the path does not exist in this shape
    error = runner.run(answer(plugin_root, obj))
    assert "internal error" not in error
    assert len(error) <= ERROR_LIMIT


def test_the_good_claims_the_fuzzing_starts_from_are_prepared(
    runner: asyncio.Runner, plugin_root: Path
) -> None:
    assert runner.run(answer(plugin_root, channel_claim(C1, DOM1, name="rc", namespace="nvidia"))) == ""


@pytest.mark.parametrize(
    ("ref", "field"),
    [
        (ClaimRef(C1, "default", ""), "name"),
        (ClaimRef(C1, "", "rc"), "namespace"),
        (ClaimRef("c1", "default", "rc"), "uid"),
        (ClaimRef("../../etc", "default", "rc"), "uid"),
        (ClaimRef(C1, "default", "x" * 1_000_000), "name"),
    ],
)
async def test_a_bad_claim_reference_is_refused_before_any_request(
    node: Node, ref: ClaimRef, field: str
) -> None:
    outcome = (await Driver(node.state, node.cluster, POLICY).prepare_resources([ref]))[ref.uid]
    assert f"claim reference: {field}:" in outcome.error
    assert len(outcome.error) <= ERROR_LIMIT
    assert node.cluster.claim_reads == 0


async def test_echoed_input_is_cut_to_about_200_characters(node: Node) -> None:
    huge = "k" * 1_000_000
    obj = channel_claim(C1, DOM1)
    obj["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"][huge] = 1
    node.cluster.add_claim(obj)
    outcome = (
        await Driver(node.state, node.cluster, POLICY).prepare_resources([ClaimRef(C1, "default", "rc")])
    )[C1]
    assert "strict decoding error: unknown field" in outcome.error
    assert "(1000000 characters)" in outcome.error and len(outcome.error) < 600


def test_a_malformed_request_body_is_refused_and_logged_once_per_window() -> None:
    now = [0.0]
    codec = RequestCodec(window_s=60.0, clock=lambda: now[0])
    good = bytes(v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="n", uid=C1, name="rc")]))
    assert codec.decode(good, v1.NodePrepareResourcesRequest).claims[0].uid == C1
    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            with pytest.raises(GRPCError) as err:
                codec.decode(b"\n\x04\x12\x02\xff\xfe" + b"\xff" * 100_000, v1.NodePrepareResourcesRequest)
            assert err.value.status is Status.INVALID_ARGUMENT
            assert len(err.value.message or "") < 400
        now[0] = 61.0
        with pytest.raises(GRPCError):
            codec.decode(b"\x0f", v1.NodePrepareResourcesRequest)  # a truncated claim entry
    assert [entry["event"] for entry in logs] == ["refused a malformed request"] * 2
    assert logs[1]["not_logged_since_last"] == 4
    assert all("exc_info" not in entry for entry in logs)
