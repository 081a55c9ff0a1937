-- Custom domains need proof of control (issue 27): a binding is pending until
-- a DNS TXT record at _sandboxd-challenge.<hostname> holds its challenge, or an
-- admin bound it. Only a verified binding routes, and only a verified binding
-- is unique per hostname (the partial index): a pending claim holds nothing,
-- so several sandboxes, of several tenants, may claim one hostname, and
-- whoever proves control first gets it. Nobody can squat a hostname by
-- claiming it pending. Bindings from before this migration were never proven:
-- they become pending, each with a fresh challenge, and route again once
-- verified (or bound again by an admin).
CREATE TABLE sandbox_custom_domains_v2 (
	hostname    TEXT    NOT NULL COLLATE NOCASE CHECK (hostname <> ''),
	sandbox_id  TEXT    NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	port        INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
	created_at  INTEGER NOT NULL,
	-- Random per call that put or verified the binding: fences the undo.
	token       INTEGER NOT NULL DEFAULT 0,
	-- The value the TXT record must hold; random per binding.
	challenge   TEXT    NOT NULL CHECK (challenge <> ''),
	-- 0 while pending; when it was verified (TXT record or admin).
	verified_at INTEGER NOT NULL DEFAULT 0,
	-- The periodic check looks a pending claim up until then.
	retry_until INTEGER NOT NULL DEFAULT 0,
	checked_at  INTEGER NOT NULL DEFAULT 0,
	last_error  TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (hostname, sandbox_id)
) STRICT;

INSERT INTO sandbox_custom_domains_v2 (hostname, sandbox_id, port, created_at, token, challenge)
	SELECT hostname, sandbox_id, port, created_at, token, lower(hex(randomblob(16))) FROM sandbox_custom_domains;

DROP TABLE sandbox_custom_domains;
ALTER TABLE sandbox_custom_domains_v2 RENAME TO sandbox_custom_domains;

CREATE INDEX sandbox_custom_domains_sandbox ON sandbox_custom_domains (sandbox_id);
CREATE UNIQUE INDEX sandbox_custom_domains_verified ON sandbox_custom_domains (hostname) WHERE verified_at > 0;
CREATE INDEX sandbox_custom_domains_pending ON sandbox_custom_domains (checked_at) WHERE verified_at = 0;
