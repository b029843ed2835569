"""Fake `nvidia-imex` and `nvidia-imex-ctl` for the simulated rack (no GPU, no IMEX driver needed).

`python -m cdctl.sim.node.fakeimex imex -c CFG` behaves like the daemon: it reads the IMEX config (KEY=VALUE
lines: IMEX_NODE_CONFIG_FILE, IMEX_CMD_BIND_INTERFACE_IP / BIND_INTERFACE_IP, SERVER_PORT, IMEX_CMD_PORT) and
the node list, registers itself, re-reads the node list on SIGUSR1 and leaves on SIGTERM/SIGINT (exit 0).
Like the real one, it fixes its node id when it starts: the index of the first node-list entry that is its
own address (a name resolved through the hosts file), -1 when none is; SIGUSR1 re-reads the list but keeps
the id. Every start is appended to the registry's start log (`Registry.starts`, `start_counts`), so a test
can tell which daemons' IMEX restarted.
`python -m cdctl.sim.node.fakeimex ctl -c CFG -q` answers `READY` once the local daemon runs, knows its node
id, and every entry of its node list that resolves (an IP, or a name in the hosts file) is served by a daemon
that is up under that entry's node id and whose own node list has this daemon's entry at this daemon's node
id (a real IMEX refuses a peer its node list lacks: in IP mode a daemon started before a peer joined); else
`NOT_READY`. `-N` lists the entries: UP, DOWN (nobody there),
UNRESOLVED, UNUSED (the unused-slot address cdctl.domain.imex.DEFAULT_UNUSED_ADDRESS: no daemon there, none
expected; it does not hold readiness back) or MISMATCH: the daemon there runs under another node id, or the
entry is the local daemon's own id but no longer its address. That is what an IMEX that was only signalled
after its own slot moved looks like (the Go driver's issue 1418): it still answers as its old node.
Peers find each other through files in one registry directory on this machine (`CDCTL_FAKE_IMEX_DIR`); names
resolve through `CDCTL_FAKE_IMEX_HOSTS` (default /etc/hosts). `install_executables(bin_dir)` writes the two
commands under their real names, for a PATH the cdctl daemon finds them on: `nvidia-imex` runs this file as
a bare script (`python -S -I`, standard library only), and `nvidia-imex-ctl`, which every daemon probe
starts, is the shell twin of `ctl` in cdctl.sim.node.fakeimexctl. Used by the rack and the tests.
"""

# os.path rather than pathlib: see TYPE_CHECKING below.
# ruff: noqa: PTH103, PTH105, PTH108, PTH118
from __future__ import annotations

import os
import signal
import sys

# Imported for the type checker only: pathlib and typing are a third of the bare script's start-up (21 ms of
# CPU with them, 13 without), paid by every daemon's IMEX on a 144-node rack.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    PathLike = str | os.PathLike[str]

# cdctl.domain.imex.DEFAULT_UNUSED_ADDRESS, repeated: the fake runs as a bare script (python -S -I) that
# imports nothing of cdctl, so that each nvidia-imex-ctl call (every probe) starts in a few milliseconds.
UNUSED_SLOT_ADDRESS = "192.0.2.1"

REGISTRY_ENV = "CDCTL_FAKE_IMEX_DIR"
HOSTS_ENV = "CDCTL_FAKE_IMEX_HOSTS"
DEFAULT_REGISTRY = "/tmp/cdctl-fake-imex"
DEFAULT_HOSTS = "/etc/hosts"
EXECUTABLES = {"nvidia-imex": "imex", "nvidia-imex-ctl": "ctl"}


class ImexConfigError(Exception):
    """The IMEX config or node list is missing or malformed."""


class ImexConfig:
    """One IMEX config file's KEY=VALUE settings (a plain class: dataclasses cost the fake's start-up)."""

    def __init__(self, path: str, values: dict[str, str]) -> None:
        self.path = path
        self.values = values

    @property
    def node_file(self) -> str:
        node_file = self.values.get("IMEX_NODE_CONFIG_FILE", "")
        if not node_file:
            raise ImexConfigError(f"{self.path}: IMEX_NODE_CONFIG_FILE is not set")
        return node_file

    @property
    def address(self) -> str:
        """Who this daemon is to its peers: the command bind IP, else the bind IP, else loopback."""
        return (
            self.values.get("IMEX_CMD_BIND_INTERFACE_IP")
            or self.values.get("BIND_INTERFACE_IP")
            or "127.0.0.1"
        )

    @property
    def server_port(self) -> int:
        return int(self.values.get("SERVER_PORT") or 50000)


def _read_text(path: PathLike) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def read_config(path: PathLike) -> ImexConfig:
    path = os.fspath(path)
    try:
        text = _read_text(path)
    except OSError as error:
        raise ImexConfigError(f"cannot read IMEX config {path}: {error.strerror}") from error
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        if not equals:
            raise ImexConfigError(f"{path}: not a KEY=VALUE line: {line!r}")
        values[key.strip()] = value.strip()
    return ImexConfig(path, values)


def read_nodes(path: PathLike) -> list[str]:
    try:
        lines = _read_text(path).splitlines()
    except OSError as error:
        raise ImexConfigError(f"cannot read IMEX node list {path}: {error.strerror}") from error
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def read_hosts(path: PathLike) -> dict[str, str]:
    """Host name -> address from an /etc/hosts style file (missing file: nothing resolves)."""
    names: dict[str, str] = {}
    try:
        lines = _read_text(path).splitlines()
    except OSError:
        return names
    for line in lines:
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            names.setdefault(name, fields[0])
    return names


def write_lines(target: str, lines: list[str]) -> None:
    """Replace `target` with these lines at once (a hidden temporary file beside it, then a rename), making
    its directory if need be: readers see the old file or the new one, never half of one."""
    directory, name = os.path.split(target)
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        file.write("".join(f"{line}\n" for line in lines))
    os.replace(temporary, target)


def remove_file(path: str) -> None:
    """Remove `path`; one already gone is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _is_address(text: str) -> bool:
    parts = text.split(".")
    return (len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)) or ":" in text


START_LOG = "starts.log"
BY_NODE = "by-node"  # node name -> its local daemon (Registry.claim_node)
NODE_NAME_ENV = "NODE_NAME"  # the daemon pod's node (downward API); the fake's child inherits it


class Registry:
    """One file per running fake daemon, named after its address: its pid, its address, its node id, then
    its node list, one line each (the shell `nvidia-imex-ctl` of cdctl.sim.node.fakeimexctl reads the same).
    Liveness is the pid. `starts.log` beside them has a line per start: address, node, pid, node id."""

    def __init__(self, directory: PathLike) -> None:
        self.directory = os.fspath(directory)

    @classmethod
    def from_env(cls) -> Registry:
        return cls(os.environ.get(REGISTRY_ENV, DEFAULT_REGISTRY))

    def _file(self, address: str) -> str:
        return os.path.join(self.directory, address.replace("/", "_"))

    def register(self, address: str, node_id: int, nodes: list[str]) -> None:
        write_lines(self._file(address), [str(os.getpid()), address, str(node_id), *nodes])

    def record_start(self, address: str, node_id: int) -> None:
        """Append this start to the start log (one short write in append mode: whole lines only)."""
        os.makedirs(self.directory, exist_ok=True)
        line = f"{address}\t{os.environ.get(NODE_NAME_ENV, '')}\t{os.getpid()}\t{node_id}\n"
        descriptor = os.open(os.path.join(self.directory, START_LOG), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(descriptor, line.encode())
        finally:
            os.close(descriptor)

    def starts(self) -> list[dict[str, Any]]:
        """Every start so far, oldest first: address, node (empty when unknown), pid, node_id."""
        try:
            lines = _read_text(os.path.join(self.directory, START_LOG)).splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            address, node, pid, node_id = line.split("\t")
            out.append({"address": address, "node": node, "pid": int(pid), "node_id": int(node_id)})
        return out

    def start_counts(self, by: str = "node") -> dict[str, int]:
        """How many times an IMEX started, per node name (`by="node"`) or per address (`by="address"`)."""
        counts: dict[str, int] = {}
        for start in self.starts():
            counts[start[by]] = counts.get(start[by], 0) + 1
        return counts

    def _read(self, address: str) -> dict[str, Any] | None:
        try:
            pid, recorded, node_id, *nodes = _read_text(self._file(address)).splitlines()
            return {
                "pid": int(pid),
                "address": recorded,
                "node_id": int(node_id),
                "nodes": [n for n in nodes if n],
            }
        except (OSError, ValueError):
            return None

    def unregister(self, address: str) -> None:
        entry = self._read(address)
        if entry is not None and entry["pid"] == os.getpid():
            remove_file(self._file(address))

    # ---- which daemon is a node's own (what the node's kernel driver talks to) -----------------------------
    def _node_file(self, node: str) -> str:
        return os.path.join(self.directory, BY_NODE, node.replace("/", "_"))

    def claim_node(self, node: str, address: str, hosts_path: str) -> None:
        """Record this process as `node`'s local IMEX daemon: pid, address, the hosts file its names resolve
        through. A node runs one IMEX daemon at a time; the latest to start is the node's."""
        write_lines(self._node_file(node), [str(os.getpid()), address, hosts_path])

    def release_node(self, node: str) -> None:
        local = self._read_node(node)
        if local is not None and local["pid"] == os.getpid():
            remove_file(self._node_file(node))

    def _read_node(self, node: str) -> dict[str, Any] | None:
        try:
            pid, address, hosts_path = _read_text(self._node_file(node)).splitlines()[:3]
            return {"pid": int(pid), "address": address, "hosts": hosts_path}
        except (OSError, ValueError):
            return None

    def node_daemon(self, node: str) -> dict[str, Any] | None:
        """The live IMEX daemon of `node`: its pid, address and hosts file; None when none runs there."""
        local = self._read_node(node)
        if local is None or self.entry(local["address"]) is None or not alive(local["pid"]):
            return None
        return local

    def entry(self, address: str) -> dict[str, Any] | None:
        """The registration of a live daemon at `address`, if any."""
        entry = self._read(address)
        return entry if entry is not None and alive(entry["pid"]) else None


def alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user, which this one may not signal, does)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def resolve(node: str, hosts: dict[str, str]) -> str | None:
    return node if _is_address(node) else hosts.get(node)


def own_node_id(address: str, nodes: list[str], hosts: dict[str, str]) -> int:
    """The node id an IMEX at `address` takes at start: the index of the first entry that is it, else -1."""
    for index, node in enumerate(nodes):
        if resolve(node, hosts) == address:
            return index
    return -1


def peer_states(config: ImexConfig, registry: Registry, hosts: dict[str, str]) -> dict[str, str] | None:
    """Node-list entry -> UP / DOWN / UNRESOLVED / UNUSED / MISMATCH (see the module docstring) for the local
    daemon's node list; None when it is not running."""
    local = registry.entry(config.address)
    if local is None:
        return None
    own_id = local["node_id"]
    own_nodes = [str(n) for n in local.get("nodes") or []]
    own_entry = own_nodes[own_id] if 0 <= own_id < len(own_nodes) else None
    states = {}
    for index, node in enumerate(own_nodes):
        address = resolve(node, hosts)
        if index == own_id and address != config.address:
            states[node] = "MISMATCH"  # this IMEX is still that node, whose name now points elsewhere
        elif address is None:
            states[node] = "UNRESOLVED"
        elif address == UNUSED_SLOT_ADDRESS:
            states[node] = "UNUSED"  # a slot without a daemon: no IMEX will ever answer, none is expected
        else:
            there = local if address == config.address else registry.entry(address)
            if there is None:
                states[node] = "DOWN"
            else:
                # A peer accepts this daemon only if its own node list has this daemon's entry at this
                # daemon's node id: a peer started before this one joined (IP mode) does not. (Without a node
                # id this daemon is not ready anyway, and the peer's own state is what is shown.)
                theirs = [str(n) for n in there.get("nodes") or []]
                listed = own_entry is None or (own_id < len(theirs) and theirs[own_id] == own_entry)
                states[node] = "UP" if there["node_id"] == index and listed else "MISMATCH"
    return states


def is_ready(config: ImexConfig, registry: Registry, states: dict[str, str]) -> bool:
    local = registry.entry(config.address)
    known = local is not None and local["node_id"] >= 0
    return known and all(state not in ("DOWN", "MISMATCH") for state in states.values())


def run_imex(config_path: str) -> int:
    config = read_config(config_path)
    registry = Registry.from_env()
    handled = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}
    signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    nodes = read_nodes(config.node_file)
    hosts = read_hosts(os.environ.get(HOSTS_ENV, DEFAULT_HOSTS))
    node_id = own_node_id(config.address, nodes, hosts)  # fixed for the life of this process
    registry.record_start(config.address, node_id)
    registry.register(config.address, node_id, nodes)
    node = os.environ.get(NODE_NAME_ENV, "")
    if node:
        registry.claim_node(node, config.address, os.environ.get(HOSTS_ENV, DEFAULT_HOSTS))
    print(
        f"IMEX daemon (fake) serving {config.address}:{config.server_port} as node {node_id}",
        file=sys.stderr,
        flush=True,
    )
    try:
        while signal.sigwait(handled) == signal.SIGUSR1:
            registry.register(config.address, node_id, read_nodes(config.node_file))
            print("IMEX daemon (fake): node list re-read", file=sys.stderr, flush=True)
    finally:
        registry.unregister(config.address)
        if node:
            registry.release_node(node)
    return 0


def run_ctl(config_path: str, query: bool, list_nodes: bool) -> int:
    config = read_config(config_path)
    hosts = read_hosts(os.environ.get(HOSTS_ENV, DEFAULT_HOSTS))
    registry = Registry.from_env()
    states = peer_states(config, registry, hosts)
    if states is None:
        print(f"UNAVAILABLE: no IMEX daemon at {config.address}")
        return 1
    if list_nodes:
        for node, state in states.items():
            print(f"{node}\t{state}")
    if query:
        print("READY" if is_ready(config, registry, states) else "NOT_READY")
    return 0


def _parse(argv: list[str]) -> tuple[str, str, bool, bool]:
    """tool, -c/--config PATH, -q/--query, -N/--nodes (argparse would double the fake's start-up)."""
    if not argv or argv[0] not in EXECUTABLES.values():
        raise ImexConfigError(
            f"usage: fakeimex {{{'|'.join(sorted(set(EXECUTABLES.values())))}}} [-c CFG] [-q] [-N]"
        )
    tool, config, query, nodes = argv[0], "/etc/nvidia-imex/config.cfg", False, False
    rest = iter(argv[1:])
    for arg in rest:
        if arg in ("-c", "--config"):
            config = next(rest, "")
        elif arg.startswith("--config="):
            config = arg.partition("=")[2]
        elif arg in ("-q", "--query"):
            query = True
        elif arg in ("-N", "--nodes"):
            nodes = True
        else:
            raise ImexConfigError(f"unknown argument {arg!r}")
    return tool, config, query, nodes


def main(argv: list[str] | None = None) -> int:
    try:
        tool, config, query, nodes = _parse(sys.argv[1:] if argv is None else argv)
        if tool == "imex":
            return run_imex(config)
        return run_ctl(config, query, nodes)
    except ImexConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def install_executables(bin_dir: Path, python: str = sys.executable) -> dict[str, Path]:
    """Write `nvidia-imex` and `nvidia-imex-ctl` into `bin_dir` (for PATH); returns name -> path.

    `nvidia-imex` runs this file as a bare script; `nvidia-imex-ctl` is the shell script of
    cdctl.sim.node.fakeimexctl (the same answers, for a millisecond of CPU instead of an interpreter's
    start)."""
    from cdctl.sim.node.fakeimexctl import script  # here: the bare script (python -S -I) cannot import cdctl

    bin_dir.mkdir(parents=True, exist_ok=True)
    texts = {
        "nvidia-imex": f'#!/bin/sh\nexec "{python}" -S -I "{os.path.realpath(__file__)}" imex "$@"\n',
        "nvidia-imex-ctl": script(UNUSED_SLOT_ADDRESS),
    }
    installed = {}
    for name, text in texts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
        installed[name] = path
    return installed


if __name__ == "__main__":
    sys.exit(main())
