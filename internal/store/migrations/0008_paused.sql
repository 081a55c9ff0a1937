-- sandboxd:foreign_keys=off
-- A sandbox can be paused: its processes frozen in memory (the engine's
-- cgroup freezer), its capacity still held, its timeout not running. A new
-- state, so the CHECK changes, and SQLite cannot alter a CHECK: the table
-- is rebuilt by SQLite's documented procedure (foreign keys off for the
-- migration, which the runner sets on its connection because of the first
-- line, and foreign_key_check before the commit), keeping every row, index
-- and the other tables' references to it. paused_at is when the sandbox
-- was paused (NULL unless paused): the background loop stops a sandbox
-- paused for longer than --pause-max.
CREATE TABLE sandboxes_v8 (
	id                 TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
	name               TEXT    NOT NULL DEFAULT '',
	owner              TEXT    NOT NULL DEFAULT '',
	image              TEXT    NOT NULL,
	state              TEXT    NOT NULL CHECK (state IN ('creating', 'running', 'paused', 'stopping', 'stopped', 'error')),
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
	error_reason       TEXT    NOT NULL DEFAULT '',
	destroying_since   INTEGER,
	boot_token_sealed  BLOB,
	paused_at          INTEGER,
	CHECK ((state = 'paused') = (paused_at IS NOT NULL))
) STRICT;

INSERT INTO sandboxes_v8 (id, name, owner, image, state, cpu_millis, memory_mb, tags, env,
	sealed_secrets, spec, agent_token_sealed, ssh_public_key, node_id, created_at, updated_at,
	expires_at, error_reason, destroying_since, boot_token_sealed)
	SELECT id, name, owner, image, state, cpu_millis, memory_mb, tags, env,
	sealed_secrets, spec, agent_token_sealed, ssh_public_key, node_id, created_at, updated_at,
	expires_at, error_reason, destroying_since, boot_token_sealed
	FROM sandboxes;
DROP TABLE sandboxes;
ALTER TABLE sandboxes_v8 RENAME TO sandboxes;

CREATE UNIQUE INDEX sandboxes_owner_name ON sandboxes (owner, name) WHERE name <> '';
CREATE INDEX sandboxes_created ON sandboxes (created_at, id);
CREATE INDEX sandboxes_owner_created ON sandboxes (owner, created_at, id);
CREATE INDEX sandboxes_expires ON sandboxes (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX sandboxes_state ON sandboxes (state, created_at);
