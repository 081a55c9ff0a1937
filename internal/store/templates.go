package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// TemplateKind says how a template was made.
type TemplateKind string

const (
	// TemplateBuild: built from a recipe (a base image and steps).
	TemplateBuild TemplateKind = "build"
	// TemplateSnapshot: a sandbox's filesystem, captured on request.
	TemplateSnapshot TemplateKind = "snapshot"
	// TemplateFork: the capture a fork makes its sandboxes from; never
	// listed, removed once no sandbox uses it.
	TemplateFork TemplateKind = "fork"
)

// TemplateState is where a template is in its making.
type TemplateState string

const (
	TemplateBuilding TemplateState = "building"
	TemplateReady    TemplateState = "ready"
	TemplateFailed   TemplateState = "failed"
)

// ErrTemplateInUse: a sandbox was made from the template and still exists.
var ErrTemplateInUse = errors.New("template in use by a sandbox")

// Template is an image sandboxd made that sandboxes can be created from.
type Template struct {
	ID    string
	Owner string
	// Name is what the template was made under (display only: names
	// resolve through template_tags, TemplateTag).
	Name  string
	Kind  TemplateKind
	State TemplateState
	// Image is the engine's reference of the template's image, unique.
	Image string
	// BaseImage is the image it was built on or captured over.
	BaseImage string
	// SourceID is the sandbox a snapshot or fork was captured from.
	SourceID string
	// RecipeHash identifies a build's recipe: the same recipe again is
	// the same template.
	RecipeHash string
	// Spec is the service's JSON (the start command, the ready check).
	Spec      json.RawMessage
	SizeBytes int64
	// Error says why a failed template failed.
	Error     string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Origin is, in a cluster, the node that made the template when this
	// row is another node's template's copy; "" when it was made here.
	Origin string
	// Shared is set once the template is in the cluster's catalog.
	Shared bool
}

const templateColumns = `id, owner, name, kind, state, image, base_image, source_id, recipe_hash,
	spec, size_bytes, error, created_at, updated_at, origin, shared`

func scanTemplate(r rowScanner) (Template, error) {
	var (
		t                Template
		spec             string
		created, updated int64
	)
	if err := r.Scan(&t.ID, &t.Owner, &t.Name, &t.Kind, &t.State, &t.Image, &t.BaseImage, &t.SourceID,
		&t.RecipeHash, &spec, &t.SizeBytes, &t.Error, &created, &updated, &t.Origin, &t.Shared); err != nil {
		return Template{}, err
	}
	t.Spec = json.RawMessage(spec)
	t.CreatedAt, t.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return t, nil
}

// CreateTemplate inserts t as building. A name the owner already has is
// ErrNameConflict, an id or image already taken ErrIDConflict.
func (s *Store) CreateTemplate(ctx context.Context, t Template) (Template, error) {
	switch {
	case t.ID == "" || t.Owner == "" || t.Image == "":
		return Template{}, invalidf("create template: id, owner and image are required")
	case t.Kind != TemplateBuild && t.Kind != TemplateSnapshot && t.Kind != TemplateFork:
		return Template{}, invalidf("create template %s: kind %q", t.ID, t.Kind)
	}
	spec := string(t.Spec)
	if spec == "" {
		spec = "{}"
	}
	var out Template
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.nowMillis()
		var err error
		out, err = scanTemplate(tx.QueryRowContext(ctx, `INSERT INTO templates (`+templateColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', ?, ?, '', 0) RETURNING `+templateColumns,
			t.ID, t.Owner, t.Name, t.Kind, TemplateBuilding, t.Image, t.BaseImage, t.SourceID, t.RecipeHash,
			spec, now, now))
		return err
	})
	switch {
	case isUniqueViolation(err):
		return Template{}, fmt.Errorf("create template %s: %w", t.ID, ErrIDConflict)
	case err != nil:
		return Template{}, fmt.Errorf("create template %s: %w", t.ID, err)
	}
	return out, nil
}

// FinishTemplate marks a building template ready, with its image's size,
// and in the same write points its name's tags at it (each of tags; the
// template must have a name when tags are given). ErrStateConflict when
// it is not building (a startup pass failed it).
func (s *Store) FinishTemplate(ctx context.Context, id string, sizeBytes int64, tags ...string) (Template, error) {
	return s.settleTemplate(ctx, id, TemplateReady, sizeBytes, "", tags)
}

// FinishSharedTemplate is FinishTemplate for a template the cluster's
// catalog took first: it is marked shared, and tags point to it exactly
// (the catalog decided which; no newer-build check here).
func (s *Store) FinishSharedTemplate(ctx context.Context, id string, sizeBytes int64, tags []string) (Template, error) {
	var out Template
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanTemplate(tx.QueryRowContext(ctx, `UPDATE templates SET state = ?, size_bytes = ?, shared = 1, updated_at = ?
			WHERE id = ? AND state = ? RETURNING `+templateColumns, TemplateReady, sizeBytes, s.nowMillis(), id, TemplateBuilding))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: template %s is not building", ErrStateConflict, id)
		}
		if err != nil || len(tags) == 0 || out.Name == "" {
			return err
		}
		return s.putTags(ctx, tx, out.Owner, out.Name, tags, id, false)
	})
	if err != nil {
		return Template{}, fmt.Errorf("finish shared template %s: %w", id, err)
	}
	return out, nil
}

// SandboxesOfImage counts the sandboxes (of any state) whose image is
// ref: a template's users on this node.
func (s *Store) SandboxesOfImage(ctx context.Context, ref string) (int, error) {
	var n int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM sandboxes WHERE image = ?`, ref).Scan(&n); err != nil {
		return 0, fmt.Errorf("sandboxes of image %s: %w", ref, err)
	}
	return n, nil
}

// FailTemplate marks a building template failed, saying why.
func (s *Store) FailTemplate(ctx context.Context, id, reason string) (Template, error) {
	return s.settleTemplate(ctx, id, TemplateFailed, 0, reason, nil)
}

func (s *Store) settleTemplate(ctx context.Context, id string, to TemplateState, size int64, reason string, tags []string) (Template, error) {
	var out Template
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanTemplate(tx.QueryRowContext(ctx, `UPDATE templates SET state = ?, size_bytes = ?, error = ?, updated_at = ?
			WHERE id = ? AND state = ? RETURNING `+templateColumns, to, size, reason, s.nowMillis(), id, TemplateBuilding))
		if errors.Is(err, sql.ErrNoRows) {
			cur, gerr := scanTemplate(tx.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE id = ?`, id))
			if gerr != nil {
				return notFound(gerr)
			}
			return fmt.Errorf("%w: template %s is %s", ErrStateConflict, id, cur.State)
		}
		if err != nil || len(tags) == 0 {
			return err
		}
		if out.Name == "" {
			return invalidf("template %s has no name to tag", id)
		}
		return s.putTags(ctx, tx, out.Owner, out.Name, tags, id, true)
	})
	if err != nil {
		return Template{}, fmt.Errorf("settle template %s: %w", id, err)
	}
	return out, nil
}

// PutTemplateCopy inserts t, another node's template (t.Origin), ready
// and shared, unless a template of its id is here already (then it
// reports false and changes nothing). Its image is this node's reference
// for the copy, which the engine may not hold yet.
func (s *Store) PutTemplateCopy(ctx context.Context, t Template) (bool, error) {
	switch {
	case t.ID == "" || t.Owner == "" || t.Image == "" || t.Origin == "":
		return false, invalidf("put template copy: id, owner, image and origin are required")
	case t.Kind != TemplateBuild && t.Kind != TemplateSnapshot:
		return false, invalidf("put template copy %s: kind %q", t.ID, t.Kind)
	}
	spec := string(t.Spec)
	if spec == "" {
		spec = "{}"
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.nowMillis()
		res, err := tx.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, 1) ON CONFLICT (id) DO NOTHING`,
			t.ID, t.Owner, t.Name, t.Kind, TemplateReady, t.Image, t.BaseImage, t.SourceID, t.RecipeHash,
			spec, t.SizeBytes, t.CreatedAt.UnixMilli(), now, t.Origin)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("put template copy %s: %w", t.ID, err)
	}
	return n == 1, nil
}

// MarkTemplateShared records that template id is in the cluster's
// catalog.
func (s *Store) MarkTemplateShared(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE templates SET shared = 1 WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark template %s shared: %w", id, err)
	}
	return nil
}

// GetTemplate returns template id, or ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, id string) (Template, error) {
	t, err := scanTemplate(s.reader.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE id = ?`, id))
	if err != nil {
		return Template{}, fmt.Errorf("get template %s: %w", id, notFound(err))
	}
	return t, nil
}

// DefaultTag is the tag of a name given without one.
const DefaultTag = "latest"

// TemplateTag is one name:tag of an owner's, pointing to a template.
type TemplateTag struct {
	Owner      string
	Name       string
	Tag        string
	TemplateID string
	// CreatedAt is when the tag was last pointed where it points.
	CreatedAt time.Time
}

// GetTemplateByTag returns the template owner's name:tag points to, or
// ErrNotFound.
func (s *Store) GetTemplateByTag(ctx context.Context, owner, name, tag string) (Template, error) {
	t, err := scanTemplate(s.reader.QueryRowContext(ctx, `SELECT `+prefixed("t.", templateColumns)+`
		FROM template_tags g JOIN templates t ON t.id = g.template_id
		WHERE g.owner = ? AND g.name = ? AND g.tag = ?`, owner, name, tag))
	if err != nil {
		return Template{}, fmt.Errorf("get template %s:%s of %s: %w", name, tag, owner, notFound(err))
	}
	return t, nil
}

// GetNewestTemplateNamed returns owner's newest template made under
// name (of any state; not a fork's capture), or ErrNotFound.
func (s *Store) GetNewestTemplateNamed(ctx context.Context, owner, name string) (Template, error) {
	t, err := scanTemplate(s.reader.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates
		WHERE owner = ? AND name = ? AND name <> '' AND kind <> ? ORDER BY created_at DESC, id DESC LIMIT 1`, owner, name, TemplateFork))
	if err != nil {
		return Template{}, fmt.Errorf("get template named %q of %s: %w", name, owner, notFound(err))
	}
	return t, nil
}

// TagTemplate points owner's name:tag, for each of tags, at template id,
// which must be owner's and ready (ErrStateConflict otherwise).
func (s *Store) TagTemplate(ctx context.Context, owner, name string, tags []string, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		t, err := scanTemplate(tx.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE id = ? AND owner = ?`, id, owner))
		if err != nil {
			return notFound(err)
		}
		if t.State != TemplateReady || t.Kind == TemplateFork {
			return fmt.Errorf("%w: template %s is %s %s", ErrStateConflict, id, t.State, t.Kind)
		}
		return s.putTags(ctx, tx, owner, name, tags, id, false)
	})
	if err != nil {
		return fmt.Errorf("tag template %s as %s: %w", id, name, err)
	}
	return nil
}

// putTags points owner's name:tag, for each of tags, at template id.
// With onlyNewer (a build or capture finishing), a tag that points to a
// template inserted after id (its rowid: the order of the inserts, which
// no clock tie confuses) stays where it is: of two builds of a name, the
// one asked for last holds it, whichever ends first.
func (s *Store) putTags(ctx context.Context, tx *sql.Tx, owner, name string, tags []string, id string, onlyNewer bool) error {
	now := s.nowMillis()
	for _, tag := range tags {
		if onlyNewer {
			var newer int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM template_tags g JOIN templates t ON t.id = g.template_id
				WHERE g.owner = ? AND g.name = ? AND g.tag = ?
				AND t.rowid > (SELECT rowid FROM templates WHERE id = ?)`, owner, name, tag, id).Scan(&newer); err != nil {
				return err
			}
			if newer > 0 {
				continue
			}
		}
		if err := s.touchTagged(ctx, tx, owner, name, tag); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO template_tags (owner, name, tag, template_id, created_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, name, tag)
			DO UPDATE SET template_id = excluded.template_id, created_at = excluded.created_at`,
			owner, name, tag, id, now); err != nil {
			return err
		}
	}
	return nil
}

// touchTagged marks the template name:tag points to as changed now: a
// template a tag leaves is swept (SupersededBuilds) only a grace after.
func (s *Store) touchTagged(ctx context.Context, tx *sql.Tx, owner, name, tag string) error {
	_, err := tx.ExecContext(ctx, `UPDATE templates SET updated_at = ? WHERE id =
		(SELECT template_id FROM template_tags WHERE owner = ? AND name = ? AND tag = ?)`, s.nowMillis(), owner, name, tag)
	return err
}

// UntagTemplates removes owner's name:tag for each of tags and reports
// how many there were.
func (s *Store) UntagTemplates(ctx context.Context, owner, name string, tags []string) (int, error) {
	n := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		n = 0
		for _, tag := range tags {
			if err := s.touchTagged(ctx, tx, owner, name, tag); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM template_tags WHERE owner = ? AND name = ? AND tag = ?`, owner, name, tag)
			if err != nil {
				return err
			}
			k, _ := res.RowsAffected()
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("untag %s of %s: %w", name, owner, err)
	}
	return n, nil
}

// TagFilter selects tags; an empty field selects any.
type TagFilter struct {
	Owner, Name, TemplateID string
}

// ListTemplateTags lists the tags f selects, by owner and name, then
// newest first.
func (s *Store) ListTemplateTags(ctx context.Context, f TagFilter) ([]TemplateTag, error) {
	tags, err := queryAll(ctx, s.reader, func(r rowScanner) (TemplateTag, error) {
		var (
			g       TemplateTag
			created int64
		)
		err := r.Scan(&g.Owner, &g.Name, &g.Tag, &g.TemplateID, &created)
		g.CreatedAt = time.UnixMilli(created).UTC()
		return g, err
	}, `SELECT owner, name, tag, template_id, created_at FROM template_tags
		WHERE (? = '' OR owner = ?) AND (? = '' OR name = ?) AND (? = '' OR template_id = ?)
		ORDER BY owner, name, created_at DESC, tag`, f.Owner, f.Owner, f.Name, f.Name, f.TemplateID, f.TemplateID)
	if err != nil {
		return nil, fmt.Errorf("list template tags: %w", err)
	}
	return tags, nil
}

// FindTemplateByRecipe returns owner's newest template of recipe hash that
// is ready or building, or ErrNotFound.
func (s *Store) FindTemplateByRecipe(ctx context.Context, owner, hash string) (Template, error) {
	t, err := scanTemplate(s.reader.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates
		WHERE owner = ? AND recipe_hash = ? AND state <> ? ORDER BY created_at DESC LIMIT 1`, owner, hash, TemplateFailed))
	if err != nil {
		return Template{}, fmt.Errorf("find template of recipe %s: %w", hash, notFound(err))
	}
	return t, nil
}

// ListTemplates lists owner's templates (every owner's when owner is
// empty), oldest first; fork captures only when forks is set.
func (s *Store) ListTemplates(ctx context.Context, owner string, forks bool) ([]Template, error) {
	ts, err := queryAll(ctx, s.reader, scanTemplate, `SELECT `+templateColumns+` FROM templates
		WHERE (? = '' OR owner = ?) AND (? OR kind <> ?) ORDER BY created_at, id`, owner, owner, forks, TemplateFork)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return ts, nil
}

// DeleteTemplate deletes template id unless a sandbox (of any state,
// being destroyed or not) has its image: ErrTemplateInUse then, and
// nothing changes. The caller removes the image afterwards.
func (s *Store) DeleteTemplate(ctx context.Context, id string) (Template, error) {
	var out Template
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanTemplate(tx.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE id = ?`, id))
		if err != nil {
			return notFound(err)
		}
		var users int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sandboxes WHERE image = ?`, out.Image).Scan(&users); err != nil {
			return err
		}
		if users > 0 {
			return fmt.Errorf("%w: %d sandboxes", ErrTemplateInUse, users)
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM templates WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return Template{}, fmt.Errorf("delete template %s: %w", id, err)
	}
	return out, nil
}

// FailBuildingTemplates fails every building template (at startup: their
// makers died with the last process) and returns them.
func (s *Store) FailBuildingTemplates(ctx context.Context, reason string) ([]Template, error) {
	var out []Template
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE templates SET state = ?, error = ?, updated_at = ?
			WHERE state = ? RETURNING `+templateColumns, TemplateFailed, reason, s.nowMillis(), TemplateBuilding)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			t, err := scanTemplate(rows)
			if err != nil {
				return err
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("fail building templates: %w", err)
	}
	return out, nil
}

// UnusedForks lists the fork captures no sandbox uses any more.
func (s *Store) UnusedForks(ctx context.Context) ([]Template, error) {
	ts, err := queryAll(ctx, s.reader, scanTemplate, `SELECT `+templateColumns+` FROM templates t
		WHERE kind = ? AND state <> ? AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.image = t.image)`,
		TemplateFork, TemplateBuilding)
	if err != nil {
		return nil, fmt.Errorf("unused forks: %w", err)
	}
	return ts, nil
}

// SupersededBuilds lists the builds made under a name that no tag points
// to and no sandbox uses, last changed before before.
func (s *Store) SupersededBuilds(ctx context.Context, before time.Time) ([]Template, error) {
	ts, err := queryAll(ctx, s.reader, scanTemplate, `SELECT `+templateColumns+` FROM templates t
		WHERE kind = ? AND name <> '' AND state <> ? AND updated_at < ? AND origin = ''
		AND NOT EXISTS (SELECT 1 FROM template_tags g WHERE g.template_id = t.id)
		AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.image = t.image)`,
		TemplateBuild, TemplateBuilding, before.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("superseded builds: %w", err)
	}
	return ts, nil
}

// DeleteSupersededBuild deletes build id if it still is one
// SupersededBuilds(before) would list, and reports whether it did.
func (s *Store) DeleteSupersededBuild(ctx context.Context, id string, before time.Time) (bool, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM templates WHERE id = ? AND kind = ? AND name <> ''
			AND state <> ? AND updated_at < ? AND origin = ''
			AND NOT EXISTS (SELECT 1 FROM template_tags g WHERE g.template_id = templates.id)
			AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.image = templates.image)`,
			id, TemplateBuild, TemplateBuilding, before.UnixMilli())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete superseded build %s: %w", id, err)
	}
	return n == 1, nil
}

// TemplateBytes is the size of owner's templates (forks included): what
// counts against the owner's storage quota.
func (s *Store) TemplateBytes(ctx context.Context, owner string) (int64, error) {
	var n int64
	if err := s.reader.QueryRowContext(ctx, `SELECT coalesce(sum(size_bytes), 0) FROM templates WHERE owner = ?`, owner).Scan(&n); err != nil {
		return 0, fmt.Errorf("template bytes of %s: %w", owner, err)
	}
	return n, nil
}

// prefixed qualifies each of a comma-separated column list with p.
func prefixed(p, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}
