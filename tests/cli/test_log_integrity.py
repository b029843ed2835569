"""Honest and private logs at the command line: verify with a key and published heads, a tampered log at a
component's start, a row of invalid JSON in the history commands, and the plugin's file modes.

The start paths run as real processes (one line on stderr, the exit code, never a traceback).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdctl.cli.errors import run
from cdctl.cli.main import cli
from cdctl.domain.events import NewEvent
from cdctl.store import SqliteEventStore
from tests.store.tampering import KEY, delete_tail, edit_data, recompute_chain


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output + result.stderr
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stdout, result.stderr


async def _write(path: Path, count: int, key: bytes | None) -> tuple[int, str]:
    async with await SqliteEventStore.open(path, key=key) as store:
        for n in range(count):
            await store.append(f"claim/u{n}", [NewEvent("ClaimPrepareStarted", {"claimUID": f"u{n}"})])
        return store.chain_head()


def write(path: Path, count: int = 5, key: bytes | None = None) -> tuple[int, str]:
    return run(_write(path, count, key))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "log-key"
    path.write_bytes(KEY)
    return path


def test_verify_with_the_key_fails_an_edit_whose_chain_was_recomputed(tmp_path: Path, key_file: Path) -> None:
    log = tmp_path / "events.db"
    write(log, key=KEY)
    code, out, _ = invoke("verify", "--db", str(log), "--key-file", str(key_file))
    assert code == 0 and "ok: 5 events, keyed hash chain (HMAC-SHA256) intact" in out
    edit_data(log, 3, '{"claimUID":"someone-else"}')
    recompute_chain(log)
    code, _, err = invoke("verify", "--db", str(log), "--key-file", str(key_file))
    assert code == 1 and "position 1: hash mismatch" in err and "first bad position 1" in err


def test_verify_of_a_keyed_log_without_its_key_says_so(tmp_path: Path) -> None:
    log = tmp_path / "events.db"
    write(log, key=KEY)
    code, _, err = invoke("verify", "--db", str(log))
    assert code == 3 and err.count("\n") == 1
    assert "this event log is keyed" in err and "pass its key with --key-file" in err


def test_verify_against_a_published_head_catches_a_cut_tail(tmp_path: Path) -> None:
    log = tmp_path / "events.db"
    position, hash_ = write(log, count=6)
    delete_tail(log, 4)
    code, _, _ = invoke("verify", "--db", str(log))
    assert code == 0  # the chain that is left is intact: only a head kept outside the file can tell
    code, _, err = invoke("verify", "--db", str(log), "--expect-head", f"{position}:{hash_}")
    assert code == 1 and "ends at position 4, before the published head 6" in err
    code, _, err = invoke("verify", "--db", str(log), "--expect-head", "6:nothex")
    assert code == 2 and "--expect-head" in err and err.count("\n") == 1


def test_verify_names_a_short_key_file(tmp_path: Path) -> None:
    log = tmp_path / "events.db"
    write(log)
    (tmp_path / "short").write_bytes(b"abc")
    code, _, err = invoke("verify", "--db", str(log), "--key-file", str(tmp_path / "short"))
    assert code == 2 and "--key-file" in err and "holds 3 bytes" in err


@pytest.mark.parametrize(
    "args",
    [("events",), ("history", "claim/u1"), ("replay",), ("sql", "SELECT * FROM claim_lifecycle")],
)
def test_a_row_of_invalid_json_is_one_line_in_the_history_commands(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    log = tmp_path / "events.db"
    write(log)
    edit_data(log, 2, "{not json")
    recompute_chain(log)
    code, _, err = invoke(args[0], "--db", str(log), *args[1:])
    if args[0] == "sql":
        assert code == 0  # SQL shows the stored text as it is: that is how the row is inspected
        return
    assert code == 3 and err.count("\n") == 1 and "position 2" in err and "not valid JSON" in err


def test_verify_reports_the_invalid_json_row(tmp_path: Path) -> None:
    log = tmp_path / "events.db"
    write(log)
    edit_data(log, 2, "{not json")
    recompute_chain(log)
    code, _, err = invoke("verify", "--db", str(log))
    assert code == 1 and "position 2: its data is not valid JSON" in err


def cdctl(*args: str, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "CDCTL_DB", "CDCTL_LOG_KEY_FILE")}
    return subprocess.run(
        [sys.executable, "-m", "cdctl", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        umask=umask,
    )


def plugin_args(root: Path, *more: str) -> list[str]:
    return [
        "kubelet-plugin", "--node-name", "n1", "--fake-nvml", "none",
        "--kubelet-plugins-directory-path", str(root / "plugins"),
        "--kubelet-registrar-directory-path", str(root / "registry"),
        "--cdi-root", str(root / "cdi"), "--kubeconfig", str(root / "no-kubeconfig"), *more,
    ]  # fmt: skip


@pytest.mark.parametrize("edit", ["hash", "json"])
def test_the_plugin_refuses_a_tampered_log_at_start_in_one_line(tmp_path: Path, edit: str) -> None:
    log = tmp_path / "plugins" / "compute-domain.nvidia.com" / "events.db"
    log.parent.mkdir(parents=True)
    write(log)
    edit_data(log, 3, '{"claimUID":"x"}' if edit == "hash" else "{not json")
    if edit == "json":
        recompute_chain(log)
    done = cdctl(*plugin_args(tmp_path))
    assert done.returncode == 3 and "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("cdctl: error:")]
    assert "integrity check at position 3" in line and f"mv {log} {log}.tampered-" in line


def test_the_daemon_refuses_a_tampered_log_at_start_in_one_line(tmp_path: Path) -> None:
    log = tmp_path / "events.db"
    write(log)
    edit_data(log, 2, '{"claimUID":"x"}')
    done = cdctl(
        "daemon", "run", "--compute-domain-uuid", "d1", "--node-name", "n1", "--pod-name", "p",
        "--pod-namespace", "ns", "--imexd-dir", str(tmp_path), "--db", str(log),
    )  # fmt: skip
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "cdctl: error:" in done.stderr and "integrity check at position 2" in done.stderr


def test_the_daemon_refuses_a_keyed_log_without_its_key(tmp_path: Path, key_file: Path) -> None:
    log = tmp_path / "events.db"
    write(log, key=KEY)
    done = cdctl(
        "daemon", "run", "--compute-domain-uuid", "d1", "--node-name", "n1", "--pod-name", "p",
        "--pod-namespace", "ns", "--imexd-dir", str(tmp_path), "--db", str(log),
    )  # fmt: skip
    assert done.returncode == 3 and "pass its key with --log-key-file" in done.stderr


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_plugin_keeps_its_state_owner_only_and_cdi_specs_readable(tmp_path: Path, umask: int) -> None:
    done = cdctl(*plugin_args(tmp_path, "--log-key-file", str(tmp_path / "missing-key")), umask=umask)
    assert done.returncode == 2 and "--log-key-file" in done.stderr  # a missing key is bad input
    (tmp_path / "key").write_bytes(KEY)
    done = cdctl(*plugin_args(tmp_path, "--log-key-file", str(tmp_path / "key")), umask=umask)
    assert "Traceback" not in done.stderr and "kubeconfig" in done.stderr  # stops at the (absent) cluster

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    state = tmp_path / "plugins" / "compute-domain.nvidia.com"
    assert {p: mode(state / p) for p in ("", "domains", "imex-history")} == dict.fromkeys(
        ("", "domains", "imex-history"), 0o700
    )
    assert mode(state / "events.db") == 0o600
    cdi = tmp_path / "cdi"
    assert mode(cdi) == 0o755 and {mode(spec) for spec in cdi.iterdir()} == {0o644}
