"""Atomic writes of the IMEX files and the hosts file, including a hosts file that cannot be renamed over."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from cdctl.daemon.files import update_hosts, write_atomically, write_config
from cdctl.domain.errors import PermanentError
from cdctl.domain.imex import HOSTS_HEADER

KUBELET_HOSTS = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.1.0.7\tdaemon-pod\n"


def test_writes_replace_the_file_and_leave_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "nodes.cfg"
    write_atomically(target, "a\n")
    write_atomically(target, "b\n")
    assert target.read_text() == "b\n"
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["nodes.cfg"]


def test_hosts_updates_touch_only_the_block_and_skip_unchanged_writes(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(KUBELET_HOSTS)
    assert update_hosts(hosts, {"compute-domain-daemon-0000": "10.1.0.7"}) is True
    inode = hosts.stat().st_ino
    assert update_hosts(hosts, {"compute-domain-daemon-0000": "10.1.0.7"}) is False
    assert hosts.stat().st_ino == inode, "an unchanged block is not rewritten"
    assert update_hosts(hosts, {"compute-domain-daemon-0000": "10.1.0.9"}) is True
    text = hosts.read_text()
    assert text == f"{KUBELET_HOSTS}{HOSTS_HEADER}\n10.1.0.9\tcompute-domain-daemon-0000\n"


def test_a_bind_mounted_hosts_file_is_rewritten_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(KUBELET_HOSTS + "a much longer line that the new content will not need any more\n")
    inode = hosts.stat().st_ino

    def busy(self: Path, target: Path) -> Path:
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(Path, "replace", busy)
    assert update_hosts(hosts, {"compute-domain-daemon-0000": "10.1.0.7"}) is True
    assert hosts.stat().st_ino == inode
    assert hosts.read_text() == (
        KUBELET_HOSTS
        + "a much longer line that the new content will not need any more\n"
        + f"{HOSTS_HEADER}\n10.1.0.7\tcompute-domain-daemon-0000\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["hosts"]


def test_a_missing_template_is_a_permanent_error(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="cannot read IMEX config template"):
        write_config(tmp_path / "imexd.cfg.tmpl", tmp_path / "imexd.cfg", {})
