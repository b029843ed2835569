"""The controller's leadership as events: a replica taking over the Lease is recorded in its own event log.

Each controller replica keeps its own log; a standby records what it observes as the leader does, and the
moment it becomes the leader is the event `LeadershipAcquired` in stream `lease/<namespace>/<name>` of its
log, so a reader of several replicas' logs (`cdctl collect`) can tell who led when, and what the new leader
found (the previous holder, the Lease's transitions, whether its view of the cluster was synced). Written by
cdctl.controller.manager when cdctl.controller.leader reports an acquisition. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdctl.domain.events import DomainEvent, event_type

# How the Lease came to this replica (LeadershipAcquired.how).
ACQUIRED_CREATED = "created"  # there was no Lease: this replica created it
ACQUIRED_RELEASED = "released"  # the holder had released it (a clean stop): taken at the next poll
ACQUIRED_EXPIRED = "expired"  # the holder stopped renewing (killed, hung, partitioned): taken on expiry
ACQUIRED_OWN = "own"  # the Lease already named this replica (a record this replica wrote before)
ACQUIRED_HOW = frozenset({ACQUIRED_CREATED, ACQUIRED_RELEASED, ACQUIRED_EXPIRED, ACQUIRED_OWN})


def lease_stream(namespace: str, name: str) -> str:
    """The stream of a Lease's leadership events in a controller's log."""
    return f"lease/{namespace}/{name}"


@event_type("LeadershipAcquired")
@dataclass(frozen=True, slots=True)
class LeadershipAcquired(DomainEvent):
    """This replica became the leader.

    `previous_holder` is the identity the Lease named before ("" when it was free or released);
    `lease_transitions` the Lease's count after this acquisition; `silent_s` how long, on this replica's
    clock, the previous holder's record had been unchanged when it was taken (about the lease duration after
    a crash; 0 for a free Lease). `view_synced` says whether every watch had listed once when the Lease was
    won: when false, the first reconcile waited for that, and the log says so.
    """

    identity: str
    lease_namespace: str
    lease_name: str
    how: str
    previous_holder: str
    lease_transitions: int
    acquire_time: str
    lease_duration_s: float
    silent_s: float
    view_synced: bool
