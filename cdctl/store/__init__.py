"""The event store: append-only SQLite log with a single writer task, hash chain, notifier and snapshots."""
