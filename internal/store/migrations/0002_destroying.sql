-- A destroy marks its row first and deletes it last: a row with
-- destroying_since set is a sandbox whose destroy began (by a caller or the
-- reaper) and may have been interrupted; the reconciler finishes it. Such a
-- row is invisible to lookups and listings, and can no longer be updated,
-- started, stopped or committed by a create.
ALTER TABLE sandboxes ADD COLUMN destroying_since INTEGER;
