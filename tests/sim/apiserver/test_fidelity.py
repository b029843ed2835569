"""The simulated API server answers as a real kube-apiserver v1.36.2 answered our own components.

Every exchange of tests/fixtures/real-apiserver-v1.36 (280 requests of our controller, kubelet plugins and
IMEX daemons, and of the real ResourceClaim controller, on 3 nodes, both IMEX modes) is replayed in order
against the simulated server (tests/sim/apiserver/replay.py says how identities, the world outside the
recording and preconditions are bridged) and both answers are compared after normalisation: resourceVersions,
timestamps and generated names or uids, which necessarily differ between runs. Every remaining difference must
be one of TOLERATED, each with the reason it is left; a new one fails the test and names the exchange.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from cdctl.controller import render
from cdctl.controller.settings import ControllerSettings
from cdctl.sim.apiserver.server import KUBECONFIG_TOKEN, ApiServer
from cdctl.sim.rack import chart
from tests import realanswers
from tests.sim.apiserver.replay import Outcome, Replay

NAMESPACES = ("cdctl-system", "hollow-job")
SERVICE_ACCOUNTS = ("cdctl-controller", "cdctl-kubelet-plugin", "compute-domain-daemon-service-account")
# Skipped: the 6 exchanges answered 500 `context canceled`, requests the client abandoned (no answer seen).
ABANDONED = 6
# (exchange filter, difference pattern, why it is tolerated)
TOLERATED: tuple[tuple[str, str, str], ...] = (
    (
        r".*",
        r"^\.metadata\.managedFields|^\.items\[\d+\]\.metadata\.managedFields",
        "field ownership: server-side apply's bookkeeping. No cdctl component reads it or sends an apply "
        "patch, and an entry made up here would be wrong in its fields; the simulated server keeps none",
    ),
    (
        r"^patch events$",
        r"^\.count: ",
        "an Event's count is the number of times the recorder saw it, which follows timing (README: counts "
        "of retries are timing dependent)",
    ),
    (
        r"^get /apis/resource.k8s.io$",
        r"^\.versions: ",
        "the recorded server was started with resource.k8s.io/v1alpha3 enabled (--runtime-config), a version "
        "that serves only DeviceTaintRules, which no cdctl component uses; the simulated server serves v1, "
        "v1beta2 and v1beta1",
    ),
    (
        r"^patch pods/status$",
        r"^\.status\.nominatedNodeName: ",
        "written by the scheduler between two recorded exchanges (the recording holds no scheduler request)",
    ),
    (
        r"^patch pods$",
        r"^\.status\.",
        "written by the kubelet between two recorded exchanges; the daemon's patch sets only its pod's "
        "labels",
    ),
    (
        r"^delete daemonsets$",
        r"^\.status\.",
        "written by the DaemonSet controller between two recorded exchanges (the recording holds none of its "
        "requests)",
    ),
    (
        r"^create events$",
        r"^\.(source|reportingComponent|reportingInstance)",
        "written by the client's event recorder, which the replay sends as recorded",
    ),
)


@pytest.fixture
async def replay() -> AsyncIterator[Replay]:
    async with ApiServer() as server:
        store = server.store
        for crd in chart.crds():
            store.create(store.type_of("apiextensions.k8s.io", "customresourcedefinitions"), "", crd)
        for device_class in chart.device_classes():
            store.create(store.type_of("resource.k8s.io", "deviceclasses"), "", device_class)
        for namespace in NAMESPACES:
            store.create(store.type_of("", "namespaces"), "", {"metadata": {"name": namespace}})
        for account in SERVICE_ACCOUNTS:
            store.create(store.type_of("", "serviceaccounts"), NAMESPACES[0], {"metadata": {"name": account}})
        headers = {"Authorization": f"Bearer {KUBECONFIG_TOKEN}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            yield Replay(server, session)


def untolerated(outcome: Outcome) -> list[str]:
    what = f"{outcome.exchange['verb']} {outcome.exchange['resource']}"
    return [
        difference
        for difference in outcome.differences
        if not any(
            re.match(exchanges, what) and re.search(pattern, difference)
            for exchanges, pattern, _ in TOLERATED
        )
    ]


async def test_every_recorded_exchange_gets_the_real_servers_answer(replay: Replay) -> None:
    failures: list[str] = []
    replayed = 0
    for exchange in realanswers.exchanges():
        response = exchange["response"]
        if exchange["status"] == 500 and isinstance(response, dict) and "context canceled" in str(response):
            continue
        outcome = await replay.send(exchange)
        replayed += 1
        where = f"seq {exchange['seq']} {exchange['verb']} {exchange['path']}"
        if outcome.status != exchange["status"]:
            failures.append(f"{where}: status {outcome.status}, real {exchange['status']}: {outcome.answer}")
            continue
        failures += [f"{where}: {d}" for d in untolerated(outcome)]
    assert replayed == len(realanswers.exchanges()) - ABANDONED, "every exchange but the abandoned ones"
    assert not failures, "\n".join(failures[:60]) + f"\n({len(failures)} differences)"


def filled_in(sent: Any, answered: Any, path: str = "") -> list[tuple[str, Any]]:
    """(path, value) of every field the server added to what was sent (server-owned metadata aside)."""
    if isinstance(sent, dict) and isinstance(answered, dict):
        added = []
        for key, value in answered.items():
            where = f"{path}.{key}"
            if where in SERVER_OWNED:
                continue
            if key not in sent:
                added.append((where, value))
            else:
                added += filled_in(sent[key], value, where)
        return added
    if isinstance(sent, list) and isinstance(answered, list) and len(sent) == len(answered):
        return [
            f
            for i, (s, a) in enumerate(zip(sent, answered, strict=True))
            for f in filled_in(s, a, f"{path}[{i}]")
        ]
    return []


def value_at(obj: Any, path: str) -> Any:
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        key, index = part
        obj = obj[int(index)] if index else obj.get(key, "<absent>") if isinstance(obj, dict) else "<absent>"
    return obj


SERVER_OWNED = {
    f".metadata.{key}"
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "namespace")
}


def _recorded_domain(seq: int) -> dict[str, Any]:
    cd = realanswers.response_of(seq)
    cd["metadata"] = {k: cd["metadata"][k] for k in ("name", "namespace", "uid")}
    return cd


@pytest.mark.parametrize(
    ("seq", "render_what"),
    [
        (181, lambda cd: render.daemon_set(cd, "cdctl-system", ControllerSettings("p", "cdctl:hollow", 0))),
        (180, lambda cd: render.daemon_claim_template(cd, "cdctl-system", "v1")),
        (182, lambda cd: render.workload_claim_template(cd, "v1")),
    ],
    ids=["DaemonSet", "daemon ResourceClaimTemplate", "workload ResourceClaimTemplate"],
)
async def test_what_the_real_server_fills_into_our_objects_the_simulated_one_fills_in(
    replay: Replay, seq: int, render_what: Any
) -> None:
    """The recorded requests were decoded (defaulted) by the real server, so replaying them cannot show the
    defaults: here our own controller renders the object, the simulated server creates it, and every field
    the real server added to the same object must be there with the same value."""
    sent = render_what(_recorded_domain(177))  # the driver-managed ComputeDomain as the controller read it
    real = realanswers.response_of(seq)
    storage = replay.store.type_of(*{180: ("resource.k8s.io", "resourceclaimtemplates"),
                                     181: ("apps", "daemonsets"),
                                     182: ("resource.k8s.io", "resourceclaimtemplates")}[seq])  # fmt: skip
    answered = replay.store.create(storage, sent["metadata"]["namespace"], sent)
    expected = filled_in(sent, real)
    assert expected, "the real server filled in something"
    missing = [f"{path}: real {value!r}, simulated {value_at(answered, path)!r}"
               for path, value in expected if value_at(answered, path) != value]  # fmt: skip
    assert not missing, "\n".join(missing)
