"""Reading a domain's IMEX channel off its ComputeDomainClique object (channel isolation).

The controller's leader publishes the channel of a (ComputeDomain, clique) as the clique object's
`imexChannel` field (cdctl.api.isolation.CLIQUE_CHANNEL_FIELD) before any plugin may use it. Called by the
kubelet plugin's cluster adapter (cdctl.k8s.plugincluster) on watched and freshly read copies. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdctl.api.isolation import CLIQUE_CHANNEL_FIELD, MAX_CHANNEL_COUNT
from cdctl.domain.errors import RetriableError, clip, echo

BAD_CHANNEL_DELAY = 2.0


def clique_channel(clique: Mapping[str, Any] | None, name: str, channel_count: int) -> int | None:
    """The domain's channel on the ComputeDomainClique `name` (None: no object, or none assigned yet).

    A value that is not a channel this install hands out (1..channel_count-1) is refused with the object
    and field named, retriably: only the controller writes it, and its next write may mend it."""
    if clique is None:
        return None
    value = clique.get(CLIQUE_CHANNEL_FIELD)
    if value is None:
        return None
    limit = min(channel_count, MAX_CHANNEL_COUNT)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < limit:
        raise RetriableError(
            f"ComputeDomainClique {clip(name, 120)}: {CLIQUE_CHANNEL_FIELD}: must be an IMEX channel "
            f"1..{limit - 1}, got {echo(str(value))}",
            delay=BAD_CHANNEL_DELAY,
        )
    return value
