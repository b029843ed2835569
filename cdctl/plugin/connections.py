"""grpclib servers whose close also ends the connections they accepted (used by cdctl.plugin.server).

grpclib's `Server.close()` stops listening and cancels the requests running, but leaves each accepted
connection open until its client hangs up (Python 3.11's asyncio servers do not close their clients). A
client that keeps its connection (a kubelet does) holds a socket of a closed server open, and the transport
is reported unclosed when it is collected. `tracking(server)` records each connection's protocol;
`close_connections(server)`, called after `wait_closed()` so that requests finishing in the grace period
still send their end, closes what is left. grpclib 0.4.x builds each connection's protocol in
`Server._protocol_factory`; tests/plugin/test_server.py checks that a closed server leaves none open.

Each connection also remembers fewer closed streams. h2 keeps, per connection, how each of the last 65,536
closed streams ended (`H2Connection._closed_streams`, about 6 MiB when full): a plugin answering a
kubelet on one connection grew by that much over its first 65,536 calls, and bench/socket_fuzz.py saw
~2 MiB more per 10,000 calls. A frame for a stream closed longer ago is still refused as on a closed
stream (h2 judges by the highest stream id seen); only how it ended is forgotten.
"""

from __future__ import annotations

import weakref
from typing import Any

from grpclib.protocol import H2Protocol
from grpclib.server import Server
from h2.utilities import SizeLimitDict

CLOSED_STREAMS_KEPT = 256
_TRACKED: weakref.WeakKeyDictionary[Server, weakref.WeakSet[H2Protocol]] = weakref.WeakKeyDictionary()


def tracking(server: Server) -> Server:
    """`server`, recording the protocol of every connection it accepts from now on."""
    protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()
    make = server._protocol_factory

    def factory() -> H2Protocol:
        protocol = make()
        protocols.add(protocol)
        made = protocol.connection_made

        def connection_made(transport: Any) -> None:
            made(transport)
            h2 = protocol.connection._connection
            h2._closed_streams = SizeLimitDict(size_limit=CLOSED_STREAMS_KEPT)

        protocol.connection_made = connection_made  # type: ignore[method-assign]
        return protocol

    server._protocol_factory = factory  # type: ignore[method-assign]
    _TRACKED[server] = protocols
    return server


def open_connections(server: Server) -> int:
    """How many accepted connections of a tracked `server` are still open."""
    return len(_still_open(server))


def close_connections(server: Server) -> int:
    """Close the accepted connections of a tracked `server` that are still open; how many there were."""
    left = _still_open(server)
    for protocol in left:
        protocol.connection.close()
    return len(left)


def _still_open(server: Server) -> list[H2Protocol]:
    return [
        p
        for p in list(_TRACKED.get(server, ()))
        if getattr(p, "connection", None) is not None and not p.connection.is_closing()
    ]
