"""Projections: pure folds over the event log, a runner that commits view and position together, replay."""
