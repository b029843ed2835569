"""grpclib servers whose close also ends the connections they accepted (used by cdctl.plugin.server).

grpclib's `Server.close()` stops listening and cancels the requests running, but leaves each accepted
connection open until its client hangs up (Python 3.11's asyncio servers do not close their clients). A
client that keeps its connection (a kubelet does) holds a socket of a closed server open, and the transport
is reported unclosed when it is collected. `tracking(server)` records each connection's protocol;
`close_connections(server)`, called after `wait_closed()` so that requests finishing in the grace period
still send their end, closes what is left. grpclib 0.4.x builds each connection's protocol in
`Server._protocol_factory`; tests/plugin/test_server.py checks that a closed server leaves none open.
"""

from __future__ import annotations

import weakref

from grpclib.protocol import H2Protocol
from grpclib.server import Server

_TRACKED: weakref.WeakKeyDictionary[Server, weakref.WeakSet[H2Protocol]] = weakref.WeakKeyDictionary()


def tracking(server: Server) -> Server:
    """`server`, recording the protocol of every connection it accepts from now on."""
    protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()
    make = server._protocol_factory

    def factory() -> H2Protocol:
        protocol = make()
        protocols.add(protocol)
        return protocol

    server._protocol_factory = factory  # type: ignore[method-assign]
    _TRACKED[server] = protocols
    return server


def open_connections(server: Server) -> int:
    """How many accepted connections of a tracked `server` are still open."""
    return sum(1 for _ in _still_open(server))


def close_connections(server: Server) -> int:
    """Close the accepted connections of a tracked `server` that are still open; how many there were."""
    left = list(_still_open(server))
    for protocol in left:
        protocol.connection.close()
    return len(left)


def _still_open(server: Server) -> list[H2Protocol]:
    return [
        p
        for p in list(_TRACKED.get(server, ()))
        if getattr(p, "connection", None) is not None and not p.connection.is_closing()
    ]
