"""The only package that imports kubernetes_asyncio: clients, list+watch loops that become events, API discovery."""
