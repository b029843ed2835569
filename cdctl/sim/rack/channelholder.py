"""Another team's ComputeDomain that holds a clique's last free IMEX channel for a while, so that a domain of
the rack's scenario waits for one (`cdctl sim rack --fault channels-exhausted:NODE[:SECONDS]`, channel
isolation).

`hold_channel(rack, node)` creates the holder: a domain in its own namespace and a one-pod job pinned to
`node` (one GPU), and returns once the controller has published the holder's channel in the node's clique,
before the scenario's domains exist, so that the channel is surely the holder's. `release(rack, holder)`
deletes the job and the domain, as a team done with its job does, and returns once the controller has
released the channel and nothing of the holder is left (the scenario's leftover checks look at every clique
and node). Everything goes through the same API objects a user writes: the controller, the scheduler, the
kubelet and the plugin do the rest. Used by cdctl.sim.rack.formationfaults.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from cdctl.sim.apiserver.errors import AlreadyExists, NotFound
from cdctl.sim.apiserver.resources import ResourceType
from cdctl.sim.rack.checks import CD_GROUP, RESOURCE_GROUP, list_pods
from cdctl.sim.rack.isolation import published_channels
from cdctl.sim.rack.launch import Rack
from cdctl.sim.rack.workload import channel_template_name, compute_domain, worker_job

NAMESPACE = "channel-holder"
DOMAIN = "holder"
JOB = "holder-job"
HOSTNAME_LABEL = "kubernetes.io/hostname"
POLL_S = 0.05
WAIT_S = 60.0


@dataclass(frozen=True)
class Holder:
    uid: str
    node: str
    clique: str
    channel: int


async def hold_channel(rack: Rack, node: str) -> Holder:
    """The holder's domain and its pod on `node`, once its channel in the node's clique is published."""
    store = rack.store
    with contextlib.suppress(AlreadyExists):
        store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": NAMESPACE}})
    domain = store.create(
        store.type_of(CD_GROUP, "computedomains"), NAMESPACE, compute_domain(DOMAIN, NAMESPACE, 1)
    )
    uid = str(domain["metadata"]["uid"])
    template = channel_template_name(DOMAIN)
    templates = store.type_of(RESOURCE_GROUP, "resourceclaimtemplates")
    await _until(f"the holder's template {NAMESPACE}/{template}", lambda: _exists(rack, templates, template))
    job = worker_job(JOB, NAMESPACE, 1, template, gpus_per_pod=1, node_selector={HOSTNAME_LABEL: node})
    store.create(store.type_of("batch", "jobs"), NAMESPACE, job)
    clique = rack.topology.nodes[node].clique_id
    await _until(f"the holder's channel in clique {clique}", lambda: clique in published_channels(rack, uid))
    return Holder(uid, node, clique, published_channels(rack, uid)[clique])


async def release(rack: Rack, holder: Holder) -> None:
    """Delete the holder's job and domain; return once its channel is released and its objects are gone."""
    store = rack.store
    for group, plural, name in (("batch", "jobs", JOB), (CD_GROUP, "computedomains", DOMAIN)):
        with contextlib.suppress(NotFound):
            store.delete(store.type_of(group, plural), NAMESPACE, name)
    domains = store.type_of(CD_GROUP, "computedomains")

    def gone() -> bool:
        return not (published_channels(rack, holder.uid) or list_pods(rack, NAMESPACE)) and not _exists(
            rack, domains, DOMAIN
        )

    await _until("the holder's channel released and its objects gone", gone)


def _exists(rack: Rack, resource: ResourceType, name: str) -> bool:
    try:
        rack.store.get(resource, NAMESPACE, name)
    except NotFound:
        return False
    return True


async def _until(what: str, done: Callable[[], bool]) -> None:
    try:
        async with asyncio.timeout(WAIT_S):
            while not done():  # noqa: ASYNC110 - the store's state, polled
                await asyncio.sleep(POLL_S)
    except TimeoutError:
        raise TimeoutError(f"channels-exhausted fault: {what}: not within {WAIT_S:g} s") from None
