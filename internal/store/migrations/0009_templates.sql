-- A template is an image a sandbox can be created from, made by sandboxd:
-- built from a recipe (kind 'build'), or captured from a sandbox's
-- filesystem (kind 'snapshot'; kind 'fork' for the hidden one a fork makes
-- and removes once no sandbox uses it). image is the engine's reference of
-- the image, unique per template; a sandbox made from one has it as its
-- image, which is how a template in use is known. A template is 'building'
-- until its image exists, then 'ready' (or 'failed', with error); a
-- 'building' one found at startup was cut short and is failed then.
CREATE TABLE templates (
	id          TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
	owner       TEXT    NOT NULL CHECK (owner <> ''),
	name        TEXT    NOT NULL DEFAULT '',
	kind        TEXT    NOT NULL CHECK (kind IN ('build', 'snapshot', 'fork')),
	state       TEXT    NOT NULL CHECK (state IN ('building', 'ready', 'failed')),
	image       TEXT    NOT NULL UNIQUE,
	base_image  TEXT    NOT NULL DEFAULT '',
	source_id   TEXT    NOT NULL DEFAULT '',
	recipe_hash TEXT    NOT NULL DEFAULT '',
	spec        TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(spec)),
	size_bytes  INTEGER NOT NULL DEFAULT 0,
	error       TEXT    NOT NULL DEFAULT '',
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX templates_owner_name ON templates (owner, name) WHERE name <> '';
CREATE INDEX templates_owner_recipe ON templates (owner, recipe_hash) WHERE recipe_hash <> '';
