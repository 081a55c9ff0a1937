-- Cluster mode shares templates: a node that makes one publishes it to
-- the cluster (its image pushed to the cluster's registry), and every node
-- keeps a copy of its row. origin is the node that made a copy's template
-- ('' when it was made here); shared is 1 once the template is in the
-- cluster's catalog, so a start tells a template deleted elsewhere while
-- this node was away (shared, gone from the catalog) from one never
-- published (made before the node joined, or while the cluster could not
-- take it).
ALTER TABLE templates ADD COLUMN origin TEXT NOT NULL DEFAULT '';
ALTER TABLE templates ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
