"""The simulated cluster behind `cdctl sim` and the integration tests, laid out as the real parts it stands in
for.

- `apiserver/`: kube-apiserver (REST and watch over loopback HTTP, admission, RBAC, CRDs, conversion).
- `controllers/`: kube-scheduler and kube-controller-manager (DRA allocator, claim templates, DaemonSets,
Jobs). - `node/`: a GPU node (kubelet, container runtime, fork server, CDI resolution, fake driver, NVML and
IMEX). - `rack/`: the operator running a scenario (`SimCluster`, the component processes, `cdctl sim rack`).

Layers: `rack -> {controllers, node} -> apiserver`, enforced by an import-linter contract (pyproject.toml).
A real part's rule belongs in the subpackage of that part.
"""
