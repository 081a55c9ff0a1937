-- A user token bounds the disk its owner's sandboxes may hold together too:
-- the sum of their disk limits (MiB). 0 is unlimited, which is what every
-- token from before this migration gets.
ALTER TABLE api_tokens ADD COLUMN quota_disk_mb INTEGER NOT NULL DEFAULT 0 CHECK (quota_disk_mb >= 0);
