"""What the prepare path needs from the cluster, as a small interface: it runs without Kubernetes in tests.

Implemented over the API server by cdctl.k8s.plugincluster (the plugin process) and by an in-memory fake in
the tests. Errors: implementations raise cdctl.domain.errors.RetriableError for conditions that may clear (API
unreachable, another domain's label on the node) and PermanentError for the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from cdctl.api.refs import DomainInfo


class ClusterPort(Protocol):
    def cached_claim(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """A watched copy of the ResourceClaim if it has this UID, else None; makes no request. It may lag
        the API server: the caller decides whether it can stand in for `get_claim`."""

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim as JSON read fresh, or None when it does not exist."""

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Pod as JSON read fresh, or None when it does not exist (daemon-claim authorization reads the
        owner of a daemon claim, in the driver namespace only)."""

    async def get_compute_domain(self, uid: str) -> DomainInfo | None:
        """The ComputeDomain with this UID (any namespace), or None when it is unknown."""

    async def add_node_label(self, node: str, domain_uid: str) -> None:
        """Label the node with the domain's UID; another domain's UID already there is retriable."""

    async def remove_node_label(self, node: str, domain_uid: str) -> None:
        """Remove the label only if it still names this domain."""

    async def daemon_ready(self, domain: DomainInfo, node: str, clique_id: str) -> bool:
        """Whether this node's IMEX daemon of the domain reports Ready (clique object, else domain status)."""

    def readiness_watched(self, clique_id: str) -> bool:
        """Whether `daemon_ready`'s "not ready" is the answer of running watches: then `until_ready` sees the
        change that makes it Ready, and a retry before that would only read the same answer again."""

    async def until_ready(self, domain: DomainInfo, node: str, clique_id: str) -> None:
        """Return once a watched copy says what `daemon_ready` asks (no request; may never return: callers
        bound the wait). It cuts the retry pause of a "not ready" Prepare short."""

    async def clique_channel(self, domain: DomainInfo, clique_id: str) -> int | None:
        """Channel isolation: the domain's IMEX channel in the clique, from its ComputeDomainClique's
        `imexChannel` (None until the controller assigns one; a bad value is a RetriableError naming it)."""

    async def until_channel(self, domain: DomainInfo, clique_id: str) -> None:
        """Return once a watched copy of the clique object carries a channel (no request; may never
        return: callers bound the wait)."""

    async def shared_daemon_ready(self, node: str) -> bool:
        """Channel isolation, driver-managed: whether the shared IMEX daemon's pod on `node` is Ready."""

    def shared_daemon_watched(self) -> bool:
        """Whether `shared_daemon_ready`'s "not ready" is the answer of a running watch."""

    async def until_shared_daemon_ready(self, node: str) -> None:
        """Return once the watched shared daemon pod on `node` is Ready (no request; may never return)."""

    async def node_event(self, node: str, reason: str, message: str, warning: bool = True) -> None:
        """Record a Kubernetes Event on the Node (best effort)."""


class HandoverPort(Protocol):
    """The node's IMEX handover gates (cdctl.api.imexgate): files in the IMEX daemons' directories, a fake in
    the tests."""

    def hold(self, directory: Path, claim_uid: str) -> str | None:
        """Hold the IMEX of `directory` for the claim, then read its gate: None when open; else why it is
        closed, the hold already released."""

    async def until_open(self, directory: Path) -> None:
        """Return once the gate is open (the caller bounds the wait)."""

    def release(self, directory: Path, claim_uid: str) -> None:
        """Drop the claim's hold, if any."""


class HostImexPort(Protocol):
    """The host's IMEX under HostManagedIMEX: `nvidia-imex-ctl -q` (cdctl.plugin.hostimex); tests fake it."""

    async def not_ready(self) -> str | None:
        """None when the host's IMEX answers READY now; else what it answered."""

    async def until_ready(self) -> None:
        """Return once the host's IMEX answers READY (the caller bounds the wait)."""
