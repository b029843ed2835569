"""Shared pieces of the simulated node's tests: a short socket directory and a cluster with claim classes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdctl.sim.apiserver.store import ObjectStore
from tests.sim.standins import add_classes, add_template


@pytest.fixture
def socket_root() -> Iterator[Path]:
    # Unix socket paths are limited to 108 bytes; pytest's tmp_path can be longer.
    root = Path(tempfile.mkdtemp(prefix="cdsim-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def claim_cluster() -> ObjectStore:
    """An object store with the DeviceClasses and the claim template `tmpl` the kubelet tests use."""
    store = ObjectStore()
    add_classes(store)
    add_template(store, "tmpl")
    return store
