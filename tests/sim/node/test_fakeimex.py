"""The fake nvidia-imex / nvidia-imex-ctl executables: config and node list reading, peers, readiness.

Every test runs twice: with the installed shell `nvidia-imex-ctl` (cdctl.sim.node.fakeimexctl) and with the
Python `ctl` of cdctl.sim.node.fakeimex in its place, so that the two answer alike."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from cdctl.domain.imex import DEFAULT_UNUSED_ADDRESS
from cdctl.sim.node import fakeimex
from cdctl.sim.node.fakeimex import install_executables

Launcher = Callable[[str, list[str]], "asyncio.Future[asyncio.subprocess.Process]"]


def _write_config(directory: Path, address: str, nodes: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    node_file = directory / "nodes.cfg"
    node_file.write_text("".join(f"{n}\n" for n in nodes))
    config = directory / "imexd.cfg"
    config.write_text(
        "LOG_LEVEL=4\nDAEMONIZE=0\nSERVER_PORT=50000\n"
        f"IMEX_NODE_CONFIG_FILE={node_file}\nIMEX_CMD_BIND_INTERFACE_IP={address}\nIMEX_CMD_PORT=50005\n"
    )
    return config


def _write_hosts(path: Path) -> None:
    path.write_text(
        "127.0.0.1\tlocalhost\n# Compute Domain Daemon mappings\n10.0.0.1\tcompute-domain-daemon-0000\n"
        "10.0.0.2\tcompute-domain-daemon-0001\n"
    )


def _write_text(path: Path, text: str) -> None:
    path.write_text(text)


def _write_slot_hosts(path: Path) -> None:
    path.write_text("10.0.0.1\tslot-0\n192.0.2.1\tslot-1\n10.0.0.3\tslot-2\n")


@pytest.fixture(params=["sh", "python"])
def imex_env(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    installed = install_executables(bin_dir)
    if request.param == "python":
        script = Path(fakeimex.__file__).resolve()
        installed["nvidia-imex-ctl"].write_text(
            f'#!/bin/sh\nexec "{sys.executable}" -S -I "{script}" ctl "$@"\n'
        )
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["CDCTL_FAKE_IMEX_DIR"] = str(tmp_path / "registry")
    env["CDCTL_FAKE_IMEX_HOSTS"] = str(tmp_path / "hosts")
    return env


@pytest.fixture
async def daemons(imex_env: dict[str, str]) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    started: list[asyncio.subprocess.Process] = []
    yield started
    for process in started:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.wait()


async def _start(
    env: dict[str, str], config: Path, into: list[asyncio.subprocess.Process]
) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        "nvidia-imex", "-c", str(config), env=env, stderr=asyncio.subprocess.PIPE
    )
    into.append(process)
    assert process.stderr is not None
    async with asyncio.timeout(30):
        banner = await process.stderr.readline()
    assert b"serving" in banner
    return process


async def _query(env: dict[str, str], config: Path, *flags: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        "nvidia-imex-ctl",
        "-c",
        str(config),
        *flags,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(30):
        output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_ready_only_when_every_listed_peer_is_up(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    peers = ["10.0.0.1", "10.0.0.2"]
    first = _write_config(tmp_path / "a", peers[0], peers)
    second = _write_config(tmp_path / "b", peers[1], peers)
    assert await _query(imex_env, first, "-q") == (1, "UNAVAILABLE: no IMEX daemon at 10.0.0.1\n")
    await _start(imex_env, first, daemons)
    assert await _query(imex_env, first, "-q") == (0, "NOT_READY\n")
    stopping = await _start(imex_env, second, daemons)
    assert await _query(imex_env, first, "-q") == (0, "READY\n")
    assert await _query(imex_env, second, "-q") == (0, "READY\n")
    stopping.send_signal(signal.SIGTERM)
    async with asyncio.timeout(30):
        assert await stopping.wait() == 0
    assert await _query(imex_env, first, "-q") == (0, "NOT_READY\n")


async def _start_and_list(
    env: dict[str, str], config: Path, daemons: list[asyncio.subprocess.Process]
) -> list[str]:
    """Start the daemon of `config` and list its peers' states (`nvidia-imex-ctl -N`)."""
    await _start(env, config, daemons)
    code, listing = await _query(env, config, "-N")
    assert code == 0
    return listing.splitlines()


async def test_names_resolve_through_the_hosts_file_and_unresolved_names_are_skipped(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    names = [f"compute-domain-daemon-{i:04d}" for i in range(4)]
    _write_hosts(Path(imex_env["CDCTL_FAKE_IMEX_HOSTS"]))
    first = _write_config(tmp_path / "a", "10.0.0.1", names)
    second = _write_config(tmp_path / "b", "10.0.0.2", names)
    assert await _start_and_list(imex_env, first, daemons) == [
        "compute-domain-daemon-0000\tUP",
        "compute-domain-daemon-0001\tDOWN",
        "compute-domain-daemon-0002\tUNRESOLVED",
        "compute-domain-daemon-0003\tUNRESOLVED",
    ]
    await _start(imex_env, second, daemons)
    assert await _query(imex_env, first, "-q") == (0, "READY\n")


async def test_a_name_takes_the_first_line_that_maps_it_and_comments_map_nothing(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    _write_text(
        Path(imex_env["CDCTL_FAKE_IMEX_HOSTS"]),
        "127.0.0.1 localhost\n"
        "10.0.0.1\tself-alias compute-domain-daemon-0000  # a trailing comment\n"
        "10.0.0.5\n"  # an address alone maps no name
        "10.0.0.2 compute-domain-daemon-0001\n"
        "10.0.0.9 compute-domain-daemon-0000\n"  # a later line for a name already mapped
        "#10.0.0.3 compute-domain-daemon-0002\n",
    )
    names = ["compute-domain-daemon-0000", "self-alias", "compute-domain-daemon-0001"]
    names += ["compute-domain-daemon-0002", "@", "10.0.0.5"]
    config = _write_config(tmp_path / "a", "10.0.0.1", names)
    assert await _start_and_list(imex_env, config, daemons) == [
        "compute-domain-daemon-0000\tUP",
        "self-alias\tMISMATCH",  # this IMEX is node 0: a second entry naming it is not it
        "compute-domain-daemon-0001\tDOWN",
        "compute-domain-daemon-0002\tUNRESOLVED",
        "@\tUNRESOLVED",
        "10.0.0.5\tDOWN",
    ]


async def test_sigusr1_rereads_the_node_list(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    config = _write_config(tmp_path / "a", "10.0.0.1", ["10.0.0.1"])
    process = await _start(imex_env, config, daemons)
    assert await _query(imex_env, config, "-q") == (0, "READY\n")
    (tmp_path / "a" / "nodes.cfg").write_text("10.0.0.1\n10.0.0.9\n")
    process.send_signal(signal.SIGUSR1)
    assert process.stderr is not None
    async with asyncio.timeout(30):
        assert b"re-read" in await process.stderr.readline()
    assert await _query(imex_env, config, "-q") == (0, "NOT_READY\n")


async def test_the_node_id_is_fixed_at_start_and_a_signal_does_not_move_it(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    """What IMEX does with a slot that moves: the Go driver's issue 1418."""
    hosts = Path(imex_env["CDCTL_FAKE_IMEX_HOSTS"])
    names = [f"compute-domain-daemon-{i:04d}" for i in range(3)]
    _write_text(hosts, f"10.0.0.1\t{names[0]}\n10.0.0.2\t{names[1]}\n192.0.2.1\t{names[2]}\n")
    first = _write_config(tmp_path / "a", "10.0.0.1", names)
    second = _write_config(tmp_path / "b", "10.0.0.2", names)
    await _start(imex_env, first, daemons)
    moving = await _start(imex_env, second, daemons)
    assert await _query(imex_env, second, "-q") == (0, "READY\n")
    # the second daemon's slot moves from 1 to 2; it is told with a signal only
    _write_text(hosts, f"10.0.0.1\t{names[0]}\n192.0.2.1\t{names[1]}\n10.0.0.2\t{names[2]}\n")
    moving.send_signal(signal.SIGUSR1)
    assert moving.stderr is not None
    async with asyncio.timeout(30):
        assert b"re-read" in await moving.stderr.readline()
    assert await _query(imex_env, second, "-N") == (
        0, f"{names[0]}\tUP\n{names[1]}\tMISMATCH\n{names[2]}\tMISMATCH\n"
    )  # fmt: skip
    assert await _query(imex_env, second, "-q") == (0, "NOT_READY\n"), "it still answers as node 1"
    assert await _query(imex_env, first, "-q") == (0, "NOT_READY\n"), "its peer sees node 1 at node 2's name"
    moving.send_signal(signal.SIGTERM)
    async with asyncio.timeout(30):
        await moving.wait()
    await _start(imex_env, second, daemons)  # restarted: it takes node id 2
    assert await _query(imex_env, second, "-q") == (0, "READY\n")
    assert await _query(imex_env, first, "-q") == (0, "READY\n")
    registry = fakeimex.Registry(imex_env["CDCTL_FAKE_IMEX_DIR"])
    assert [(s["address"], s["node_id"]) for s in registry.starts()] == [
        ("10.0.0.1", 0), ("10.0.0.2", 1), ("10.0.0.2", 2)
    ]  # fmt: skip
    assert registry.start_counts(by="address") == {"10.0.0.1": 1, "10.0.0.2": 2}


async def test_an_imex_not_in_its_own_node_list_is_never_ready(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    config = _write_config(tmp_path / "a", "10.0.0.1", ["10.0.0.7"])
    await _start(imex_env, _write_config(tmp_path / "b", "10.0.0.7", ["10.0.0.7"]), daemons)
    await _start(imex_env, config, daemons)
    assert await _query(imex_env, config, "-N") == (0, "10.0.0.7\tUP\n")
    assert await _query(imex_env, config, "-q") == (0, "NOT_READY\n"), "it has no node id"


async def test_the_start_log_names_each_start_s_node(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    config = _write_config(tmp_path / "a", "10.0.0.1", ["10.0.0.1"])
    await _start({**imex_env, "NODE_NAME": "node-7"}, config, daemons)
    registry = fakeimex.Registry(imex_env["CDCTL_FAKE_IMEX_DIR"])
    (start,) = registry.starts()
    assert (start["node"], start["pid"], start["node_id"]) == ("node-7", daemons[0].pid, 0)
    assert registry.start_counts() == {"node-7": 1}


async def test_an_unreadable_config_or_a_bad_argument_is_an_error(
    tmp_path: Path, imex_env: dict[str, str]
) -> None:
    code, output = await _query(imex_env, tmp_path / "missing.cfg", "-q")
    assert (code, output) == (
        2,
        f"error: cannot read IMEX config {tmp_path / 'missing.cfg'}: No such file or directory\n",
    )
    config = _write_config(tmp_path / "a", "10.0.0.1", ["10.0.0.1"])
    assert await _query(imex_env, config, "--bogus") == (2, "error: unknown argument '--bogus'\n")


async def test_missing_node_file_setting_is_an_error(tmp_path: Path, imex_env: dict[str, str]) -> None:
    config = tmp_path / "bad.cfg"
    config.write_text("SERVER_PORT=50000\n")
    process = await asyncio.create_subprocess_exec(
        "nvidia-imex", "-c", str(config), env=imex_env, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(30):
        _, error = await process.communicate()
    assert process.returncode == 2
    assert b"IMEX_NODE_CONFIG_FILE" in error


async def test_slots_mapped_to_the_unused_address_do_not_hold_readiness_back(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    _write_slot_hosts(Path(imex_env["CDCTL_FAKE_IMEX_HOSTS"]))
    slots = ["slot-0", "slot-1", "slot-2"]
    first = _write_config(tmp_path / "a", "10.0.0.1", slots)
    await _start(imex_env, first, daemons)
    assert await _query(imex_env, first, "-N") == (0, "slot-0\tUP\nslot-1\tUNUSED\nslot-2\tDOWN\n")
    assert await _query(imex_env, first, "-q") == (0, "NOT_READY\n")
    await _start(imex_env, _write_config(tmp_path / "c", "10.0.0.3", slots), daemons)
    assert await _query(imex_env, first, "-q") == (0, "READY\n")


def test_the_bare_script_agrees_with_cdctl_on_the_unused_address_and_rejects_bad_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert fakeimex.UNUSED_SLOT_ADDRESS == DEFAULT_UNUSED_ADDRESS
    assert fakeimex.main(["ctl", "--bogus"]) == 2
    assert fakeimex.main([]) == 2
    assert "unknown argument '--bogus'" in capsys.readouterr().err


async def test_a_peer_that_does_not_list_this_imex_refuses_it(
    tmp_path: Path, imex_env: dict[str, str], daemons: list[asyncio.subprocess.Process]
) -> None:
    """IP mode: A started alone; B joined and lists both. B is not ready until A restarts with B in its list
    (a real IMEX peer refuses a node its node list lacks), and A, which lists only itself, is ready."""
    a_alone = _write_config(tmp_path / "a", "10.0.0.1", ["10.0.0.1"])
    b = _write_config(tmp_path / "b", "10.0.0.2", ["10.0.0.1", "10.0.0.2"])
    await _start(imex_env, a_alone, daemons)
    await _start(imex_env, b, daemons)
    assert await _query(imex_env, b, "-N") == (0, "10.0.0.1\tMISMATCH\n10.0.0.2\tUP\n")
    assert await _query(imex_env, b, "-q") == (0, "NOT_READY\n")
    assert await _query(imex_env, a_alone, "-q") == (0, "READY\n")
    daemons[0].terminate()
    await asyncio.wait_for(daemons[0].wait(), 30)
    await _start(imex_env, _write_config(tmp_path / "a", "10.0.0.1", ["10.0.0.1", "10.0.0.2"]), daemons)
    assert await _query(imex_env, b, "-N") == (0, "10.0.0.1\tUP\n10.0.0.2\tUP\n")
    assert await _query(imex_env, b, "-q") == (0, "READY\n")
