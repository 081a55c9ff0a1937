-- A template's name is a pointer, as an image tag is: name:tag points to
-- one template of its owner's, and a new build or snapshot under the name
-- moves it there (the one it pointed to stays, reachable by its id). tag
-- is 'latest' when a name is given without one. templates.name stays what
-- the template was made under, for display, and is no longer unique.
-- A template's deletion deletes its tags (the foreign key).
CREATE TABLE template_tags (
	owner       TEXT    NOT NULL CHECK (owner <> ''),
	name        TEXT    NOT NULL CHECK (name <> ''),
	tag         TEXT    NOT NULL CHECK (tag <> ''),
	template_id TEXT    NOT NULL REFERENCES templates (id) ON DELETE CASCADE,
	created_at  INTEGER NOT NULL,
	PRIMARY KEY (owner, name, tag)
);
CREATE INDEX template_tags_template ON template_tags (template_id);
INSERT INTO template_tags (owner, name, tag, template_id, created_at)
	SELECT owner, name, 'latest', id, created_at FROM templates WHERE name <> '' AND kind <> 'fork' AND state = 'ready';
DROP INDEX templates_owner_name;
CREATE INDEX templates_owner_name ON templates (owner, name) WHERE name <> '';
