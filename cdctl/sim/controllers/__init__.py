"""Stand-ins for kube-scheduler and kube-controller-manager: the DRA allocator and pod placement, the
ResourceClaim-from-template controller, the DaemonSet and Job controllers, and the loop that runs them.

Each talks to the API server stand-in's store in process (cdctl.sim.apiserver) and to nothing else.
"""
