"""The Kubernetes API client: from a kubeconfig file when one is given, else the in-cluster service account.

Called once per process by the command entry points (controller, kubelet plugin) and by tests against the
simulated cluster. The returned client must be closed by the caller (`await client.close()`, or `async with`).
"""

from __future__ import annotations

from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration


async def api_client(kubeconfig: str | None) -> ApiClient:
    """An ApiClient for `kubeconfig` (its current context), or the in-cluster config when None."""
    if kubeconfig:
        return await config.new_client_from_config(config_file=kubeconfig)
    configuration = Configuration()
    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return ApiClient(configuration=configuration)
