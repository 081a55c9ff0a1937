-- Issue 12: a create without an Idempotency-Key is tracked until its answer
-- reaches its client. Two new claim states (SQLite cannot alter a CHECK, so
-- the table is rebuilt; it holds only claims, never sandboxes):
--   inflight    a create whose client is, as far as we know, still waiting;
--               nobody else may wait on it or adopt it.
--   undelivered a create whose client went away before the answer reached
--               it; an identical create may adopt it until replay_until, after
--               which it is destroyed.
-- window_ms is how long such a row stays adoptable once undelivered, kept on
-- the row so that a restart (which turns every inflight row of the dead
-- process into an undelivered one) needs no configuration to know it.
CREATE TABLE request_idempotency_v6 (
	scope        TEXT    NOT NULL,
	fingerprint  TEXT    NOT NULL,
	state        TEXT    NOT NULL CHECK (state IN ('pending', 'ready', 'inflight', 'undelivered')),
	-- Random per claim: fences Complete and Delete against a caller whose lock expired.
	token        INTEGER NOT NULL,
	request_hash TEXT    NOT NULL DEFAULT '',
	locked_until INTEGER NOT NULL DEFAULT 0,
	replay_until INTEGER NOT NULL DEFAULT 0,
	target_id    TEXT    NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL,
	window_ms    INTEGER NOT NULL DEFAULT 0 CHECK (window_ms >= 0),
	PRIMARY KEY (scope, fingerprint),
	CHECK (state = 'pending' OR target_id <> '')
) STRICT, WITHOUT ROWID;

INSERT INTO request_idempotency_v6
	(scope, fingerprint, state, token, request_hash, locked_until, replay_until, target_id, created_at)
	SELECT scope, fingerprint, state, token, request_hash, locked_until, replay_until, target_id, created_at
	FROM request_idempotency;
DROP TABLE request_idempotency;
ALTER TABLE request_idempotency_v6 RENAME TO request_idempotency;
-- The expiry's list (ListExpiredUndelivered) reads only undelivered rows,
-- which are few; keyed claims (replayable for 24 h) may be many.
CREATE INDEX request_idempotency_undelivered ON request_idempotency (replay_until) WHERE state = 'undelivered';
