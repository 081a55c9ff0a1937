-- Sandbox names are unique per owner, not per node: a name one tenant
-- holds must neither stop another tenant from using it nor tell that
-- tenant it exists (a create answering name_conflict for a name the
-- caller cannot see is an existence oracle). Every row already satisfies
-- the new index, since the old one was stricter.
DROP INDEX sandboxes_name;
CREATE UNIQUE INDEX sandboxes_owner_name ON sandboxes (owner, name) WHERE name <> '';
