-- 0002: deduplication of watch-derived events (requirement 8).
-- One row per (object uid, resourceVersion) recorded; a re-list or re-delivered watch event finds its row.
CREATE TABLE observed_versions (
    uid              TEXT    NOT NULL,
    resource_version TEXT    NOT NULL,
    position         INTEGER NOT NULL,  -- the event it produced (kept even if that event is ever compacted)
    PRIMARY KEY (uid, resource_version)
) WITHOUT ROWID;
