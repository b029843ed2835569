"""The logs the kubelet plugin serves: its own, its node's live daemon logs in their domain directories, the
shared daemon's (channel isolation) and the ones it kept for gone domains; never what a compromised daemon
puts in its (writable) domain directory to make the plugin, which runs as root, read and serve another
file."""

from __future__ import annotations

from pathlib import Path

from cdctl.plugin.eventlogs import served_logs


def test_serves_its_log_and_the_live_and_kept_daemon_logs(tmp_path: Path) -> None:
    own = tmp_path / "events.db"
    (tmp_path / "domains" / "uid-live").mkdir(parents=True)
    (tmp_path / "domains" / "uid-live" / "events.db").write_bytes(b"")
    (tmp_path / "domains" / "uid-no-log").mkdir()
    (tmp_path / "imex-history").mkdir()
    (tmp_path / "imex-history" / "uid-gone.db").write_bytes(b"")
    (tmp_path / "imex-history" / "uid-live.db").write_bytes(b"")  # a live one wins over a kept copy
    (tmp_path / "shared-imex").mkdir()  # channel isolation: the node's shared daemon, every domain's
    (tmp_path / "shared-imex" / "events.db").write_bytes(b"")
    logs = served_logs(tmp_path, own)
    assert [(r.name, r.component, r.domain_uid, r.state, r.path) for r in logs] == [
        ("plugin", "kubelet-plugin", "", "live", own),
        ("daemon/uid-live", "daemon", "uid-live", "live", tmp_path / "domains" / "uid-live" / "events.db"),
        ("daemon/shared-imex", "daemon", "", "live", tmp_path / "shared-imex" / "events.db"),
        ("daemon/uid-gone", "daemon", "uid-gone", "kept", tmp_path / "imex-history" / "uid-gone.db"),
    ]


def test_a_daemon_cannot_make_the_plugin_serve_another_file(tmp_path: Path) -> None:
    own = tmp_path / "events.db"
    own.write_bytes(b"the plugin's own log")
    domains = tmp_path / "domains"
    (domains / "uid-a").mkdir(parents=True)
    (domains / "uid-a" / "events.db").symlink_to(own)  # the daemon replaced its log with a link
    (domains / "uid-b").mkdir()
    (domains / "uid-b" / "events.db").mkdir()  # a directory, not a log
    (domains / "uid-c").symlink_to(tmp_path / "elsewhere")  # the domain directory itself a link
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "events.db").write_bytes(b"")
    (domains / "..hidden").mkdir()
    (domains / "..hidden" / "events.db").write_bytes(b"")
    (tmp_path / "shared-imex").mkdir()
    (tmp_path / "shared-imex" / "events.db").symlink_to(own)  # the shared daemon's log made a link
    assert [r.name for r in served_logs(tmp_path, own)] == ["plugin"]
