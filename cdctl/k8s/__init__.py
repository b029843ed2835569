"""The only package that imports kubernetes_asyncio: clients, list+watch loops, API version discovery."""
