-- 0001_init: the initial schema. Never edit this file once shipped; add 0002_….sql instead.
--
-- Every uniqueness rule of the domain is a key or a (partial) unique index here, so the code
-- proposes a row and SQLite decides. Times are unix milliseconds. Tables are STRICT, so a
-- value of the wrong type is rejected instead of silently stored.

CREATE TABLE sandboxes (
	id                 TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
	name               TEXT    NOT NULL DEFAULT '',
	owner              TEXT    NOT NULL DEFAULT '',
	image              TEXT    NOT NULL,
	state              TEXT    NOT NULL CHECK (state IN ('creating', 'running', 'stopping', 'stopped', 'error')),
	cpu_millis         INTEGER NOT NULL DEFAULT 0 CHECK (cpu_millis >= 0),
	memory_mb          INTEGER NOT NULL DEFAULT 0 CHECK (memory_mb >= 0),
	tags               TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(tags)),
	env                TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(env)),
	sealed_secrets     BLOB,
	spec               TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(spec)),
	agent_token_sealed BLOB,
	ssh_public_key     TEXT    NOT NULL DEFAULT '',
	node_id            TEXT    NOT NULL DEFAULT '',
	created_at         INTEGER NOT NULL,
	updated_at         INTEGER NOT NULL,
	expires_at         INTEGER,
	error_reason       TEXT    NOT NULL DEFAULT ''
) STRICT;

-- Names are optional; a non-empty name is unique on this node.
CREATE UNIQUE INDEX sandboxes_name ON sandboxes (name) WHERE name <> '';
-- Keyset paging orders by (created_at, id).
CREATE INDEX sandboxes_created ON sandboxes (created_at, id);
CREATE INDEX sandboxes_owner_created ON sandboxes (owner, created_at, id);
-- The reaper and the reconciler.
CREATE INDEX sandboxes_expires ON sandboxes (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX sandboxes_state ON sandboxes (state, created_at);

CREATE TABLE exposed_ports (
	sandbox_id  TEXT    NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	port        INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
	protocol    TEXT    NOT NULL CHECK (protocol IN ('http', 'tcp', 'tls')),
	-- 0 means "no host port" (HTTP, and TLS routed by SNI).
	host_port   INTEGER NOT NULL DEFAULT 0 CHECK (host_port BETWEEN 0 AND 65535),
	public      INTEGER NOT NULL DEFAULT 0 CHECK (public IN (0, 1)),
	-- Random per insert: lets the inserting call delete exactly its own row (no ABA).
	reservation INTEGER NOT NULL,
	created_at  INTEGER NOT NULL,
	PRIMARY KEY (sandbox_id, port),
	CHECK (protocol <> 'http' OR host_port = 0),
	CHECK (protocol <> 'tcp' OR host_port > 0)
) STRICT;

CREATE UNIQUE INDEX exposed_ports_host_port ON exposed_ports (host_port) WHERE host_port > 0;

-- No foreign key: a slot is allocated before the sandbox row exists (create chain step 8
-- precedes step 10). The reconciler frees slots whose sandbox is gone.
CREATE TABLE firecracker_tap_pool (
	slot         INTEGER NOT NULL PRIMARY KEY CHECK (slot >= 0),
	sandbox_id   TEXT CHECK (sandbox_id IS NULL OR sandbox_id <> ''),
	allocated_at INTEGER
) STRICT;

CREATE UNIQUE INDEX firecracker_tap_pool_sandbox ON firecracker_tap_pool (sandbox_id) WHERE sandbox_id IS NOT NULL;

CREATE TABLE sandbox_custom_domains (
	hostname   TEXT    NOT NULL COLLATE NOCASE PRIMARY KEY CHECK (hostname <> ''),
	sandbox_id TEXT    NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
	created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX sandbox_custom_domains_sandbox ON sandbox_custom_domains (sandbox_id);

CREATE TABLE request_idempotency (
	scope        TEXT    NOT NULL,
	fingerprint  TEXT    NOT NULL,
	state        TEXT    NOT NULL CHECK (state IN ('pending', 'ready')),
	-- Random per claim: fences Complete and Delete against a caller whose lock expired.
	token        INTEGER NOT NULL,
	request_hash TEXT    NOT NULL DEFAULT '',
	locked_until INTEGER NOT NULL DEFAULT 0,
	replay_until INTEGER NOT NULL DEFAULT 0,
	target_id    TEXT    NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL,
	PRIMARY KEY (scope, fingerprint),
	CHECK (state = 'pending' OR target_id <> '')
) STRICT, WITHOUT ROWID;

CREATE TABLE api_tokens (
	id            TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
	secret_sha256 BLOB    NOT NULL UNIQUE CHECK (length(secret_sha256) = 32),
	name          TEXT    NOT NULL DEFAULT '',
	role          TEXT    NOT NULL CHECK (role IN ('admin', 'user')),
	owner         TEXT    NOT NULL DEFAULT '',
	created_at    INTEGER NOT NULL,
	revoked_at    INTEGER
) STRICT;

CREATE TABLE sandbox_mounts (
	sandbox_id  TEXT    NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	idx         INTEGER NOT NULL CHECK (idx >= 0),
	sealed_spec BLOB    NOT NULL,
	PRIMARY KEY (sandbox_id, idx)
) STRICT;
