"""cdctl daemon: per-ComputeDomain nvidia-imex supervision, clique membership, readiness check."""
