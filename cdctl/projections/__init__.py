"""Projections: pure folds over the event log, a runner that commits view and position together, replay.

- `base`: the Projection contract (fold: view, event -> changes) and Change.
- `lifecycle`: claim_lifecycle, channel_allocations, checkpoint_transitions, domain_history.
- `runner`: ProjectionRunner (resume from tracked position + snapshot, exactly-once commits, follow).
- `sinks`: where views live (the SQLite log file, or memory).
- `replay`: the same folds in memory up to a position or an instant, and the verification of a log.
"""
