-- 0004: the read models behind `cdctl sql` (architecture.md section 2, "Read-only SQL views").
-- Written only by the projection runner; each row carries the log position that last changed it.
CREATE TABLE claim_lifecycle (
    claim_uid     TEXT PRIMARY KEY,
    namespace     TEXT NOT NULL DEFAULT '',
    name          TEXT NOT NULL DEFAULT '',
    domain_uid    TEXT NOT NULL DEFAULT '',
    node          TEXT NOT NULL DEFAULT '',
    kind          TEXT NOT NULL DEFAULT '',
    state         TEXT NOT NULL,
    requested_at  TEXT,
    prepared_at   TEXT,
    unprepared_at TEXT,
    outcome       TEXT NOT NULL DEFAULT '',
    last_error    TEXT NOT NULL DEFAULT '',
    position      INTEGER NOT NULL
);
CREATE TABLE channel_allocations (
    node         TEXT    NOT NULL,
    channel      INTEGER NOT NULL,
    claim_uid    TEXT    NOT NULL,
    domain_uid   TEXT    NOT NULL DEFAULT '',
    allocated_at TEXT    NOT NULL,
    released_at  TEXT,
    position     INTEGER NOT NULL,
    PRIMARY KEY (node, channel, claim_uid)
);
CREATE TABLE checkpoint_transitions (
    position   INTEGER PRIMARY KEY,
    claim_uid  TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    at         TEXT NOT NULL,
    reason     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX checkpoint_transitions_by_claim ON checkpoint_transitions (claim_uid);
CREATE TABLE domain_history (
    position   INTEGER PRIMARY KEY,
    domain_uid TEXT NOT NULL,
    namespace  TEXT NOT NULL DEFAULT '',
    name       TEXT NOT NULL DEFAULT '',
    type       TEXT NOT NULL,
    at         TEXT NOT NULL,
    detail     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX domain_history_by_domain ON domain_history (domain_uid);
