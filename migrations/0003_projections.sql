-- 0003: projection tracking and snapshots.
-- A projection's view rows and its tracked position commit in one transaction (exactly-once).
-- Snapshots are caches of a projection's whole state at a position, always rebuildable from the log.
CREATE TABLE projection_positions (
    name     TEXT PRIMARY KEY,
    position INTEGER NOT NULL
);
CREATE TABLE snapshots (
    name       TEXT    NOT NULL,
    position   INTEGER NOT NULL,
    state      TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    PRIMARY KEY (name, position)
);
