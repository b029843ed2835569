"""The Kubernetes API client: from a kubeconfig file when one is given, else the in-cluster service account.

Called once per process by the command entry points (controller, kubelet plugin, daemon) and by tests against
the simulated cluster. The returned client must be closed by the caller (`await client.close()`, or
`async with`). A configuration that cannot be loaded (no kubeconfig and not in a cluster, an unreadable or
malformed file) is a PermanentError naming where it looked, so every command reports it in one line.
"""

from __future__ import annotations

import yaml
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config.config_exception import ConfigException

from cdctl.domain.errors import PermanentError


async def api_client(kubeconfig: str | None) -> ApiClient:
    """An ApiClient for `kubeconfig` (its current context), or the in-cluster config when None."""
    try:
        if kubeconfig:
            return await config.new_client_from_config(config_file=kubeconfig)
        configuration = Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return ApiClient(configuration=configuration)
    except (ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        where = (
            f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account (no --kubeconfig)"
        )
        raise PermanentError(f"cannot configure the Kubernetes client from {where}: {exc}") from exc
