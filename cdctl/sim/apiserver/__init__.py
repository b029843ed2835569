"""The kube-apiserver stand-in: the Kubernetes REST and watch protocol over HTTP on loopback.

`server.ApiServer` is the entry point (`async with ApiServer() as s`, `s.url`, `s.write_kubeconfig(path)`,
`s.faults`, `s.drop_watches()`, `await s.restart()`); `s.store` is the in-process `store.ObjectStore` the
other stand-ins use; `s.rbac.load(objects)` enforces Roles and bindings for clients with a service-account
token. Admission, RBAC, CRDs, version conversion, selectors, patches and watches live here, as they do in the
real server. Imports nothing else of the simulator.
"""
