-- A user token bounds what its owner may hold at once: running sandboxes,
-- their CPU (millicores) and their memory (MB). 0 is unlimited, which is
-- what every token from before this migration gets (and admins always
-- are, whatever is stored).
ALTER TABLE api_tokens ADD COLUMN quota_sandboxes INTEGER NOT NULL DEFAULT 0 CHECK (quota_sandboxes >= 0);
ALTER TABLE api_tokens ADD COLUMN quota_milli_cpu INTEGER NOT NULL DEFAULT 0 CHECK (quota_milli_cpu >= 0);
ALTER TABLE api_tokens ADD COLUMN quota_memory_mb INTEGER NOT NULL DEFAULT 0 CHECK (quota_memory_mb >= 0);
