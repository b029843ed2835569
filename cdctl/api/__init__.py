"""API models: ComputeDomain CRD and opaque device-config models with validation; feature gates."""
