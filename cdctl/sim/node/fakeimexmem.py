"""Fake IMEX memory export and import (`imex-memcheck`): the isolation check the simulated workers run.

On a real node a process can import memory another process exported (a CUDA fabric handle) only when both
hold the same IMEX channel, the device node `/dev/nvidia-caps-imex-channels/channelN` whose minor is N, and
their nodes' IMEX daemons belong to one IMEX domain (each lists the other as a peer, both up). This fake
decides the same from what a container actually received, never from what the control plane says:
- its device nodes, as the simulated container runtime created them from the container's resolved CDI edits
  (cdctl.sim.node.processruntime) under `$CDCTL_FAKE_DEV_ROOT`, one file per node holding `c MAJOR:MINOR`: a
  channel is a character device whose major is `nvidia-caps-imex-channels` in the node's /proc/devices
  (`$CDCTL_FAKE_PROC_DEVICES`), its number the minor (the file's name proves nothing);
- its node (`$CDCTL_FAKE_HOST`, the kernel's identity, set by the runtime, not by the pod), whose IMEX daemon
  is the one the fake IMEX registry records for that node (cdctl.sim.node.fakeimex, `Registry.node_daemon`):
  the host's `nvidia-imex` under host-managed IMEX, the node's IMEX daemon pod under driver-managed.

`imex-memcheck worker [NAME]` is a worker container's process: it exports a buffer under NAME (default
`$POD_NAMESPACE/$POD_NAME`) on the lowest channel it holds, through its node's IMEX daemon, keeps it while it
runs and withdraws it on SIGTERM (`--linger S`: S seconds after it, as a job that finishes a checkpoint
first); with no channel or no ready IMEX daemon it exits 1, as a CUDA job would.
`imex-memcheck exported [NAME]` exits 0 once that buffer is out (the workers' startup probe: a worker is Ready
only once it exports). `imex-memcheck import NAME`, run inside another container (the simulated `kubectl
exec`), prints `IMPORTED ...` and exits 0, or `DENIED: <why>` and exits 1: the exporter is gone, the
importer lacks that channel, or the two nodes' daemons are not one ready IMEX domain. `imex-memcheck
channels` prints the channels this container holds. Like fakeimex it runs as a bare script (`python -S`, the
standard library and fakeimex beside it only), installed by `install_executable`. Used by the rack
(cdctl.sim.rack) and tests/sim.
"""

# os.path rather than pathlib, as in fakeimex: a bare script's start-up is paid by every worker and check.
# ruff: noqa: PTH112, PTH118, PTH208
from __future__ import annotations

import os
import signal
import sys

if __package__:
    from cdctl.sim.node import fakeimex
else:  # run as a bare script: fakeimex is the module beside it
    import fakeimex  # type: ignore[import-not-found,no-redef]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

DEV_ROOT_ENV = "CDCTL_FAKE_DEV_ROOT"
HOST_ENV = "CDCTL_FAKE_HOST"
PROC_DEVICES_ENV = "CDCTL_FAKE_PROC_DEVICES"
CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
CHANNEL_MAJOR_NAME = "nvidia-caps-imex-channels"
EXPORTS = "exports"
EXECUTABLE = "imex-memcheck"


class Denied(Exception):
    """The driver refuses: the message says why."""


def channel_major(proc_devices: str) -> int | None:
    """The `nvidia-caps-imex-channels` character major in a /proc/devices file; None when absent."""
    try:
        lines = fakeimex._read_text(proc_devices).splitlines()
    except OSError:
        return None
    for line in lines:
        if line.strip() == "Block devices:":
            break
        fields = line.split()
        if len(fields) == 2 and fields[1] == CHANNEL_MAJOR_NAME and fields[0].isdigit():
            return int(fields[0])
    return None


def container_channels(dev_root: str, proc_devices: str) -> list[int]:
    """The IMEX channels a container holds: its character devices under the channel directory whose major is
    the node's channel major, by minor, ascending."""
    major = channel_major(proc_devices)
    directory = os.path.join(dev_root, CHANNEL_DIR.lstrip("/"))
    if major is None or not os.path.isdir(directory):
        return []
    found = set()
    for name in os.listdir(directory):
        try:
            kind, _, numbers = fakeimex._read_text(os.path.join(directory, name)).strip().partition(" ")
            device_major, _, minor = numbers.partition(":")
            if kind == "c" and int(device_major) == major:
                found.add(int(minor))
        except (OSError, ValueError):
            continue
    return sorted(found)


def _own_channels() -> list[int]:
    return container_channels(
        os.environ.get(DEV_ROOT_ENV, "/"), os.environ.get(PROC_DEVICES_ENV, "/proc/devices")
    )


def _registry() -> fakeimex.Registry:
    return fakeimex.Registry.from_env()


def _local_daemon(registry: fakeimex.Registry) -> dict[str, Any]:
    node = os.environ.get(HOST_ENV, "")
    local = registry.node_daemon(node) if node else None
    if local is None:
        raise Denied(f"no IMEX daemon runs on node {node or '(unknown)'}")
    return local


def _peers_up(registry: fakeimex.Registry, daemon: dict[str, Any]) -> set[str] | None:
    """Addresses of the peers the daemon sees UP (itself included); None when it is not ready."""
    config = fakeimex.ImexConfig("", {"IMEX_CMD_BIND_INTERFACE_IP": daemon["address"]})
    hosts = fakeimex.read_hosts(daemon["hosts"])
    states = fakeimex.peer_states(config, registry, hosts)
    if states is None or not fakeimex.is_ready(config, registry, states):
        return None
    return {
        address
        for node, state in states.items()
        if state == "UP" and (address := fakeimex.resolve(node, hosts)) is not None
    }


def _export_file(registry: fakeimex.Registry, name: str) -> str:
    return os.path.join(registry.directory, EXPORTS, name.replace("/", "_"))


def export(name: str) -> tuple[str, int]:
    """Export a buffer under `name` from this process: its export file and the channel it is bound to."""
    channels = _own_channels()
    if not channels:
        raise Denied(f"no IMEX channel in this container (nothing under {CHANNEL_DIR})")
    registry = _registry()
    local = _local_daemon(registry)
    if _peers_up(registry, local) is None:
        raise Denied(f"the IMEX daemon at {local['address']} is not ready")
    target = _export_file(registry, name)
    fakeimex.write_lines(target, [str(os.getpid()), local["address"], local["hosts"], str(channels[0])])
    return target, channels[0]


def import_(name: str) -> str:
    """Import the buffer exported under `name` into this process; what was imported, or Denied."""
    registry = _registry()
    try:
        pid, address, hosts, channel = fakeimex._read_text(_export_file(registry, name)).splitlines()[:4]
    except (OSError, ValueError):
        raise Denied(f"nothing is exported under {name}") from None
    if not fakeimex.alive(int(pid)):
        raise Denied(f"nothing is exported under {name}: its exporter is gone")
    if int(channel) not in _own_channels():
        raise Denied(f"{name} is bound to IMEX channel {channel}, which this container does not hold")
    local = _local_daemon(registry)
    local_peers = _peers_up(registry, local)
    if local_peers is None:
        raise Denied(f"the local IMEX daemon at {local['address']} is not ready")
    exporter = registry.entry(address)
    if exporter is None:
        raise Denied(f"the exporter's IMEX daemon at {address} is down")
    exporter_peers = _peers_up(registry, {"address": address, "hosts": hosts})
    same_domain = address == local["address"] or (
        address in local_peers and exporter_peers is not None and local["address"] in exporter_peers
    )
    if not same_domain:
        raise Denied(f"the IMEX daemons at {local['address']} and {address} are not one IMEX domain")
    return f"IMPORTED {name} on IMEX channel {channel} from the IMEX daemon at {address}"


def _default_name() -> str:
    return f"{os.environ.get('POD_NAMESPACE', '')}/{os.environ.get('POD_NAME', '')}"


def exported(name: str) -> bool:
    """Whether a live process exports a buffer under `name`."""
    try:
        pid = fakeimex._read_text(_export_file(_registry(), name)).splitlines()[0]
    except (OSError, IndexError):
        return False
    return pid.isdigit() and fakeimex.alive(int(pid))


def run_worker(name: str, linger_s: float = 0.0) -> int:
    handled = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    try:
        target, channel = export(name)
    except Denied as denied:
        print(f"worker: cannot export {name}: {denied}", file=sys.stderr, flush=True)
        return 1
    print(f"worker: exported {name} on IMEX channel {channel}", file=sys.stderr, flush=True)
    try:
        signal.sigwait(handled)
        if linger_s > 0:  # a job finishing its checkpoint: still running, still holding its channel
            print(f"worker: stopping in {linger_s:g} s", file=sys.stderr, flush=True)
            signal.sigtimedwait(handled, linger_s)
    finally:
        fakeimex.remove_file(target)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command, rest = (args[0], args[1:]) if args else ("", [])
    try:
        if command == "worker" and len(rest) <= 3:
            linger = 0.0
            if "--linger" in rest:
                at = rest.index("--linger")
                linger = float(rest[at + 1]) if at + 1 < len(rest) else -1.0
                rest = rest[:at] + rest[at + 2 :]
            if linger >= 0 and len(rest) <= 1:
                return run_worker(rest[0] if rest else _default_name(), linger)
        if command == "exported" and len(rest) <= 1:  # a startup probe: the worker's buffer is out
            return 0 if exported(rest[0] if rest else _default_name()) else 1
        if command == "import" and len(rest) == 1:
            print(import_(rest[0]))
            return 0
        if command == "channels" and not rest:
            print(" ".join(str(c) for c in _own_channels()))
            return 0
    except Denied as denied:
        print(f"DENIED: {denied}")
        return 1
    except ValueError:  # --linger not a number
        pass
    print(
        f"usage: {EXECUTABLE} worker [NAME] [--linger SECONDS] | exported [NAME] | import NAME | channels",
        file=sys.stderr,
    )
    return 2


def prepare_registry(registry_dir: Path) -> None:
    """The exports directory in the fake IMEX registry, writable by a worker of any user (as /tmp is): on a
    node the driver keeps this state, and any process may export."""
    exports = registry_dir / EXPORTS
    exports.mkdir(parents=True, exist_ok=True)
    exports.chmod(0o1777)
    registry_dir.chmod(0o755)


def install_executable(bin_dir: Path, python: str = sys.executable) -> Path:
    """Write `imex-memcheck` into `bin_dir` (for PATH): this file as a bare script."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / EXECUTABLE
    path.write_text(f'#!/bin/sh\nexec "{python}" -S "{os.path.realpath(__file__)}" "$@"\n')
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    sys.exit(main())
