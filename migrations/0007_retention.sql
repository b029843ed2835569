-- 0007: retention (architecture.md section 2, requirement 1). Compaction removes the oldest events as an
-- explicit, logged operation that keeps a snapshot; normal operation still cannot delete an event.

-- One row per compaction, written in the transaction that appends its LogCompactionStarted event (at
-- record_position, which mirrors this row): events first_position..horizon are removed; anchor_hash is the
-- hash of event `horizon`, the link the first kept event is checked against; horizon_recorded_at is the
-- latest recorded_at among the removed events; snapshot_digest covers the horizon snapshots kept with it.
-- Rows are never deleted; completed_at is set once, when the removal is done.
CREATE TABLE compactions (
    record_position     INTEGER PRIMARY KEY,
    first_position      INTEGER NOT NULL,
    horizon             INTEGER NOT NULL,
    anchor_hash         TEXT    NOT NULL,
    horizon_recorded_at TEXT    NOT NULL,
    reason              TEXT    NOT NULL,
    snapshot_digest     TEXT    NOT NULL,
    started_at          TEXT    NOT NULL,
    completed_at        TEXT    NOT NULL DEFAULT ''
);
CREATE TRIGGER compactions_are_never_deleted BEFORE DELETE ON compactions
BEGIN SELECT RAISE(ABORT, 'compactions: DELETE refused'); END;
CREATE TRIGGER compactions_complete_once BEFORE UPDATE ON compactions
WHEN OLD.completed_at <> '' OR NEW.record_position IS NOT OLD.record_position
  OR NEW.first_position IS NOT OLD.first_position OR NEW.horizon IS NOT OLD.horizon
  OR NEW.anchor_hash IS NOT OLD.anchor_hash OR NEW.horizon_recorded_at IS NOT OLD.horizon_recorded_at
  OR NEW.reason IS NOT OLD.reason OR NEW.snapshot_digest IS NOT OLD.snapshot_digest
  OR NEW.started_at IS NOT OLD.started_at
BEGIN SELECT RAISE(ABORT, 'compactions: a record only gets its completion time, once'); END;

-- The state of each projection at the latest horizon (its view, as a snapshot): where a process resumes and
-- where `cdctl replay` and `cdctl verify` start folding. Replaced by each compaction.
CREATE TABLE horizon_snapshots (
    name     TEXT    PRIMARY KEY,
    position INTEGER NOT NULL,
    state    TEXT    NOT NULL
);

-- The last version of each stream whose events were all removed, so versions continue and are never reused.
CREATE TABLE stream_versions (
    stream   TEXT    PRIMARY KEY,
    version  INTEGER NOT NULL,
    position INTEGER NOT NULL
) WITHOUT ROWID;

-- The privileged path: the single writer inserts a grant, deletes a bounded batch of events at or below it,
-- and deletes the grant, in one transaction; no other transaction ever sees a grant. A grant can only cover
-- positions a compaction record already names.
CREATE TABLE compaction_grant (
    upto INTEGER NOT NULL
);
CREATE TRIGGER compaction_grant_needs_a_record BEFORE INSERT ON compaction_grant
WHEN NEW.upto > COALESCE((SELECT MAX(horizon) FROM compactions), 0)
BEGIN SELECT RAISE(ABORT, 'compaction_grant: no compaction record covers these positions'); END;

DROP TRIGGER events_are_never_deleted;
CREATE TRIGGER events_are_never_deleted BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM compaction_grant WHERE OLD.position <= upto)
BEGIN SELECT RAISE(ABORT, 'events are append-only: DELETE refused (only a recorded compaction removes events)'); END;

-- Compaction removes the observations of removed events by position (keeping each live object's latest).
CREATE INDEX observed_versions_by_position ON observed_versions (position);
