"""Retention at the command line: every component's flags and environment twins, the daemons' policy handed
on by the controller, and the history commands over a compacted log (`replay` refuses what is gone, exit 5).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cdctl.cli import controller as controller_cli
from cdctl.cli.main import cli
from cdctl.controller.render import daemon_set
from cdctl.controller.settings import ControllerSettings
from cdctl.domain.retention import DEFAULT_AGE, DEFAULT_INTERVAL, DEFAULT_SIZE, RetentionPolicy
from cdctl.store import SqliteEventStore
from tests.store.compacting import compact_through, plugin_log


def command(*path: str) -> click.Command:
    found: click.Command | None = cli
    for name in path:
        assert isinstance(found, click.Group)
        found = found.get_command(click.Context(found), name)
    assert found is not None
    return found


@pytest.mark.parametrize("path", [("controller",), ("kubelet-plugin",), ("daemon", "run")])
def test_every_component_takes_both_bounds_and_the_interval_with_their_environment_twins(
    path: tuple[str, ...],
) -> None:
    options = {opt: param for param in command(*path).params for opt in param.opts}
    assert options["--retention-age"].envvar == "CDCTL_RETENTION_AGE"
    assert options["--retention-size"].envvar == "CDCTL_RETENTION_SIZE"
    assert options["--retention-interval"].envvar == "CDCTL_RETENTION_INTERVAL"
    assert (
        options["--retention-age"].default,
        options["--retention-size"].default,
        options["--retention-interval"].default,
    ) == (DEFAULT_AGE, DEFAULT_SIZE, DEFAULT_INTERVAL)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["kubelet-plugin", "--node-name", "n1", "--retention-age", "a month"], "--retention-age"),
        (["kubelet-plugin", "--node-name", "n1", "--retention-size", "big"], "--retention-size"),
        (["daemon", "run", "--retention-age", "5s"], "--retention-age"),
        (["daemon", "run", "--retention-size", "12KiB"], "--retention-size"),
        (["kubelet-plugin", "--node-name", "n1", "--retention-interval", "0"], "--retention-interval"),
        (["daemon", "run", "--retention-interval", "often"], "--retention-interval"),
    ],
)
def test_a_bad_bound_is_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    result = CliRunner().invoke(cli, args, env={"COMPUTE_DOMAIN_UUID": "u", "NODE_NAME": "n1"})
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and flag in errors[0] and "Traceback" not in result.output


def test_the_controller_reads_its_bounds_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ControllerSettings] = []

    async def fake_serve(settings: ControllerSettings) -> None:
        seen.append(settings)

    monkeypatch.setattr(controller_cli, "serve", fake_serve)
    base = {"POD_NAME": "p", "IMAGE_NAME": "img", "LOG_VERBOSITY_CD_DAEMON": "4"}
    result = CliRunner().invoke(
        controller_cli.controller,
        [],
        env=base
        | {"CDCTL_RETENTION_AGE": "12h", "CDCTL_RETENTION_SIZE": "0", "CDCTL_RETENTION_INTERVAL": "30s"},
    )
    assert result.exit_code == 0, result.output
    assert seen[0].retention == RetentionPolicy(age_s=43200, size_bytes=0)
    assert seen[0].retention_interval_s == 30
    bad = CliRunner().invoke(controller_cli.controller, [], env=base | {"CDCTL_RETENTION_SIZE": "lots"})
    assert bad.exit_code == 2 and "--retention-size" in bad.output


def test_the_daemons_get_the_controllers_policy_only_when_it_is_not_the_default() -> None:
    cd = {"metadata": {"name": "cd", "namespace": "ns", "uid": "uid-1"}, "spec": {"numNodes": 1}}

    def env(settings: ControllerSettings) -> dict[str, str]:
        [container] = daemon_set(cd, "drv", settings)["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value", "") for e in container["env"] if e["name"].startswith("CDCTL_")}

    default = ControllerSettings(pod_name="p", image_name="img", log_verbosity_cd_daemon=4)
    assert env(default) == {}  # an upgrade that keeps the default does not roll the daemons
    custom = ControllerSettings(
        pod_name="p",
        image_name="img",
        log_verbosity_cd_daemon=4,
        retention=RetentionPolicy(7 * 86400, 256 << 20),
        retention_interval_s=90,
    )
    assert env(custom) == {
        "CDCTL_RETENTION_AGE": "1w",
        "CDCTL_RETENTION_SIZE": "256MiB",
        "CDCTL_RETENTION_INTERVAL": "90s",
    }


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    path = tmp_path_factory.mktemp("log") / "events.db"

    async def build() -> tuple[int, str]:
        await plugin_log(path)
        async with await SqliteEventStore.open(path) as store:
            report = await compact_through(store, 29)
            horizon = await store.horizon()
        assert report is not None and horizon is not None
        return horizon.position, horizon.recorded_at

    position, recorded_at = asyncio.run(build())
    return path, position, recorded_at


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_replay_before_the_horizon_exits_5_naming_it(compacted: tuple[Path, int, str]) -> None:
    path, horizon, recorded_at = compacted
    code, _, err = invoke("replay", "--db", str(path), "--position", str(horizon - 1))
    assert code == 5 and err.count("\n") == 1
    assert f"position {horizon - 1} is before the log's horizon" in err and f"--position {horizon}" in err
    assert f"--at {recorded_at}" in err
    code, _, err = invoke("replay", "--db", str(path), "--at", "2000-01-01T00:00:00Z")
    assert code == 5 and "is before the log's horizon" in err and recorded_at in err
    code, out, _ = invoke("replay", "--db", str(path), "--position", str(horizon))
    assert code == 0 and f"state after position {horizon} (0 events folded)" in out


def test_verify_says_where_the_log_was_compacted(compacted: tuple[Path, int, str]) -> None:
    path, horizon, recorded_at = compacted
    code, out, _ = invoke("verify", "--db", str(path))
    assert code == 0 and out.startswith("ok: ") and f"compacted up to position {horizon}" in out
    assert recorded_at in out
    code, out, _ = invoke("events", "--db", str(path), "--stream", "log/compaction", "--json")
    assert code == 0 and '"LogCompactionStarted"' in out and '"LogCompacted"' in out


def test_verify_fails_a_log_whose_compaction_record_was_edited(tmp_path: Path) -> None:
    path = tmp_path / "events.db"

    async def build() -> None:
        await plugin_log(path)
        async with await SqliteEventStore.open(path) as store:
            await compact_through(store, 29)

    asyncio.run(build())
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER compactions_complete_once")
    conn.execute("UPDATE compactions SET horizon_recorded_at = '2000-01-01T00:00:00.000000+00:00'")
    conn.commit()
    conn.close()
    code, _, err = invoke("verify", "--db", str(path))
    assert code == 1 and "differs from the compactions table" in err
