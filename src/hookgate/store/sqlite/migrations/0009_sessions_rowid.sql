-- hookgate: foreign keys off
--
-- Sessions move from a WITHOUT ROWID table keyed by the session key to an ordinary rowid table (the
-- key stays the primary key, now a unique index), as migration 5 did for runs. An agent hook
-- without a sessionKey makes a session `hook:<uuid-v4>`: a random key, so every new session row
-- went to a random leaf of the table's B-tree, and its later updates (last channel and target) to
-- that leaf again. Now rows append in creation order and only the small index entry lands at random.
-- Measured on /hooks/agent with the embedded worker: 38.5 → 27.4 KiB written to disk per request.
--
-- system_events, runs and transcript_messages reference sessions. Dropping a parent table with
-- foreign keys on deletes its rows first (cascading to events and transcripts, failing on runs),
-- so this migration runs with foreign keys off — SQLite's documented way to rebuild a table
-- (https://www.sqlite.org/lang_altertable.html, "Making Other Kinds Of Table Schema Changes") —
-- and the runner checks every reference (PRAGMA foreign_key_check) before it commits.

CREATE TABLE sessions_rowid (
    key           TEXT PRIMARY KEY,
    agent_id      TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    spawned_by    TEXT,
    last_channel  TEXT,
    last_to       TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

INSERT INTO sessions_rowid (key, agent_id, session_id, spawned_by, last_channel, last_to, created_at, updated_at)
SELECT key, agent_id, session_id, spawned_by, last_channel, last_to, created_at, updated_at
FROM sessions ORDER BY created_at, key;

DROP TABLE sessions;
ALTER TABLE sessions_rowid RENAME TO sessions;

CREATE INDEX sessions_agent ON sessions (agent_id);
CREATE INDEX sessions_spawned_by ON sessions (spawned_by) WHERE spawned_by IS NOT NULL;
