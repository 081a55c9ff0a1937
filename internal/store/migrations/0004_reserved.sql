-- PLACEHOLDER, not a schema change. Version 4 belongs to another branch
-- (edges: 0004_names_per_owner.sql), unmerged when 0005 was written; the
-- migrator requires versions 1..N without gaps (loadMigrations), so this
-- file keeps 0005 loadable until then. When merging that branch, delete
-- this file: its 0004 takes the number. Only a database made by this
-- branch alone is at version 4 without that change.
SELECT 1;
