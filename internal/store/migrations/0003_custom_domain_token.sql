-- A binding's token is random per call that put it (created it, or found it
-- identical and vouched for it). The undo of a failed bind deletes the row
-- only while it still carries that call's token, so it never takes back a
-- binding another call has since reported as success. Rows from before this
-- migration carry 0, which no call's token equals.
ALTER TABLE sandbox_custom_domains ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
