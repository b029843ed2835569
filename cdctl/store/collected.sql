-- A collected file (`cdctl collect`, docs/collect.md): the event logs of many components in one SQLite file,
-- every event with its source and its original position and hash. Schema version 1 (PRAGMA user_version).
PRAGMA application_id = 1667523427;  -- 'cdcc': a cdctl collected file (an event log is 'cdct')

-- One row per `cdctl collect` run into this file, with how it was narrowed and how it ended.
CREATE TABLE collections (
    id          INTEGER PRIMARY KEY,
    started_at  TEXT    NOT NULL,
    finished_at TEXT,
    server      TEXT    NOT NULL DEFAULT '',       -- the API server it went through
    namespace   TEXT    NOT NULL,                  -- the driver namespace
    since       TEXT    NOT NULL DEFAULT '',       -- --since (applies to sources first seen in this run)
    domains     TEXT    NOT NULL DEFAULT '[]',     -- --domain uids (JSON list); [] = every domain
    nodes       TEXT    NOT NULL DEFAULT '[]',     -- --node names (JSON list); [] = every node
    outcome     TEXT    NOT NULL DEFAULT 'running' -- running | complete | partial (a source skipped or cut)
);

-- One row per log: a component's log, or a new generation of it when its log was recreated.
CREATE TABLE sources (
    id             INTEGER PRIMARY KEY,
    name           TEXT    NOT NULL UNIQUE, -- controller/<pod>, kubelet-plugin/<node>, daemon/<node>/<domain uid>,
                                            -- with #<generation> from the second generation on
    component      TEXT    NOT NULL,        -- controller | kubelet-plugin | daemon
    node           TEXT    NOT NULL DEFAULT '',
    pod            TEXT    NOT NULL DEFAULT '', -- the pod it was last collected through
    log            TEXT    NOT NULL,        -- its name on the component's endpoint (controller, plugin, daemon/<uid>)
    domain_uid     TEXT    NOT NULL DEFAULT '',
    generation     INTEGER NOT NULL DEFAULT 1,
    scheme         TEXT    NOT NULL DEFAULT 'sha256', -- its chain: sha256, or hmac-sha256 after keyed_from
    keyed_from     INTEGER NOT NULL DEFAULT 0,
    key_check      TEXT    NOT NULL DEFAULT '',       -- identifies its key (HMAC of a fixed message)
    first_position INTEGER,                           -- the first event its log held when first collected
    first_hash     TEXT
);

-- Contiguous runs of a source's events, each chained to the hash the source gave for the event before it.
CREATE TABLE ranges (
    source_id      INTEGER NOT NULL REFERENCES sources (id),
    first_position INTEGER NOT NULL,
    last_position  INTEGER NOT NULL,
    anchor_hash    TEXT,    -- hash of first_position - 1 (64 zeros before 1); NULL: the source no longer held it
    PRIMARY KEY (source_id, first_position)
);

-- What each run did with each source, and the heads the component published when it was read.
CREATE TABLE fetches (
    id                 INTEGER PRIMARY KEY,
    collection_id      INTEGER NOT NULL REFERENCES collections (id),
    source_id          INTEGER REFERENCES sources (id), -- NULL: the pod (or its log list) could not be read
    component          TEXT    NOT NULL,
    node               TEXT    NOT NULL DEFAULT '',
    pod                TEXT    NOT NULL DEFAULT '',
    log                TEXT    NOT NULL DEFAULT '',
    status             TEXT    NOT NULL, -- ok | skipped (not read: see error) | cut (stream ended early)
    error              TEXT    NOT NULL DEFAULT '',
    after_position     INTEGER NOT NULL DEFAULT 0, -- asked for events after this position
    events             INTEGER NOT NULL DEFAULT 0, -- how many this run stored
    head_position      INTEGER, -- the log's head when served: the stream ends there
    head_hash          TEXT,
    published_position INTEGER, -- cdctl_event_log_head_info in the component's metrics, read just before
    published_hash     TEXT,
    fetched_at         TEXT    NOT NULL
);

-- The events, as their source stored them (data and metadata are the stored JSON text).
CREATE TABLE source_events (
    source_id      INTEGER NOT NULL REFERENCES sources (id),
    position       INTEGER NOT NULL,
    stream         TEXT    NOT NULL,
    version        INTEGER NOT NULL,
    type           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    data           TEXT    NOT NULL,
    metadata       TEXT    NOT NULL,
    recorded_at    TEXT    NOT NULL,
    hash           TEXT    NOT NULL,
    PRIMARY KEY (source_id, position)
) WITHOUT ROWID;
CREATE INDEX source_events_by_recorded_at ON source_events (recorded_at);
CREATE INDEX source_events_by_stream ON source_events (stream);
CREATE TRIGGER source_events_are_never_updated BEFORE UPDATE ON source_events
BEGIN SELECT RAISE(ABORT, 'collected events are append-only: UPDATE refused'); END;
CREATE TRIGGER source_events_are_never_deleted BEFORE DELETE ON source_events
BEGIN SELECT RAISE(ABORT, 'collected events are append-only: DELETE refused'); END;

-- The horizon snapshots a compacted source served with a run that starts at its horizon (schema 2): the
-- views of its projections after event `position`, whose events the source no longer holds. The read models
-- of a source whose runs do not reach back to its first event fold from here (cdctl.projections.collected).
-- snapshot_digest is the one the source's LogCompactionStarted at record_position recorded in its chain.
CREATE TABLE source_horizons (
    source_id       INTEGER NOT NULL REFERENCES sources (id),
    position        INTEGER NOT NULL, -- the horizon: the last event compaction removed
    record_position INTEGER NOT NULL, -- its LogCompactionStarted event
    anchor_hash     TEXT    NOT NULL,
    recorded_at     TEXT    NOT NULL, -- the latest recorded_at among the removed events
    snapshot_digest TEXT    NOT NULL,
    name            TEXT    NOT NULL, -- the projection
    state           TEXT    NOT NULL, -- its view, encoded as the source stored it
    PRIMARY KEY (source_id, position, name)
);

-- Every event with its source's name, component and node: what `cdctl sql` and `cdctl events` read.
CREATE VIEW events AS
SELECT s.name AS source, s.component AS component, s.node AS node, e.source_id AS source_id,
       e.position, e.stream, e.version, e.type, e.schema_version, e.data, e.metadata, e.recorded_at, e.hash
FROM source_events AS e JOIN sources AS s ON s.id = e.source_id;

-- The read models (claim_lifecycle, channel_allocations, checkpoint_transitions, domain_history) are made by
-- cdctl.projections.collected: each the event log's table with a leading `source` column.
