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


def kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return str(path)


async def test_the_environment_proxy_is_resolved_once_and_netrc_is_not_read_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = await api_client(kubeconfig(tmp_path, "https://api.example:6443"))
    try:
        assert client.rest_client.proxy == "http://proxy.example:3128"
        # The session no longer consults the environment (a thread hop per request for proxy and netrc).
        assert client.rest_client.pool_manager.trust_env is False
    finally:
        await client.close()


async def test_no_proxy_exempts_the_api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "api.example")
    client = await api_client(kubeconfig(tmp_path, "https://api.example:6443"))
    try:
        assert not client.rest_client.proxy
    finally:
        await client.close()
