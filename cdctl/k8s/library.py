"""kubernetes_asyncio without its generated models until something asks for one (imported first by cdctl.k8s).

The library's package `__init__` imports every generated API class and model (about 700 modules): 64 MiB of
memory and 0.9 s of CPU in each process that imports it, where cdctl uses only the client's configuration,
its session and kubeconfig loading, and sends and reads plain dicts (cdctl.k8s.rest). `load()` creates the
packages `kubernetes_asyncio`, `kubernetes_asyncio.client`, `.client.models` and `.client.api` without running
their `__init__`, loads the few modules cdctl uses, and gives each package a module `__getattr__` (PEP 562)
that first imports a submodule of the asked name and otherwise runs the package's own `__init__` once, so any
other use of the library (`from kubernetes_asyncio.client import V1Pod`) still works, at the library's cost.
When the library is already imported, or is laid out differently than expected, nothing is changed.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

ROOT = "kubernetes_asyncio"
DEFERRED = (ROOT, f"{ROOT}.client", f"{ROOT}.client.models", f"{ROOT}.client.api")
# What cdctl.k8s takes from `kubernetes_asyncio.client`, set on the package without running its __init__.
EAGER = {
    "ApiClient": f"{ROOT}.client.api_client",
    "Configuration": f"{ROOT}.client.configuration",
    "ApiException": f"{ROOT}.client.exceptions",
}
_lock = threading.RLock()


def _completer(module: ModuleType, spec: Any) -> Any:
    """The package's `__getattr__`: a submodule of that name, else the package's `__init__` run once."""
    state = {"ran": False}

    def __getattr__(name: str) -> Any:
        with _lock:
            if not name.startswith("__"):
                with contextlib.suppress(ModuleNotFoundError):
                    if importlib.util.find_spec(f"{module.__name__}.{name}") is not None:
                        return importlib.import_module(f"{module.__name__}.{name}")
            if not state["ran"]:
                state["ran"] = True
                spec.loader.exec_module(module)
            try:
                return module.__dict__[name]
            except KeyError:
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}") from None

    return __getattr__


def _deferred(name: str) -> ModuleType | None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return None
    module = importlib.util.module_from_spec(spec)
    module.__getattr__ = _completer(module, spec)  # type: ignore[method-assign]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def load() -> bool:
    """Make `kubernetes_asyncio` importable without its generated code; True when this call did so."""
    with _lock:
        if ROOT in sys.modules:
            return False
        try:
            for name in DEFERRED:
                if _deferred(name) is None:
                    raise ImportError(f"{name} is not a package")
            client = sys.modules[f"{ROOT}.client"]
            for attribute, source in EAGER.items():
                setattr(client, attribute, getattr(importlib.import_module(source), attribute))
        except (ImportError, AttributeError, ValueError):
            for name in [n for n in sys.modules if n == ROOT or n.startswith(f"{ROOT}.")]:
                del sys.modules[name]  # the library laid out otherwise: import it the usual way
            return False
        return True
