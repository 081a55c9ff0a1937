-- A sandbox's lifecycle rules live on its row, and the daemon's background
-- loop applies them (service.Lifecycle), so they survive a restart:
--
--   auto_stop_ms     a running sandbox idle this long (since last_activity_at) is stopped; 0: never
--   auto_delete_ms   a stopped sandbox is destroyed this long after stopped_at; 0: at the stop; -1: never
--   auto_archive_ms  a stopped sandbox is archived (archived_at) this long after stopped_at; 0: never
--
-- last_activity_at is the last activity of a running sandbox (its start,
-- a change of its rules, a toolbox call), stopped_at when it last stopped
-- (NULL unless stopped), archived_at when it was archived (NULL unless
-- stopped and archived).
ALTER TABLE sandboxes ADD COLUMN auto_stop_ms INTEGER NOT NULL DEFAULT 0 CHECK (auto_stop_ms >= 0);
ALTER TABLE sandboxes ADD COLUMN auto_delete_ms INTEGER NOT NULL DEFAULT -1 CHECK (auto_delete_ms >= -1);
ALTER TABLE sandboxes ADD COLUMN auto_archive_ms INTEGER NOT NULL DEFAULT 0 CHECK (auto_archive_ms >= 0);
ALTER TABLE sandboxes ADD COLUMN last_activity_at INTEGER;
ALTER TABLE sandboxes ADD COLUMN stopped_at INTEGER;
ALTER TABLE sandboxes ADD COLUMN archived_at INTEGER;

UPDATE sandboxes SET last_activity_at = updated_at WHERE state IN ('running', 'paused');
UPDATE sandboxes SET stopped_at = updated_at WHERE state = 'stopped';

-- Before this migration the Daytona facade kept these rules as reserved
-- tags (minutes) and honoured them through the sandbox's expiry: a running
-- sandbox with auto-stop expired auto-stop (+ auto-delete) minutes after
-- its last activity; a stopped one auto-delete minutes after its stop.
-- They become the columns above; the activity a running sandbox's expiry
-- counted from becomes its last_activity_at; the expiry the facade set is
-- cleared (the rules replace it) and the reserved tags are dropped.
UPDATE sandboxes SET
	auto_stop_ms = max(0, coalesce(CAST(json_extract(tags, '$."daytona/auto-stop"') AS INTEGER), 0)) * 60000,
	-- Only a whole number of minutes counts (the facade read anything else
	-- as never): text that is not one must not become 0, "at the stop".
	auto_delete_ms = CASE
		WHEN CAST(CAST(json_extract(tags, '$."daytona/auto-delete"') AS INTEGER) AS TEXT) = json_extract(tags, '$."daytona/auto-delete"')
			AND CAST(json_extract(tags, '$."daytona/auto-delete"') AS INTEGER) >= 0
		THEN CAST(json_extract(tags, '$."daytona/auto-delete"') AS INTEGER) * 60000 ELSE -1 END,
	-- Daytona's default is 7 days; 0 means its maximum, 30 days.
	auto_archive_ms = CASE coalesce(CAST(json_extract(tags, '$."daytona/auto-archive"') AS INTEGER), 10080)
		WHEN 0 THEN 43200 ELSE min(43200, max(0, coalesce(CAST(json_extract(tags, '$."daytona/auto-archive"') AS INTEGER), 10080))) END * 60000,
	stopped_at = CASE WHEN state = 'stopped'
		THEN coalesce(CAST(json_extract(tags, '$."daytona/stopped-at"') AS INTEGER) * 1000, updated_at) END,
	archived_at = CASE WHEN state = 'stopped' AND json_extract(tags, '$."daytona/archived"') = 'true' THEN updated_at END
WHERE json_extract(tags, '$."daytona/auto-stop"') IS NOT NULL
	OR json_extract(tags, '$."daytona/auto-delete"') IS NOT NULL;

UPDATE sandboxes SET last_activity_at = expires_at - (auto_stop_ms + max(auto_delete_ms, 0))
WHERE state = 'running' AND auto_stop_ms > 0 AND expires_at IS NOT NULL
	AND (json_extract(tags, '$."daytona/auto-stop"') IS NOT NULL OR json_extract(tags, '$."daytona/auto-delete"') IS NOT NULL);

UPDATE sandboxes SET expires_at = NULL
WHERE json_extract(tags, '$."daytona/auto-stop"') IS NOT NULL OR json_extract(tags, '$."daytona/auto-delete"') IS NOT NULL;

UPDATE sandboxes SET tags = json_remove(tags, '$."daytona/auto-stop"', '$."daytona/auto-delete"',
	'$."daytona/auto-archive"', '$."daytona/archived"', '$."daytona/stopped-at"')
WHERE tags LIKE '%daytona/%';

-- The background loop's questions: which running sandboxes are idle, which
-- stopped ones are due for deletion or archiving.
CREATE INDEX sandboxes_auto_stop ON sandboxes (state, last_activity_at) WHERE auto_stop_ms > 0;
CREATE INDEX sandboxes_stopped ON sandboxes (state, stopped_at) WHERE auto_delete_ms >= 0 OR auto_archive_ms > 0;
