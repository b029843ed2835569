"""The Kubernetes API client: from a kubeconfig file when one is given, else the in-cluster service account.

Called once per process by the command entry points (controller, kubelet plugin, daemon) and by tests against
the simulated cluster. The returned client must be closed by the caller (`await client.close()`, or
`async with`). A configuration that cannot be loaded (no kubeconfig and not in a cluster, an unreadable or
malformed file) is a PermanentError naming where it looked, so every command reports it in one line.

The library's HTTP session trusts the environment, which aiohttp honours per request with two trips to a
worker thread (a proxy lookup and a read of ~/.netrc): more CPU than the request itself. The session is
replaced by one that does not, with the environment's proxy for the API server (HTTPS_PROXY, NO_PROXY, as
client-go honours them) resolved once here; netrc is not read (client-go does not either).
"""

from __future__ import annotations

import aiohttp
import yaml
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config.config_exception import ConfigException
from yarl import URL

from cdctl.domain.errors import PermanentError


async def api_client(kubeconfig: str | None) -> ApiClient:
    """An ApiClient for `kubeconfig` (its current context), or the in-cluster config when None."""
    try:
        if kubeconfig:
            return _without_environment_lookups(await config.new_client_from_config(config_file=kubeconfig))
        configuration = Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return _without_environment_lookups(ApiClient(configuration=configuration))
    except (ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        where = (
            f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account (no --kubeconfig)"
        )
        raise PermanentError(f"cannot configure the Kubernetes client from {where}: {exc}") from exc


def _without_environment_lookups(client: ApiClient) -> ApiClient:
    """Swap the client's session for one that does not consult the environment on every request (same
    connector, so the same TLS settings); the environment's proxy for the API server is looked up once."""
    rest = client.rest_client
    if not rest.proxy:
        try:
            proxy, proxy_auth = get_env_proxy_for_url(URL(str(client.configuration.host)))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if proxy_auth is not None:
                rest.proxy_headers = {"Proxy-Authorization": proxy_auth.encode()}
    session = rest.pool_manager
    connector = session.connector
    session.detach()
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=2**21)
    return client
