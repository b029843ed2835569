"""cdctl.k8s.library: the client library without its generated models, and the library whole on demand.

Each case runs in a fresh interpreter, since what is imported is the subject.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.k8s.test_client import kubeconfig


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=60, check=False, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_client_is_made_and_sends_without_loading_a_generated_model_or_api(tmp_path: Path) -> None:
    out = run(f"""
        import asyncio, sys
        from cdctl.k8s.client import api_client
        from cdctl.k8s.rest import KubeApi

        async def main():
            client = await api_client({kubeconfig(tmp_path, "https://127.0.0.1:9")!r})
            api = KubeApi(client, request_timeout_s=2)
            try:
                await api.get("/api/v1/nodes")
            except Exception as exc:
                print(type(exc).__name__)
            await client.close()

        asyncio.run(main())
        generated = [m for m in sys.modules if m.startswith(("kubernetes_asyncio.client.models.",
                                                              "kubernetes_asyncio.client.api."))]
        print(len(generated))
    """)  # fmt: skip
    assert out.splitlines() == ["TransportError", "0"]


def test_every_other_use_of_the_library_still_works() -> None:
    out = run("""
        import cdctl.k8s
        from kubernetes_asyncio.client import V1Pod, CoreV1Api, ApiClient
        from kubernetes_asyncio import watch, config
        import kubernetes_asyncio
        import kubernetes_asyncio.client.models as models
        print(V1Pod.__name__, CoreV1Api.__name__, watch.Watch.__name__, models.V1Node.__name__)
        from kubernetes_asyncio.client.api_client import ApiClient as Defined
        print(kubernetes_asyncio.__version__ > "0", ApiClient is Defined)
        print(hasattr(kubernetes_asyncio.client, "NoSuchThing"))
    """)
    assert out.splitlines() == ["V1Pod CoreV1Api Watch V1Node", "True True", "False"]


def test_a_library_already_imported_is_left_as_it_is() -> None:
    out = run("""
        import kubernetes_asyncio, sys
        from cdctl.k8s import library
        print(library.load(), "kubernetes_asyncio.client.models.v1_pod" in sys.modules)
    """)
    assert out.splitlines() == ["False True"]


def test_a_library_laid_out_otherwise_is_imported_the_usual_way() -> None:
    out = run("""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("library", "cdctl/k8s/library.py")
        library = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(library)  # alone: cdctl.k8s would load it first
        library.DEFERRED = (*library.DEFERRED, "kubernetes_asyncio.client.rest")  # a module, not a package
        print(library.load(), [m for m in sys.modules if m.startswith("kubernetes_asyncio")])
        from kubernetes_asyncio.client import V1Pod
        print(V1Pod.__name__)
    """)
    assert out.splitlines() == ["False []", "V1Pod"]
