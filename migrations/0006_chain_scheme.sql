-- 0006: how the hash chain is computed, and the hash each snapshot was taken at (architecture.md section 2).
-- One row: 'sha256' (unkeyed) or 'hmac-sha256' (keyed) after position keyed_from; key_check identifies the
-- key (an HMAC of a fixed message) so a wrong key is told apart from an edited log. Every log written before
-- this migration was unkeyed. The row may change once, from unkeyed to keyed, and is never deleted.
CREATE TABLE chain_scheme (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    scheme      TEXT    NOT NULL CHECK (scheme IN ('sha256', 'hmac-sha256')),
    keyed_from  INTEGER NOT NULL DEFAULT 0,
    key_check   TEXT    NOT NULL DEFAULT '',
    changed_at  TEXT    NOT NULL DEFAULT ''
);
INSERT INTO chain_scheme (id, scheme) VALUES (1, 'sha256');
CREATE TRIGGER chain_scheme_is_never_deleted BEFORE DELETE ON chain_scheme
BEGIN SELECT RAISE(ABORT, 'chain_scheme: DELETE refused'); END;
CREATE TRIGGER chain_scheme_is_keyed_once BEFORE UPDATE ON chain_scheme WHEN OLD.scheme <> 'sha256'
BEGIN SELECT RAISE(ABORT, 'chain_scheme: a keyed log stays keyed'); END;

-- The chain's hash at the snapshot's position: at open the chain is checked from there to the end.
-- Snapshots taken before this migration have '' and are not used as a starting point.
ALTER TABLE snapshots ADD COLUMN hash TEXT NOT NULL DEFAULT '';
