"""Fake `nvidia-imex` and `nvidia-imex-ctl` for the simulated rack (no GPU, no IMEX driver needed).

`python -m cdctl.sim.node.fakeimex imex -c CFG` behaves like the daemon: it reads the IMEX config (KEY=VALUE
lines: IMEX_NODE_CONFIG_FILE, IMEX_CMD_BIND_INTERFACE_IP / BIND_INTERFACE_IP, SERVER_PORT, IMEX_CMD_PORT) and
the node list, registers itself, re-reads the node list on SIGUSR1 and leaves on SIGTERM/SIGINT (exit 0).
`python -m cdctl.sim.node.fakeimex ctl -c CFG -q` answers `READY` once the local daemon runs and every peer in
its node list that resolves (an IP, or a name in the hosts file) is up, else `NOT_READY`; `-N` lists the
peers. Slots the daemon maps to the unused-slot address (cdctl.domain.imex.DEFAULT_UNUSED_ADDRESS: no daemon
there) are UNUSED and do not hold readiness back.
Peers find each other through files in one registry directory on this machine (`CDCTL_FAKE_IMEX_DIR`); names
resolve through `CDCTL_FAKE_IMEX_HOSTS` (default /etc/hosts). `install_executables(bin_dir)` writes the two
commands under their real names, for a PATH the cdctl daemon finds them on: `nvidia-imex` runs this file as
a bare script (`python -S -I`, standard library only), and `nvidia-imex-ctl`, which every daemon probe
starts, is the shell twin of `ctl` in cdctl.sim.node.fakeimexctl. Used by the rack and the tests.
"""

# os.path rather than pathlib: see TYPE_CHECKING below.
# ruff: noqa: PTH103, PTH105, PTH108, PTH118, PTH119
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


def _is_address(text: str) -> bool:
    parts = text.split(".")
    return (len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)) or ":" in text


class Registry:
    """One file per running fake daemon, named after its address: its pid, its address, then its node
    list, one line each (the shell `nvidia-imex-ctl` of cdctl.sim.node.fakeimexctl reads the same). Liveness
    is the pid."""

    def __init__(self, directory: PathLike) -> None:
        self.directory = os.fspath(directory)

    @classmethod
    def from_env(cls) -> Registry:
        return cls(os.environ.get(REGISTRY_ENV, DEFAULT_REGISTRY))

    def _file(self, address: str) -> str:
        return os.path.join(self.directory, address.replace("/", "_"))

    def register(self, address: str, nodes: list[str]) -> None:
        os.makedirs(self.directory, exist_ok=True)
        target = self._file(address)
        temporary = os.path.join(self.directory, f".{os.path.basename(target)}.{os.getpid()}.tmp")
        with open(temporary, "w", encoding="utf-8") as file:
            file.write("".join(f"{line}\n" for line in [str(os.getpid()), address, *nodes]))
        os.replace(temporary, target)

    def _read(self, address: str) -> dict[str, Any] | None:
        try:
            pid, recorded, *nodes = _read_text(self._file(address)).splitlines()
            return {"pid": int(pid), "address": recorded, "nodes": [n for n in nodes if n]}
        except (OSError, ValueError):
            return None

    def unregister(self, address: str) -> None:
        entry = self._read(address)
        if entry is not None and entry["pid"] == os.getpid():
            try:
                os.unlink(self._file(address))
            except FileNotFoundError:
                pass

    def entry(self, address: str) -> dict[str, Any] | None:
        """The registration of a live daemon at `address`, if any."""
        entry = self._read(address)
        if entry is None:
            return None
        try:
            os.kill(entry["pid"], 0)
        except OSError:
            return None
        return entry


def peer_states(config: ImexConfig, registry: Registry, hosts: dict[str, str]) -> dict[str, str] | None:
    """Node-list entry -> UP / DOWN / UNRESOLVED for the local daemon's peers; None when it is not running."""
    local = registry.entry(config.address)
    if local is None:
        return None
    states = {}
    for node in [str(n) for n in local.get("nodes") or []]:
        address = node if _is_address(node) else hosts.get(node)
        if address is None:
            states[node] = "UNRESOLVED"
        else:
            states[node] = "UP" if address == config.address or registry.entry(address) else "DOWN"
            if address == UNUSED_SLOT_ADDRESS:
                states[node] = "UNUSED"  # a slot without a daemon: no IMEX will ever answer, none is expected
    return states


def run_imex(config_path: str) -> int:
    config = read_config(config_path)
    registry = Registry.from_env()
    handled = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}
    signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    registry.register(config.address, read_nodes(config.node_file))
    print(f"IMEX daemon (fake) serving {config.address}:{config.server_port}", file=sys.stderr, flush=True)
    try:
        while signal.sigwait(handled) == signal.SIGUSR1:
            registry.register(config.address, read_nodes(config.node_file))
            print("IMEX daemon (fake): node list re-read", file=sys.stderr, flush=True)
    finally:
        registry.unregister(config.address)
    return 0


def run_ctl(config_path: str, query: bool, list_nodes: bool) -> int:
    config = read_config(config_path)
    hosts = read_hosts(os.environ.get(HOSTS_ENV, DEFAULT_HOSTS))
    states = peer_states(config, Registry.from_env(), hosts)
    if states is None:
        print(f"UNAVAILABLE: no IMEX daemon at {config.address}")
        return 1
    if list_nodes:
        for node, state in states.items():
            print(f"{node}\t{state}")
    if query:
        print("READY" if all(s != "DOWN" for s in states.values()) else "NOT_READY")
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
