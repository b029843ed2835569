"""Daemon claims are prepared only for the controller's daemon pods, and no path from input leaves the
plugin's directory: what a tenant (or a compromised daemon) could try, each refused, nothing on disk."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdctl.api.refs import DomainInfo
from cdctl.domain.errors import InvalidInput, PermanentError
from cdctl.plugin import cdi
from cdctl.plugin.daemonclaims import DaemonClaimRefused
from cdctl.plugin.devices import parse_claim
from tests.plugin.conftest import Node
from tests.plugin.fakes import DOM1, DOM2, channel_claim, daemon_claim, daemon_pod

D1 = "a0000000-0000-4000-8000-0000000000d1"


def files_under(root: Path) -> set[str]:
    return {str(Path(d) / f) for d, _, fs in os.walk(root) for f in fs} | {
        str(Path(d) / x) for d, xs, _ in os.walk(root) for x in xs
    }


def exists(path: str) -> bool:
    return Path(path).exists()


def assert_nothing_written(node: Node, uid: str = D1) -> None:
    assert not (node.settings.plugin_dir / "domains").exists()
    assert not cdi.claim_spec_path(node.settings.cdi_root, uid).exists()


async def test_a_tenant_claim_naming_another_namespaces_domain_is_refused(node: Node) -> None:
    node.cluster.domains[DOM1] = DomainInfo(DOM1, "cd", "team-a")
    claim = daemon_claim(D1, DOM1, namespace="team-b")  # team-b's own pod and template, team-a's uid
    node.cluster.add_pod(daemon_pod(DOM1, namespace="team-b"))
    with pytest.raises(DaemonClaimRefused, match="must be in the driver namespace 'nvidia', not 'team-b'"):
        await node.state.prepare(parse_claim(claim), 0)
    assert_nothing_written(node)
    rec = node.state.book.get(D1)
    assert rec is not None and not rec.last_error_retriable and "driver namespace" in rec.last_error
    assert node.cluster.pod_reads == 0  # refused before any read


async def test_a_daemon_claim_in_an_additional_namespace_is_prepared_and_a_tenants_still_refused(
    node: Node,
) -> None:
    """The controller reuses an earlier install's DaemonSet in an ADDITIONAL_NAMESPACES entry: its daemon
    pods' claims are prepared (the owner pod is read in that namespace); a tenant's namespace stays
    refused."""
    node.settings = replace(node.settings, additional_namespaces=("old-install",))
    state = await node.restart()
    tenant = "a0000000-0000-4000-8000-0000000000d2"
    node.cluster.add_pod(daemon_pod(DOM1, namespace="team-b"))
    with pytest.raises(DaemonClaimRefused, match=r"one of the driver's namespaces \(nvidia, old-install\)"):
        await state.prepare(parse_claim(daemon_claim(tenant, DOM1, namespace="team-b")), 0)
    assert not cdi.claim_spec_path(node.settings.cdi_root, tenant).exists()

    node.cluster.add_pod(daemon_pod(DOM1, namespace="old-install"))
    prepared = await state.prepare(parse_claim(daemon_claim(D1, DOM1, namespace="old-install")), 0)
    assert prepared and cdi.claim_spec_path(node.settings.cdi_root, D1).exists()


def _no_owner(c: dict[str, Any], pod: dict[str, Any]) -> None:
    del c["metadata"]["ownerReferences"]


def _owner_not_controller(c: dict[str, Any], pod: dict[str, Any]) -> None:
    c["metadata"]["ownerReferences"][0]["controller"] = False


def _owned_by_a_job(c: dict[str, Any], pod: dict[str, Any]) -> None:
    c["metadata"]["ownerReferences"][0]["kind"] = "Job"


def _not_reserved(c: dict[str, Any], pod: dict[str, Any]) -> None:
    c["status"]["reservedFor"] = [{"resource": "pods", "name": "someone-else", "uid": "x"}]


def _pod_replaced(c: dict[str, Any], pod: dict[str, Any]) -> None:
    pod["metadata"]["uid"] = "e0000000-0000-4000-8000-0000000000ff"


def _another_domains_daemon_set(c: dict[str, Any], pod: dict[str, Any]) -> None:
    pod["metadata"]["ownerReferences"][0]["name"] = f"computedomain-daemon-{DOM2}"


def _a_hand_made_pod(c: dict[str, Any], pod: dict[str, Any]) -> None:
    del pod["metadata"]["ownerReferences"]


def _pod_without_the_domain_label(c: dict[str, Any], pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"] = {}


def _pod_on_another_node(c: dict[str, Any], pod: dict[str, Any]) -> None:
    pod["spec"]["nodeName"] = "node-b"


def _pod_gone(c: dict[str, Any], pod: dict[str, Any]) -> None:
    pod["metadata"]["name"] = "renamed"


CASES: dict[str, tuple[Callable[[dict[str, Any], dict[str, Any]], None], str]] = {
    "no owner": (_no_owner, "controlling owner must be one Pod"),
    "owner is not the controller": (_owner_not_controller, "controlling owner must be one Pod"),
    "owned by a Job": (_owned_by_a_job, "controlling owner must be one Pod"),
    "not reserved for its owner": (_not_reserved, "status.reservedFor does not name its owner pod"),
    "owner pod replaced": (_pod_replaced, "was replaced"),
    "another domain's DaemonSet": (_another_domains_daemon_set, "not controlled by the domain's DaemonSet"),
    "pod not from a DaemonSet": (_a_hand_made_pod, "not controlled by the domain's DaemonSet"),
    "pod without the domain label": (_pod_without_the_domain_label, "does not carry"),
    "pod on another node": (_pod_on_another_node, "runs on node 'node-b', not on this node node-a"),
    "owner pod does not exist": (_pod_gone, "does not exist"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_daemon_claim_not_owned_by_a_daemon_pod_of_that_daemon_set_is_refused(
    node: Node, case: str
) -> None:
    mutate, message = CASES[case]
    claim = daemon_claim(D1, DOM1)
    pod = daemon_pod(DOM1)
    mutate(claim, pod)
    node.cluster.pods.clear()
    node.cluster.add_pod(pod)
    with pytest.raises(DaemonClaimRefused, match=message) as err:
        await node.state.prepare(parse_claim(claim), 0)
    assert "daemon claims are prepared only for the controller's IMEX daemon pods" in str(err.value)
    assert_nothing_written(node)


async def test_a_daemon_claim_for_a_domain_that_does_not_exist_is_refused_permanently(node: Node) -> None:
    with pytest.raises(PermanentError, match=f"compute domain not found: {DOM2}"):
        await node.state.prepare(parse_claim(daemon_claim(D1, DOM2)), 0)
    assert_nothing_written(node)


async def test_the_daemon_pod_of_the_domain_gets_its_claim_prepared(node: Node) -> None:
    devices = await node.state.prepare(parse_claim(daemon_claim(D1, DOM1)), 0)
    assert devices[0]["device_name"] == "daemon-0"
    assert (node.settings.plugin_dir / "domains" / DOM1 / "imexd.cfg.tmpl").is_file()
    assert node.cluster.pod_reads == 1


@pytest.mark.parametrize("domain_id", ["../../../x", "/abs/dir", "not-a-uuid", "..", f"{DOM1}/../../x"])
@pytest.mark.parametrize("kind", ["daemon", "channel"])
async def test_traversal_and_absolute_domain_ids_create_nothing(
    node: Node, tmp_path: Path, domain_id: str, kind: str
) -> None:
    before = files_under(tmp_path)
    make = daemon_claim if kind == "daemon" else channel_claim
    with pytest.raises(InvalidInput, match="domainID must be a ComputeDomain uid") as err:
        await node.state.prepare(parse_claim(make(D1, domain_id)), 0)
    assert err.value.field == "domainID"
    assert files_under(tmp_path) == before  # `../../../x` from the domains directory would land in here
    assert not exists("/abs/dir")
    assert node.cluster.labels == {}


async def test_an_unpublished_device_name_is_refused(node: Node) -> None:
    node.cluster.ready.add((DOM1, "node-a"))
    with pytest.raises(PermanentError, match="requested device is not allocatable: channel-1"):
        await node.state.prepare(parse_claim(channel_claim(D1, DOM1, device="channel-1")), 0)
    assert node.cluster.labels == {} and not cdi.claim_spec_path(node.settings.cdi_root, D1).exists()
