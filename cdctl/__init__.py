"""cdctl: an event-sourced control plane for NVIDIA IMEX ComputeDomains on Kubernetes.

Layers (docs/architecture.md section 4) import downward only:
cli -> sim -> {controller, plugin, daemon} -> {projections, k8s} -> api -> store -> metrics -> domain.
"""

__version__ = "0.1.0"
