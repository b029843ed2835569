-- 0001: the event log (architecture.md section 2, requirements 1-3).
-- position is assigned by the single writer as last + 1, so it is gapless; UNIQUE(stream, version) backs
-- optimistic concurrency; the triggers make the table append-only for normal operation.
PRAGMA application_id = 1667523444;  -- 'cdct': marks the file as a cdctl event log

CREATE TABLE events (
    position       INTEGER PRIMARY KEY,
    stream         TEXT    NOT NULL,
    version        INTEGER NOT NULL CHECK (version >= 1),
    type           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL CHECK (schema_version >= 1),
    data           TEXT    NOT NULL,
    metadata       TEXT    NOT NULL,
    recorded_at    TEXT    NOT NULL,
    hash           TEXT    NOT NULL,
    UNIQUE (stream, version)
);
CREATE INDEX events_by_recorded_at ON events (recorded_at);

CREATE TRIGGER events_are_never_updated BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only: UPDATE refused'); END;
CREATE TRIGGER events_are_never_deleted BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE refused'); END;
