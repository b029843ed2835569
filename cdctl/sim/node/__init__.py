"""A simulated GPU node: the kubelet (plugin registration, DRA calls over the real gRPC sockets, pod status),
the container runtime (`processruntime`, `daemonruntime`, the fork server, CDI resolution), the GPU driver's
files (`fakedriver`), the fake NVLink topology and NVML (`topology`) and the fake `nvidia-imex` /
`nvidia-imex-ctl` (`fakeimex`, `fakeimexctl`).

Talks to the API server stand-in (cdctl.sim.apiserver) only; never to the scheduler or controller stand-ins.
"""
