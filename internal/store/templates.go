package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
var ErrTemplateInUse = errors.New("store: template in use by a sandbox")

// Template is an image sandboxd made that sandboxes can be created from.
type Template struct {
	ID    string
	Owner string
	// Name is unique per owner when not empty.
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
}

const templateColumns = `id, owner, name, kind, state, image, base_image, source_id, recipe_hash,
	spec, size_bytes, error, created_at, updated_at`

func scanTemplate(r rowScanner) (Template, error) {
	var (
		t                Template
		spec             string
		created, updated int64
	)
	if err := r.Scan(&t.ID, &t.Owner, &t.Name, &t.Kind, &t.State, &t.Image, &t.BaseImage, &t.SourceID,
		&t.RecipeHash, &spec, &t.SizeBytes, &t.Error, &created, &updated); err != nil {
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
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', ?, ?) RETURNING `+templateColumns,
			t.ID, t.Owner, t.Name, t.Kind, TemplateBuilding, t.Image, t.BaseImage, t.SourceID, t.RecipeHash,
			spec, now, now))
		return err
	})
	switch {
	case isUniqueViolation(err) && t.Name != "" && s.templateNameTaken(ctx, t.Owner, t.Name):
		return Template{}, fmt.Errorf("create template %s: name %q: %w", t.ID, t.Name, ErrNameConflict)
	case isUniqueViolation(err):
		return Template{}, fmt.Errorf("create template %s: %w", t.ID, ErrIDConflict)
	case err != nil:
		return Template{}, fmt.Errorf("create template %s: %w", t.ID, err)
	}
	return out, nil
}

func (s *Store) templateNameTaken(ctx context.Context, owner, name string) bool {
	_, err := s.GetTemplateByName(ctx, owner, name)
	return err == nil
}

// FinishTemplate marks a building template ready, with its image's size.
// ErrStateConflict when it is not building (a startup pass failed it).
func (s *Store) FinishTemplate(ctx context.Context, id string, sizeBytes int64) (Template, error) {
	return s.settleTemplate(ctx, id, TemplateReady, sizeBytes, "")
}

// FailTemplate marks a building template failed, saying why.
func (s *Store) FailTemplate(ctx context.Context, id, reason string) (Template, error) {
	return s.settleTemplate(ctx, id, TemplateFailed, 0, reason)
}

func (s *Store) settleTemplate(ctx context.Context, id string, to TemplateState, size int64, reason string) (Template, error) {
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
		return err
	})
	if err != nil {
		return Template{}, fmt.Errorf("settle template %s: %w", id, err)
	}
	return out, nil
}

// GetTemplate returns template id, or ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, id string) (Template, error) {
	t, err := scanTemplate(s.reader.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE id = ?`, id))
	if err != nil {
		return Template{}, fmt.Errorf("get template %s: %w", id, notFound(err))
	}
	return t, nil
}

// GetTemplateByName returns owner's template named name, or ErrNotFound.
func (s *Store) GetTemplateByName(ctx context.Context, owner, name string) (Template, error) {
	t, err := scanTemplate(s.reader.QueryRowContext(ctx, `SELECT `+templateColumns+
		` FROM templates WHERE owner = ? AND name = ? AND name <> ''`, owner, name))
	if err != nil {
		return Template{}, fmt.Errorf("get template %q of %s: %w", name, owner, notFound(err))
	}
	return t, nil
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

// TemplateBytes is the size of owner's templates (forks included): what
// counts against the owner's storage quota.
func (s *Store) TemplateBytes(ctx context.Context, owner string) (int64, error) {
	var n int64
	if err := s.reader.QueryRowContext(ctx, `SELECT coalesce(sum(size_bytes), 0) FROM templates WHERE owner = ?`, owner).Scan(&n); err != nil {
		return 0, fmt.Errorf("template bytes of %s: %w", owner, err)
	}
	return n, nil
}
