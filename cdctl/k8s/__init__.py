"""The only package that imports kubernetes_asyncio: clients, list+watch loops, API version discovery.

The library is made importable without its generated models first (cdctl.k8s.library), before any module
here imports it.
"""

from cdctl.k8s import library

library.load()
