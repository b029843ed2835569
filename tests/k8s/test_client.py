"""Client construction: a configuration that cannot load is one typed, readable error."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdctl.domain.errors import PermanentError
from cdctl.k8s.client import api_client


async def test_outside_a_cluster_without_kubeconfig_is_a_permanent_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(PermanentError, match="in-cluster service account"):
        await api_client(None)


@pytest.mark.parametrize("content", [None, "not: [a kubeconfig"])
async def test_a_missing_or_broken_kubeconfig_names_the_file(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(PermanentError, match=str(path)):
        await api_client(str(path))
