"""The plugin's watched copies against the simulated API server: which requests a Prepare makes, and how the
copies follow changes (deletes, recreation, stale writes, readiness)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cdctl.api.refs import COMPUTE_DOMAIN_LABEL, DomainInfo
from cdctl.domain import claims as c
from cdctl.domain.computedomains import LABEL_CLIQUE_ID
from cdctl.k8s import plugincluster
from cdctl.k8s.informer import Observation
from cdctl.k8s.plugincluster import KubeClusterPort
from cdctl.k8s.rest import KubeApi
from cdctl.plugin.checkpoint import ClaimBook
from cdctl.plugin.devices import ClaimRef
from cdctl.plugin.driver import Driver, RetryPolicy
from cdctl.plugin.prepare import DeviceState
from cdctl.plugin.preparesettings import FabricStatus
from cdctl.sim.apiserver.server import ApiServer
from cdctl.store import InMemoryEventStore
from tests.plugin.conftest import CLIQUE, node_settings
from tests.plugin.conftest import SIM_NODE as NODE
from tests.plugin.fakes import DOM1, DOM2, DRIVER, FakeGates, opaque
from tests.plugin.test_plugincluster import CDS, CLIQUES, make_domain, port

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
NODE_PATH = f"/api/v1/nodes/{NODE}"
INFORMERS = ("computedomain", "node", "clique", "resourceclaim")
Env = tuple[ApiServer, KubeApi, Path]


class Requests:
    """Records (method, path) of each request sent through `api` (watch streams excepted) while recording."""

    def __init__(self, api: KubeApi) -> None:
        self.on = False
        self.seen: list[tuple[str, str]] = []
        inner = api.request

        async def recorded(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
            if self.on:
                self.seen.append((method, path))
            return await inner(method, path, **kwargs)

        api.request = recorded  # type: ignore[method-assign]

    @contextlib.asynccontextmanager
    async def recording(self) -> AsyncIterator[None]:
        self.on = True
        try:
            yield
        finally:
            self.on = False

    def take(self) -> list[tuple[str, str]]:
        seen, self.seen = self.seen, []
        return seen


async def make_claim(api: KubeApi, name: str, domain_uid: str) -> str:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": "x"}}]}},
    }
    claim = await api.create(CLAIMS, body)
    claim["status"] = {
        "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": f"{name}-pod-uid"}],
        "allocation": {
            "devices": {
                "results": [{"request": "channel", "driver": DRIVER, "pool": NODE, "device": "channel-0"}],
                "config": [opaque("ComputeDomainChannelConfig", domain_uid, ["channel"])],
            }
        },
    }
    await api.replace(f"{CLAIMS}/{name}/status", claim)
    return str(claim["metadata"]["uid"])


async def put_clique(api: KubeApi, domain: DomainInfo, status: str, clique: str = CLIQUE) -> None:
    name = f"{domain.uid}.{clique}"
    daemons = [{"nodeName": NODE, "ipAddress": "10.0.0.1", "cliqueID": clique, "index": 0, "status": status}]
    existing = await api.get_or_none(f"{CLIQUES}/{name}")
    if existing is None:
        body = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainClique"}
        labels = {COMPUTE_DOMAIN_LABEL: domain.uid, LABEL_CLIQUE_ID: clique}  # as every clique carries
        await api.create(CLIQUES, {**body, "metadata": {"name": name, "labels": labels}, "daemons": daemons})
    else:
        await api.replace(f"{CLIQUES}/{name}", {**existing, "daemons": daemons})


def allocated(cluster: KubeClusterPort, uid: str) -> bool:
    """Whether the watch has delivered the claim's allocation (its creation alone is not enough)."""
    return "allocation" in ((cluster.cached_claim("default", "rc", uid) or {}).get("status") or {})


def seen_ready(cluster: KubeClusterPort, domain: DomainInfo) -> bool:
    """Whether the watches have delivered the domain and its clique saying this node's daemon is Ready."""
    return cluster.cached_domain(domain.uid) is not None and cluster.watched_ready(domain, NODE, CLIQUE)


def cached_label(cluster: KubeClusterPort) -> str | None:
    labels = ((cluster.cached_node(NODE) or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(COMPUTE_DOMAIN_LABEL)


async def live_label(api: KubeApi) -> str | None:
    return ((await api.get(NODE_PATH))["metadata"].get("labels") or {}).get(COMPUTE_DOMAIN_LABEL)


@pytest.fixture
async def watched(env: Env) -> AsyncIterator[tuple[KubeApi, KubeClusterPort, Requests]]:
    _, api, _ = env
    requests = Requests(api)
    cluster = port(api, watch_claims=True)
    cluster.start(NODE)
    await cluster.until(lambda: cluster.synced(*INFORMERS))
    try:
        yield api, cluster, requests
    finally:
        await cluster.close()


async def driver_for(cluster: KubeClusterPort, tmp: Path, policy: RetryPolicy | None = None) -> Driver:
    store = InMemoryEventStore()
    book = await ClaimBook.load(store, NODE)
    state = DeviceState(node_settings(tmp), book, cluster, FabricStatus(clique_id=CLIQUE), FakeGates())
    return Driver(state, cluster, policy)


async def test_prepare_with_readiness_met_only_writes_the_label(
    watched: tuple[KubeApi, KubeClusterPort, Requests], tmp_path: Path
) -> None:
    api, cluster, requests = watched
    domain = await make_domain(api)
    await put_clique(api, domain, "Ready")
    uid = await make_claim(api, "rc", domain.uid)
    await cluster.until(lambda: seen_ready(cluster, domain) and allocated(cluster, uid))
    driver = await driver_for(cluster, tmp_path)
    ref = ClaimRef(uid, "default", "rc")
    async with requests.recording():
        assert (await driver.prepare_resources([ref]))[uid].error == ""
    assert requests.take() == [("PATCH", NODE_PATH)]  # no ResourceClaim, ComputeDomain, clique or Node GET
    assert await live_label(api) == domain.uid
    async with requests.recording():
        assert (await driver.unprepare_resources([ref]))[uid] == ""
    assert requests.take() == [("PATCH", NODE_PATH)]
    assert await live_label(api) is None


async def test_by_default_prepare_reads_the_claim_and_only_the_claim(env: Env, tmp_path: Path) -> None:
    _, api, _ = env
    requests = Requests(api)
    cluster = port(api)  # the plugin's default: no ResourceClaim watch
    cluster.start(NODE)
    try:
        domain = await make_domain(api)
        await put_clique(api, domain, "Ready")
        uid = await make_claim(api, "rc", domain.uid)
        await cluster.until(lambda: cluster.synced(*INFORMERS[:-1]) and seen_ready(cluster, domain))
        driver = await driver_for(cluster, tmp_path)
        async with requests.recording():
            assert (await driver.prepare_resources([ClaimRef(uid, "default", "rc")]))[uid].error == ""
        assert requests.take() == [("GET", f"{CLAIMS}/rc"), ("PATCH", NODE_PATH)]
    finally:
        await cluster.close()


async def test_a_label_already_on_the_watched_node_is_not_written_again(
    watched: tuple[KubeApi, KubeClusterPort, Requests],
) -> None:
    api, cluster, requests = watched
    await api.merge_patch(NODE_PATH, {"metadata": {"labels": {COMPUTE_DOMAIN_LABEL: DOM1}}})
    await cluster.until(lambda: cached_label(cluster) == DOM1)
    async with requests.recording():
        await cluster.add_node_label(NODE, DOM1)
        await cluster.remove_node_label(NODE, DOM2)  # not this domain's label: nothing to do
    assert requests.take() == []
    async with requests.recording():
        await cluster.remove_node_label(NODE, DOM1)
        await cluster.remove_node_label(NODE, DOM1)  # the copy written is remembered: no second request
    assert requests.take() == [("PATCH", NODE_PATH)]
    assert await live_label(api) is None


async def test_a_stale_node_copy_is_re_read_on_conflict(
    watched: tuple[KubeApi, KubeClusterPort, Requests],
) -> None:
    api, cluster, requests = watched
    await cluster.add_node_label(NODE, DOM1)
    await cluster.close()  # the copy stops following: everything below makes it stale
    await api.merge_patch(NODE_PATH, {"metadata": {"labels": {"other": "x"}}})
    await api.merge_patch(NODE_PATH, {"metadata": {"labels": {COMPUTE_DOMAIN_LABEL: None}}})
    async with requests.recording():
        await cluster.add_node_label(NODE, DOM2)  # the copy says DOM1: a conflict is confirmed fresh
    assert requests.take() == [("GET", NODE_PATH), ("PATCH", NODE_PATH)]
    assert await live_label(api) == DOM2
    await api.merge_patch(NODE_PATH, {"metadata": {"labels": {"other": "y"}}})
    async with requests.recording():
        await cluster.remove_node_label(NODE, DOM2)  # written with a stale resourceVersion: 409, re-read
    assert requests.take() == [("PATCH", NODE_PATH), ("GET", NODE_PATH), ("PATCH", NODE_PATH)]
    assert await live_label(api) is None


async def test_the_watched_copies_follow_deletes_and_recreation(
    watched: tuple[KubeApi, KubeClusterPort, Requests],
) -> None:
    api, cluster, _ = watched
    domain = await make_domain(api)
    first = await make_claim(api, "rc", domain.uid)
    await cluster.until(lambda: cluster.cached_claim("default", "rc", first) is not None)
    assert cluster.cached_domain(domain.uid) == domain
    await api.delete(f"{CLAIMS}/rc")
    await cluster.until(lambda: cluster.cached_claim("default", "rc", first) is None)
    second = await make_claim(api, "rc", domain.uid)  # same name, new UID
    await cluster.until(lambda: cluster.cached_claim("default", "rc", second) is not None)
    assert cluster.cached_claim("default", "rc", first) is None
    await api.delete(f"{CDS}/{domain.name}")
    await cluster.until(lambda: cluster.cached_domain(domain.uid) is None)


async def test_a_not_ready_daemon_is_retried_as_soon_as_the_watch_says_ready(
    watched: tuple[KubeApi, KubeClusterPort, Requests], tmp_path: Path
) -> None:
    api, cluster, requests = watched
    domain = await make_domain(api)
    await put_clique(api, domain, "NotReady")
    uid = await make_claim(api, "rc", domain.uid)
    await cluster.until(lambda: allocated(cluster, uid))
    # a pause of ten minutes between attempts: only the watch event can end it within the guard below
    driver = await driver_for(cluster, tmp_path, RetryPolicy(base_s=600.0, cap_s=600.0, budget_s=1200.0))
    book = driver.state.book
    preparing = asyncio.create_task(driver.prepare_resources([ClaimRef(uid, "default", "rc")]))
    while (rec := book.get(uid)) is None or rec.state is not c.ClaimState.PREPARE_FAILED:  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # until the first attempt found the daemon not ready
    assert "not ready" in rec.last_error
    async with requests.recording():
        await put_clique(api, domain, "Ready")
        async with asyncio.timeout(60):  # a hang guard, not a latency assertion
            assert (await preparing)[uid].error == ""
    clique = f"{CLIQUES}/{domain.uid}.{CLIQUE}"
    # put_clique's own read and write, then the retry: the claim read fresh, readiness from the watch
    assert requests.take() == [("GET", clique), ("PUT", clique), ("GET", f"{CLAIMS}/rc")]


async def test_a_failed_informer_drops_its_copies_and_lists_again(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, api, _ = env
    monkeypatch.setattr(plugincluster, "INFORMER_RESTART_S", 0.01)
    domain = await make_domain(api)
    uid = await make_claim(api, "rc", domain.uid)
    cluster = port(api, watch_claims=True)
    seen, failures = cluster._claim_seen, []

    def fails_once(item: Observation) -> None:
        if item.name == "poison" and not failures:
            failures.append(item)
            raise RuntimeError("a bug in the handler")
        seen(item)

    cluster._claim_seen = fails_once  # type: ignore[method-assign]
    cluster.start(NODE)
    try:
        await cluster.until(lambda: allocated(cluster, uid))
        await make_claim(api, "poison", domain.uid)
        await cluster.until(lambda: bool(failures) and not cluster.synced("resourceclaim"))
        assert cluster.cached_claim("default", "rc", uid) is None  # nothing stale is served
        await cluster.until(lambda: cluster.synced("resourceclaim") and allocated(cluster, uid))
    finally:
        await cluster.close()


async def test_with_its_clique_known_a_node_follows_only_its_own_cliques(env: Env) -> None:
    _, api, _ = env
    cluster = port(api)
    cluster.start(NODE, CLIQUE)
    try:
        await cluster.until(lambda: cluster.synced("computedomain", "node", "clique"))
        domain = await make_domain(api)
        await put_clique(api, domain, "Ready", clique="another-rack.3")  # another rack's clique of the domain
        await put_clique(api, domain, "Ready")
        await cluster.until(lambda: cluster.watched_ready(domain, NODE, CLIQUE))
        assert not cluster.watched_ready(domain, NODE, "another-rack.3")  # never delivered to this node
    finally:
        await cluster.close()


async def test_not_ready_is_the_watches_answer_while_they_run_and_a_fresh_read_without_them(
    watched: tuple[KubeApi, KubeClusterPort, Requests],
) -> None:
    api, cluster, requests = watched
    domain = await make_domain(api)
    await put_clique(api, domain, "NotReady")
    requests.take()
    async with requests.recording():
        assert not await cluster.daemon_ready(domain, NODE, CLIQUE)
    assert requests.take() == []  # no clique or domain read on each retry of each waiting node
    assert cluster.readiness_watched(CLIQUE)  # so the retry waits for the watch
    unwatched = port(api)  # never started: nothing followed, so "not ready" must be read fresh
    assert not unwatched.readiness_watched(CLIQUE)
    async with requests.recording():
        assert not await unwatched.daemon_ready(domain, NODE, CLIQUE)
    assert requests.take() == [("GET", f"{CLIQUES}/{domain.uid}.{CLIQUE}")]
