"""cdctl: an event-sourced control plane for NVIDIA IMEX ComputeDomains on Kubernetes.

Layers (architecture.md section 4) import downward only:
cli -> {controller, plugin, daemon, sim} -> {projections, k8s} -> api -> store -> domain.
"""

__version__ = "0.1.0"
