-- 0002: deduplication of watch-derived events (requirement 8).
-- One row per (object uid, resourceVersion) recorded; a re-list or re-delivered watch event finds its row.
CREATE TABLE observed_versions (
    uid              TEXT    NOT NULL,
    resource_version TEXT    NOT NULL,
    position         INTEGER NOT NULL REFERENCES events (position),
    PRIMARY KEY (uid, resource_version)
) WITHOUT ROWID;
