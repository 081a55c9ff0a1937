package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SandboxState is the lifecycle state of a sandbox.
type SandboxState string

// The sandbox states; the schema's CHECK constraint admits exactly these.
const (
	StateCreating SandboxState = "creating"
	StateRunning  SandboxState = "running"
	// StatePaused: running with its processes frozen in memory (PauseSandbox);
	// it holds its capacity and its timeout does not run.
	StatePaused   SandboxState = "paused"
	StateStopping SandboxState = "stopping"
	StateStopped  SandboxState = "stopped"
	StateError    SandboxState = "error"
)

// liveStates hold capacity on the node (they count toward admission).
var liveStates = []SandboxState{StateCreating, StateRunning, StatePaused, StateStopping}

// Valid reports whether s is one of the defined states.
func (s SandboxState) Valid() bool {
	switch s {
	case StateCreating, StateRunning, StatePaused, StateStopping, StateStopped, StateError:
		return true
	}
	return false
}

// Sandbox is one sandbox row.
type Sandbox struct {
	ID               string
	Name             string // "" for unnamed; non-empty names are unique
	Owner            string // tenant
	Image            string
	State            SandboxState
	CPUMillis        int64 // millicores
	MemoryMB         int64
	Tags             map[string]string
	Env              map[string]string // non-secret environment only
	SealedSecrets    []byte            // AEAD-sealed by the secrets package
	Spec             json.RawMessage   // normalized create request; "{}" when empty
	AgentTokenSealed []byte
	SSHPublicKey     string
	NodeID           string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	ExpiresAt        time.Time // zero: never expires
	ErrorReason      string
	// DestroyingSince is when a destroy of this sandbox began (zero: none
	// has). Such a row is on its way out: see BeginDestroy.
	DestroyingSince time.Time
	// BootTokenSealed is the agent token the container's agent boots with,
	// when that is not AgentTokenSealed: a sandbox claimed from the pool
	// (see ClaimPooled). Nil for every other sandbox.
	BootTokenSealed []byte
	// PausedAt is when the sandbox was paused; zero unless State is
	// StatePaused.
	PausedAt time.Time
	// Lifecycle is the sandbox's lifecycle rules, which the service's
	// background loop applies from the row.
	Lifecycle Lifecycle
	// LastActivityAt is the last activity of the sandbox while it ran (its
	// commit, start or resume, a change of its rules, TouchSandbox): its
	// idle time, which Lifecycle.AutoStop bounds, counts from it.
	LastActivityAt time.Time
	// HibernatedAt is when the paused sandbox's processes were
	// checkpointed to disk and its memory freed (MarkHibernated); zero
	// unless State is StatePaused and it is hibernated.
	HibernatedAt time.Time
	// StoppedAt is when the sandbox stopped (zero unless StateStopped);
	// ArchivedAt when it was archived (zero unless stopped and archived).
	StoppedAt, ArchivedAt time.Time
}

// Lifecycle is a sandbox's lifecycle rules. The zero value has none.
type Lifecycle struct {
	// AutoStop stops a running sandbox idle this long; 0: never.
	AutoStop time.Duration
	// AutoDelete destroys a stopped sandbox this long after its stop; 0:
	// never, unless DeleteOnStop.
	AutoDelete time.Duration
	// DeleteOnStop destroys the sandbox as soon as it stops.
	DeleteOnStop bool
	// AutoArchive archives a stopped sandbox this long after its stop; 0:
	// never.
	AutoArchive time.Duration
}

// autoDeleteMillis is the auto_delete_ms column of l: -1 never, 0 at
// the stop, else the delay.
func (l Lifecycle) autoDeleteMillis() int64 {
	switch {
	case l.DeleteOnStop:
		return 0
	case l.AutoDelete <= 0:
		return -1
	}
	return max(1, l.AutoDelete.Milliseconds())
}

// lifecycleOf is the inverse of the three columns.
func lifecycleOf(stopMs, deleteMs, archiveMs int64) Lifecycle {
	l := Lifecycle{
		AutoStop:    time.Duration(stopMs) * time.Millisecond,
		AutoArchive: time.Duration(archiveMs) * time.Millisecond,
	}
	switch {
	case deleteMs == 0:
		l.DeleteOnStop = true
	case deleteMs > 0:
		l.AutoDelete = time.Duration(deleteMs) * time.Millisecond
	}
	return l
}

// PoolOwner owns the warm pool's idle sandboxes, which are running rows
// like any other until a create claims one (ClaimPooled). No API token
// can have it (the API refuses owners with the "sandboxd:" prefix), and
// listings leave its sandboxes out unless they ask for it by owner.
const PoolOwner = "sandboxd:pool"

// sandboxColumns is the column list every sandbox query selects, in scanSandbox order.
const sandboxColumns = `id, name, owner, image, state, cpu_millis, memory_mb, tags, env,
	sealed_secrets, spec, agent_token_sealed, ssh_public_key, node_id,
	created_at, updated_at, expires_at, error_reason, destroying_since, boot_token_sealed, paused_at,
	auto_stop_ms, auto_delete_ms, auto_archive_ms, last_activity_at, stopped_at, archived_at, hibernated_at`

func scanSandbox(r rowScanner) (Sandbox, error) {
	var (
		sb                   Sandbox
		tags, env, spec      string
		createdMs, updatedMs int64
		expiresMs, destroyMs sql.NullInt64
		pausedMs             sql.NullInt64
		stopMs, deleteMs     int64
		archiveMs            int64
		activityMs           sql.NullInt64
		stoppedMs, archMs    sql.NullInt64
		hibernatedMs         sql.NullInt64
	)
	err := r.Scan(&sb.ID, &sb.Name, &sb.Owner, &sb.Image, &sb.State, &sb.CPUMillis, &sb.MemoryMB,
		&tags, &env, &sb.SealedSecrets, &spec, &sb.AgentTokenSealed, &sb.SSHPublicKey, &sb.NodeID,
		&createdMs, &updatedMs, &expiresMs, &sb.ErrorReason, &destroyMs, &sb.BootTokenSealed, &pausedMs,
		&stopMs, &deleteMs, &archiveMs, &activityMs, &stoppedMs, &archMs, &hibernatedMs)
	if err != nil {
		return Sandbox{}, err
	}
	if err := json.Unmarshal([]byte(tags), &sb.Tags); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: decode tags: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(env), &sb.Env); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: decode env: %w", sb.ID, err)
	}
	sb.Spec = json.RawMessage(spec)
	sb.CreatedAt = time.UnixMilli(createdMs).UTC()
	sb.UpdatedAt = time.UnixMilli(updatedMs).UTC()
	sb.ExpiresAt = fromMillis(expiresMs)
	sb.DestroyingSince = fromMillis(destroyMs)
	sb.PausedAt = fromMillis(pausedMs)
	sb.Lifecycle = lifecycleOf(stopMs, deleteMs, archiveMs)
	sb.LastActivityAt = fromMillis(activityMs)
	sb.StoppedAt = fromMillis(stoppedMs)
	sb.ArchivedAt = fromMillis(archMs)
	if sb.State == StatePaused {
		sb.HibernatedAt = fromMillis(hibernatedMs)
	}
	return sb, nil
}

// encodeMap encodes a string map as a JSON object; nil encodes as {}.
func encodeMap(m map[string]string) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// CreateSandbox inserts sb. CreatedAt defaults to the store clock; UpdatedAt is set to
// CreatedAt; both are written back to sb, truncated to the millisecond the store keeps.
//
// Errors: ErrNameConflict if another sandbox of sb.Owner has sb.Name (empty names never
// conflict; other owners' names never do),
// ErrIDConflict if sb.ID exists, ErrInvalidArgument for an empty id or unknown state.
// Nothing is written on error. Concurrent creates with one owner and name: exactly one succeeds.
// A retry after success returns ErrIDConflict; the caller then reads the row by id.
func (s *Store) CreateSandbox(ctx context.Context, sb *Sandbox) error {
	if sb.ID == "" {
		return invalidf("create sandbox: empty id")
	}
	if !sb.State.Valid() || sb.State == StatePaused {
		return invalidf("create sandbox %s: state %q", sb.ID, sb.State)
	}
	tags, err := encodeMap(sb.Tags)
	if err != nil {
		return invalidf("create sandbox %s: tags: %v", sb.ID, err)
	}
	env, err := encodeMap(sb.Env)
	if err != nil {
		return invalidf("create sandbox %s: env: %v", sb.ID, err)
	}
	spec := string(sb.Spec)
	if spec == "" {
		spec = "{}"
	}
	created := sb.CreatedAt
	if created.IsZero() {
		created = s.now()
	}
	createdMs := millis(created)

	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO sandboxes (`+sandboxColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, NULL, ?, ?, ?, ?, NULL, NULL, NULL)`,
			sb.ID, sb.Name, sb.Owner, sb.Image, sb.State, sb.CPUMillis, sb.MemoryMB, tags, env,
			sb.SealedSecrets, spec, sb.AgentTokenSealed, sb.SSHPublicKey, sb.NodeID,
			createdMs, createdMs, nullMillis(sb.ExpiresAt), sb.ErrorReason, sb.BootTokenSealed,
			max(0, sb.Lifecycle.AutoStop.Milliseconds()), sb.Lifecycle.autoDeleteMillis(), max(0, sb.Lifecycle.AutoArchive.Milliseconds()),
			nullMillis(sb.LastActivityAt))
		return err
	})
	switch {
	case isPrimaryKeyViolation(err):
		return fmt.Errorf("create sandbox %s: %w", sb.ID, ErrIDConflict)
	case isUniqueViolation(err): // the only unique index on sandboxes is (owner, name)
		return fmt.Errorf("create sandbox %s: name %q: %w", sb.ID, sb.Name, ErrNameConflict)
	case err != nil:
		return fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	sb.CreatedAt = time.UnixMilli(createdMs).UTC()
	sb.UpdatedAt = sb.CreatedAt
	sb.Spec = json.RawMessage(spec)
	return nil
}

// getSandboxSQL is prepared at Open (hotReads).
const getSandboxSQL = `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`

// GetSandbox returns the sandbox with id, or ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	sb, err := scanSandbox(s.hot.getSandbox.QueryRowContext(ctx, id))
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, notFound(err))
	}
	return sb, nil
}

// GetSandboxByName returns owner's sandbox named name, or ErrNotFound (always for "",
// and for a sandbox whose destroy began). Names are unique per owner, so there is at
// most one; another owner's sandbox of that name is not found. To find a name across
// owners, list with ListFilter.Name.
func (s *Store) GetSandboxByName(ctx context.Context, owner, name string) (Sandbox, error) {
	if name == "" {
		return Sandbox{}, fmt.Errorf("get sandbox by empty name: %w", ErrNotFound)
	}
	sb, err := scanSandbox(s.reader.QueryRowContext(ctx,
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE owner = ? AND name = ? AND destroying_since IS NULL`, owner, name))
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox by name %q: %w", name, notFound(err))
	}
	return sb, nil
}

// notFound maps sql.ErrNoRows to ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListFilter selects sandboxes. Zero fields do not filter.
type ListFilter struct {
	Owner  string
	Name   string
	Tags   map[string]string // every pair must match (AND)
	States []SandboxState    // any of (OR)
	// Annotations must each match the spec's annotations (AND).
	Annotations map[string]string
	// CreatedFrom and CreatedUntil bound CreatedAt, both inclusive; zero
	// is no bound.
	CreatedFrom, CreatedUntil time.Time
	// NewestFirst orders by (CreatedAt, ID) descending. A page token keeps
	// its place in either order, but only means something in the order it
	// was made in.
	NewestFirst bool
	Limit       int    // <= 0: DefaultListLimit; capped at MaxListLimit
	PageToken   string // from a previous call's nextPageToken
	// IncludeDestroying lists rows whose destroy began, too (the
	// reconciler's view); callers' listings leave them out.
	IncludeDestroying bool
	// IncludePool lists the warm pool's idle sandboxes (PoolOwner's) too
	// (the reconciler's view); other listings leave them out unless Owner
	// is PoolOwner.
	IncludePool bool
}

// ListSandboxes returns one page of sandboxes matching f, ordered by (CreatedAt, ID)
// (descending with f.NewestFirst), and the token for the next page ("" on the last page). Paging is keyset-based, so rows
// created or deleted between pages neither shift nor repeat the rows already returned.
// A malformed PageToken is ErrInvalidArgument.
func (s *Store) ListSandboxes(ctx context.Context, f ListFilter) ([]Sandbox, string, error) {
	limit := ListLimit(f.Limit)

	var (
		where []string
		args  []any
	)
	if f.Owner != "" {
		where, args = append(where, "owner = ?"), append(args, f.Owner)
	} else if !f.IncludePool {
		where, args = append(where, "owner <> ?"), append(args, PoolOwner)
	}
	if f.Name != "" {
		where, args = append(where, "name = ?"), append(args, f.Name)
	}
	for _, k := range sortedKeys(f.Tags) {
		where = append(where,
			"EXISTS (SELECT 1 FROM json_each(sandboxes.tags) WHERE key = ? AND value = ?)")
		args = append(args, k, f.Tags[k])
	}
	for _, k := range sortedKeys(f.Annotations) {
		where = append(where,
			"EXISTS (SELECT 1 FROM json_each(sandboxes.spec, '$.annotations') WHERE key = ? AND value = ?)")
		args = append(args, k, f.Annotations[k])
	}
	if !f.CreatedFrom.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, millis(f.CreatedFrom))
	}
	if !f.CreatedUntil.IsZero() {
		where, args = append(where, "created_at <= ?"), append(args, millis(f.CreatedUntil))
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+placeholders(len(f.States))+")")
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if !f.IncludeDestroying {
		where = append(where, "destroying_since IS NULL")
	}
	if f.PageToken != "" {
		created, id, err := decodePageToken(f.PageToken)
		if err != nil {
			return nil, "", err
		}
		cmp := ">"
		if f.NewestFirst {
			cmp = "<"
		}
		where, args = append(where, "(created_at, id) "+cmp+" (?, ?)"), append(args, created, id)
	}
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if f.NewestFirst {
		q += " ORDER BY created_at DESC, id DESC LIMIT ?"
	} else {
		q += " ORDER BY created_at, id LIMIT ?"
	}
	args = append(args, limit+1) // one extra row tells us whether there is a next page

	items, err := queryAll(ctx, s.reader, scanSandbox, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	if len(items) <= limit {
		return items, "", nil
	}
	items = items[:limit]
	last := items[len(items)-1]
	return items, encodePageToken(millis(last.CreatedAt), last.ID), nil
}

// ListLimit is the page size ListSandboxes uses for a requested limit.
func ListLimit(limit int) int {
	if limit <= 0 {
		return DefaultListLimit
	}
	return min(limit, MaxListLimit)
}

// PageTokenAfter is the page token of a listing whose last row was created
// at createdAt with id: what ListSandboxes returns after that row, for a
// caller that merges pages of several stores (cluster mode) and ends its
// page there.
func PageTokenAfter(createdAt time.Time, id string) string {
	return encodePageToken(millis(createdAt), id)
}

func encodePageToken(createdMs int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(createdMs, 10) + "." + id))
}

func decodePageToken(tok string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, "", invalidf("page token: %v", err)
	}
	ms, id, ok := strings.Cut(string(b), ".")
	created, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", invalidf("page token: malformed")
	}
	return created, id, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// UpdateSandboxState sets the state of sandbox id to `to` and its error reason to reason
// ("" clears it), as a compare-and-set: when from is non-empty the current state must be
// one of from, otherwise nothing changes and the error is a *StateConflictError
// (errors.Is ErrStateConflict) carrying the current state. Among concurrent callers with
// the same from, exactly one succeeds. A retried transition therefore reports a conflict
// whose Current equals to; callers that want retry-safety treat that as success.
// Returns the updated row, or ErrNotFound (also once a destroy began).
// It never pauses (PauseSandbox does); a move out of StatePaused clears PausedAt.
func (s *Store) UpdateSandboxState(ctx context.Context, id string, from []SandboxState, to SandboxState, reason string) (Sandbox, error) {
	if !to.Valid() || to == StatePaused {
		return Sandbox{}, invalidf("update sandbox %s: state %q", id, to)
	}
	var sb Sandbox
	err := s.write(ctx, func(tx *sql.Tx) error {
		var cur SandboxState
		if err := tx.QueryRowContext(ctx, `SELECT state FROM sandboxes
			WHERE id = ? AND destroying_since IS NULL`, id).Scan(&cur); err != nil {
			return notFound(err)
		}
		if len(from) > 0 && !slices.Contains(from, cur) {
			return &StateConflictError{ID: id, Current: cur, Want: slices.Clone(from)}
		}
		var err error
		now := s.nowMillis()
		// A stop records when (auto-delete and auto-archive count from
		// then) and a repeat keeps the first time; it keeps the archive
		// mark (ArchiveSandbox marks before its stop); leaving stopped
		// clears both marks; a start is activity.
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET stopped_at = CASE WHEN ?1 <> 'stopped' THEN NULL WHEN state = 'stopped' THEN stopped_at ELSE ?3 END,
				archived_at = CASE WHEN ?1 = 'stopped' THEN archived_at END,
				last_activity_at = CASE WHEN ?1 = 'running' AND state <> 'running' THEN ?3 ELSE last_activity_at END,
				state = ?1, error_reason = ?2, updated_at = ?3, paused_at = NULL WHERE id = ?4
			RETURNING `+sandboxColumns, to, reason, now, id))
		return err
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("update sandbox %s state to %s: %w", id, to, err)
	}
	return sb, nil
}

// PauseSandbox moves sandbox id from running to paused, PausedAt now, in
// one conditional write: of concurrent pauses (and resumes, stops) exactly
// one moves it. A sandbox that is not running is a *StateConflictError
// carrying its state (paused, for a repeat: the caller treats that as done);
// ErrNotFound if it is gone or its destroy began. The row keeps its expiry,
// which neither ListExpired nor BeginReap honours while it is paused.
func (s *Store) PauseSandbox(ctx context.Context, id string) (Sandbox, error) {
	sb, err := s.moveState(ctx, id, StateRunning, StatePaused, `paused_at = ?, hibernated_at = NULL`, s.nowMillis())
	if err != nil {
		return Sandbox{}, fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	return sb, nil
}

// ResumeSandbox moves sandbox id from paused to running in one conditional
// write, and gives its timeout back the time it spent paused: an expiry
// moves later by now - PausedAt (the time left at the pause is left
// again). It clears an archive mark (a sandbox archived by a hibernate
// runs again). A sandbox that is not paused is a *StateConflictError carrying
// its state; ErrNotFound if it is gone or its destroy began.
func (s *Store) ResumeSandbox(ctx context.Context, id string) (Sandbox, error) {
	now := s.nowMillis()
	sb, err := s.moveState(ctx, id, StatePaused, StateRunning,
		`expires_at = CASE WHEN expires_at IS NULL THEN NULL ELSE expires_at + max(0, ? - paused_at) END, paused_at = NULL, hibernated_at = NULL, archived_at = NULL, last_activity_at = ?`, now, now)
	if err != nil {
		return Sandbox{}, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	return sb, nil
}

// moveState is the compare-and-set of PauseSandbox and ResumeSandbox: from
// to to, with set (and its args) in the same UPDATE.
func (s *Store) moveState(ctx context.Context, id string, from, to SandboxState, set string, args ...any) (Sandbox, error) {
	return s.updateIn(ctx, id, from, `state = ?, error_reason = '', `+set, append([]any{to}, args...)...)
}

// updateIn applies set (and its args) to row id, with updated_at, if it is
// in state from: a row in another state is a *StateConflictError carrying
// it; ErrNotFound if it is gone or its destroy began.
func (s *Store) updateIn(ctx context.Context, id string, from SandboxState, set string, args ...any) (Sandbox, error) {
	var sb Sandbox
	err := s.write(ctx, func(tx *sql.Tx) error {
		var cur SandboxState
		if err := tx.QueryRowContext(ctx, `SELECT state FROM sandboxes
			WHERE id = ? AND destroying_since IS NULL`, id).Scan(&cur); err != nil {
			return notFound(err)
		}
		if cur != from {
			return &StateConflictError{ID: id, Current: cur, Want: []SandboxState{from}}
		}
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET `+set+`, updated_at = ? WHERE id = ?
			RETURNING `+sandboxColumns, append(append([]any(nil), args...), s.nowMillis(), id)...))
		return err
	})
	return sb, err
}

// MarkHibernated records that paused sandbox id is hibernated (its image
// complete), HibernatedAt now; marking a hibernated one again keeps the
// first time. A sandbox that is not paused is a *StateConflictError
// carrying its state; ErrNotFound if it is gone or its destroy began.
func (s *Store) MarkHibernated(ctx context.Context, id string) (Sandbox, error) {
	sb, err := s.setHibernated(ctx, id, `coalesce(hibernated_at, ?)`, s.nowMillis())
	if err != nil {
		return Sandbox{}, fmt.Errorf("mark sandbox %s hibernated: %w", id, err)
	}
	return sb, nil
}

// ClearHibernated records that paused sandbox id is no longer hibernated
// (its processes are back in memory, frozen). Its errors are
// MarkHibernated's.
func (s *Store) ClearHibernated(ctx context.Context, id string) (Sandbox, error) {
	sb, err := s.setHibernated(ctx, id, `NULL`)
	if err != nil {
		return Sandbox{}, fmt.Errorf("clear sandbox %s hibernated: %w", id, err)
	}
	return sb, nil
}

// setHibernated sets hibernated_at to value on a paused row.
func (s *Store) setHibernated(ctx context.Context, id, value string, args ...any) (Sandbox, error) {
	return s.updateIn(ctx, id, StatePaused, `hibernated_at = `+value, args...)
}

// PauseExpiredSandbox is PauseSandbox for a sandbox that pauses instead of
// being destroyed when its timeout passes: it moves sandbox id from running
// to paused, and clears its expiry, only if under the writer it has still
// expired at now. ok is false, with nothing changed, when it no longer
// qualifies (extended, cleared, not running, gone or being destroyed).
func (s *Store) PauseExpiredSandbox(ctx context.Context, id string, now time.Time) (sb Sandbox, ok bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		var err error
		nowMs := s.nowMillis()
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET state = ?, paused_at = ?, hibernated_at = NULL, expires_at = NULL, updated_at = ?
			WHERE id = ? AND state = ? AND expires_at IS NOT NULL AND expires_at <= ?
				AND destroying_since IS NULL
			RETURNING `+sandboxColumns, StatePaused, nowMs, nowMs, id, StateRunning, millis(now)))
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Sandbox{}, false, nil
	case err != nil:
		return Sandbox{}, false, fmt.Errorf("pause expired sandbox %s: %w", id, err)
	}
	return sb, true, nil
}

// ListPausedBefore returns the sandboxes paused at or before before (and
// not being destroyed), longest paused first: the ones the background loop
// stops for having been paused too long.
func (s *Store) ListPausedBefore(ctx context.Context, before time.Time) ([]Sandbox, error) {
	items, err := queryAll(ctx, s.reader, scanSandbox, `SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state = ? AND paused_at <= ? AND destroying_since IS NULL
		ORDER BY paused_at, id`, StatePaused, millis(before))
	if err != nil {
		return nil, fmt.Errorf("list paused sandboxes: %w", err)
	}
	return items, nil
}

// SandboxUpdate lists the mutable fields UpdateSandbox may change; nil fields are kept.
type SandboxUpdate struct {
	ExpiresAt *time.Time         // a pointer to the zero Time clears the expiry
	Tags      *map[string]string // replaces all tags
	// ExtendOnly makes ExpiresAt a lower bound: the expiry moves only
	// when that is later, and a row without one keeps none. It is decided
	// in the write, so no concurrent update is undone by a stale read.
	ExtendOnly bool
	// Spec replaces the service's spec JSON.
	Spec json.RawMessage
	// Lifecycle replaces the lifecycle rules; the sandbox's idle time
	// starts again (a change of its rules is activity).
	Lifecycle *Lifecycle
}

// UpdateSandbox applies u to sandbox id and returns the updated row, or ErrNotFound (also
// once a destroy began: an update never lands on a sandbox that is going away, so a
// timeout extension either beats the reaper or is answered not found).
// It is idempotent: applying the same update twice leaves the same row (bar UpdatedAt).
func (s *Store) UpdateSandbox(ctx context.Context, id string, u SandboxUpdate) (Sandbox, error) {
	sets := []string{"updated_at = ?"}
	args := []any{s.nowMillis()}
	switch {
	case u.ExpiresAt != nil && u.ExtendOnly && !u.ExpiresAt.IsZero():
		sets = append(sets, "expires_at = CASE WHEN expires_at IS NULL OR expires_at >= ? THEN expires_at ELSE ? END")
		args = append(args, millis(*u.ExpiresAt), millis(*u.ExpiresAt))
	case u.ExpiresAt != nil:
		sets, args = append(sets, "expires_at = ?"), append(args, nullMillis(*u.ExpiresAt))
	}
	if u.Tags != nil {
		tags, err := encodeMap(*u.Tags)
		if err != nil {
			return Sandbox{}, invalidf("update sandbox %s: tags: %v", id, err)
		}
		sets, args = append(sets, "tags = ?"), append(args, tags)
	}
	if l := u.Lifecycle; l != nil {
		sets = append(sets, "auto_stop_ms = ?", "auto_delete_ms = ?", "auto_archive_ms = ?", "last_activity_at = ?")
		args = append(args, max(0, l.AutoStop.Milliseconds()), l.autoDeleteMillis(), max(0, l.AutoArchive.Milliseconds()), args[0])
	}
	if u.Spec != nil {
		if !json.Valid(u.Spec) {
			return Sandbox{}, invalidf("update sandbox %s: spec is not JSON", id)
		}
		sets, args = append(sets, "spec = ?"), append(args, string(u.Spec))
	}
	args = append(args, id)
	var sb Sandbox
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes SET `+strings.Join(sets, ", ")+
			` WHERE id = ? AND destroying_since IS NULL RETURNING `+sandboxColumns, args...))
		return notFound(err)
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("update sandbox %s: %w", id, err)
	}
	return sb, nil
}

// DeleteSandbox deletes sandbox id together with its exposed ports, custom domains and
// mounts (foreign-key cascade) and frees its TAP slot, in one transaction. It returns
// ErrNotFound if the row does not exist, so a retry after success reports ErrNotFound.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return releaseTapSlot(ctx, tx, id)
	})
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}

// ListExpired returns the sandboxes whose ExpiresAt is set and not after now, soonest
// first, leaving out rows still being created (their timeout has not started), paused
// rows (their timeout does not run) and rows already being destroyed. It is a read: the reaper acts on each through BeginReap, which
// checks the expiry again under the writer.
func (s *Store) ListExpired(ctx context.Context, now time.Time) ([]Sandbox, error) {
	items, err := queryAll(ctx, s.reader, scanSandbox, `SELECT `+sandboxColumns+` FROM sandboxes
		WHERE expires_at IS NOT NULL AND expires_at <= ? AND state NOT IN (?, ?) AND destroying_since IS NULL
		ORDER BY expires_at, id`, millis(now), StateCreating, StatePaused)
	if err != nil {
		return nil, fmt.Errorf("list expired sandboxes: %w", err)
	}
	return items, nil
}

// ListStuckCreating returns the sandboxes still in StateCreating that were created before
// createdBefore, oldest first: the reconciler's candidates after a crash mid-create.
func (s *Store) ListStuckCreating(ctx context.Context, createdBefore time.Time) ([]Sandbox, error) {
	items, err := queryAll(ctx, s.reader, scanSandbox, `SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state = ? AND created_at < ? ORDER BY created_at, id`, StateCreating, millis(createdBefore))
	if err != nil {
		return nil, fmt.Errorf("list stuck sandboxes: %w", err)
	}
	return items, nil
}

// Usage is the capacity held by live sandboxes.
type Usage struct {
	Sandboxes int
	CPUMillis int64
	MemoryMB  int64
}

// LiveUsage sums CPU and memory over sandboxes that hold capacity (creating, running,
// paused, stopping), for admission. It reads a committed snapshot.
func (s *Store) LiveUsage(ctx context.Context) (Usage, error) {
	args := make([]any, len(liveStates))
	for i, st := range liveStates {
		args[i] = st
	}
	var u Usage
	err := s.reader.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(cpu_millis), 0),
		coalesce(sum(memory_mb), 0) FROM sandboxes WHERE state IN (`+placeholders(len(args))+`)`,
		args...).Scan(&u.Sandboxes, &u.CPUMillis, &u.MemoryMB)
	if err != nil {
		return Usage{}, fmt.Errorf("sum live usage: %w", err)
	}
	return u, nil
}

// CommitCreate moves sandbox id from creating to running and starts its timeout: expiresAt
// (zero: none) is set in the same write, so a sandbox's lifetime counts from the moment it
// runs and the reaper never sees a half-made sandbox as expired. ErrNotFound if the row is
// gone or its destroy began; a *StateConflictError if it is not creating.
func (s *Store) CommitCreate(ctx context.Context, id string, expiresAt time.Time) (Sandbox, error) {
	var sb Sandbox
	err := s.write(ctx, func(tx *sql.Tx) error {
		var cur SandboxState
		if err := tx.QueryRowContext(ctx, `SELECT state FROM sandboxes
			WHERE id = ? AND destroying_since IS NULL`, id).Scan(&cur); err != nil {
			return notFound(err)
		}
		if cur != StateCreating {
			return &StateConflictError{ID: id, Current: cur, Want: []SandboxState{StateCreating}}
		}
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET state = ?1, expires_at = ?2, error_reason = '', updated_at = ?3, last_activity_at = ?3 WHERE id = ?4
			RETURNING `+sandboxColumns, StateRunning, nullMillis(expiresAt), s.nowMillis(), id))
		return err
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("commit create of sandbox %s: %w", id, err)
	}
	return sb, nil
}

// BeginDestroy marks sandbox id as being destroyed and returns its row. From then on the
// row is invisible to lookups by name and to listings, and updates, state changes and a
// create's commit answer ErrNotFound; the caller tears the sandbox down and deletes the
// row last, and a destroy interrupted in between is finished by the reconciler (which
// lists rows with IncludeDestroying). Marking a row that is already marked keeps the
// first time and succeeds, so a retried destroy finishes the work. ErrNotFound if the
// row does not exist.
func (s *Store) BeginDestroy(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET destroying_since = coalesce(destroying_since, ?) WHERE id = ?
			RETURNING `+sandboxColumns, s.nowMillis(), id))
		return notFound(err)
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("begin destroy of sandbox %s: %w", id, err)
	}
	return sb, nil
}

// BeginRollBack is BeginDestroy for the reconciler's rollback of a create that will never
// finish: it marks sandbox id only if, under the writer, it is still creating and not
// already being destroyed. ok is false, with nothing changed, when the create committed
// (or the row went) since the reconciler listed it.
func (s *Store) BeginRollBack(ctx context.Context, id string) (sb Sandbox, ok bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET destroying_since = ? WHERE id = ? AND state = ? AND destroying_since IS NULL
			RETURNING `+sandboxColumns, s.nowMillis(), id, StateCreating))
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Sandbox{}, false, nil
	case err != nil:
		return Sandbox{}, false, fmt.Errorf("begin rollback of sandbox %s: %w", id, err)
	}
	return sb, true, nil
}

// BeginReap is BeginDestroy for the reaper: it marks sandbox id only if, under the writer,
// the sandbox has still expired at now (expiry set and not after now), is not being
// created, is not paused and is not already being destroyed. ok is false, with no error
// and nothing changed, when it no longer qualifies: its timeout was extended or cleared
// since the reaper listed it, it was paused, or it is gone.
func (s *Store) BeginReap(ctx context.Context, id string, now time.Time) (sb Sandbox, ok bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET destroying_since = ? WHERE id = ? AND expires_at IS NOT NULL AND expires_at <= ?
				AND state NOT IN (?, ?) AND destroying_since IS NULL
			RETURNING `+sandboxColumns, s.nowMillis(), id, millis(now), StateCreating, StatePaused))
		return err
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Sandbox{}, false, nil
	case err != nil:
		return Sandbox{}, false, fmt.Errorf("begin reap of sandbox %s: %w", id, err)
	}
	return sb, true, nil
}

// PoolClaim is what a create sets on the warm pool's idle sandbox it
// claims: everything that belongs to its owner.
type PoolClaim struct {
	ID                              string // the pooled sandbox
	Owner, Name                     string
	Tags, Env                       map[string]string
	SealedSecrets, AgentTokenSealed []byte // sealed for ID
	BootTokenSealed                 []byte // the token its agent booted with
	SSHPublicKey                    string
	Spec                            json.RawMessage
	// Claim, when not nil, is the idempotency claim the create runs
	// under: its target is set to ID in the same transaction.
	Claim *Claim
	// Delivery, when not nil, is a delivery claim of ID (NewDelivery),
	// written in the same transaction with DeliveryWindow: a delivery row
	// never names a sandbox that is still the pool's.
	Delivery       *Claim
	DeliveryWindow time.Duration
	// Commit ends the claim in this write: the row stays running and
	// expires at ExpiresAt (zero: never).
	Commit    bool
	ExpiresAt time.Time
	// Lifecycle is the owner's lifecycle rules for the sandbox.
	Lifecycle Lifecycle
}

// ClaimPooled hands the warm pool's idle sandbox c.ID to its owner in one
// write transaction: the row, running and owned by PoolOwner, takes the
// owner, name, tags, env, secrets, tokens and spec of c, its life starting
// now (CreatedAt). With c.Commit it stays running, expiring at c.ExpiresAt
// (zero: never): the claim is done. Without, it goes back to creating with
// no expiry until the caller commits it (CommitCreate), as a cold create
// does, and a crash in between leaves a creating row, which the startup
// pass rolls back. Two claims of one sandbox: exactly one succeeds.
//
// Errors: ErrNotFound if the row is gone, no longer the pool's, not
// running or being destroyed (nothing is written, and the caller takes
// another); ErrNameConflict if c.Owner already has c.Name; ErrClaimLost if
// c.Claim no longer holds its key. On error nothing is written.
func (s *Store) ClaimPooled(ctx context.Context, c PoolClaim) (Sandbox, error) {
	tags, err := encodeMap(c.Tags)
	if err != nil {
		return Sandbox{}, invalidf("claim pooled sandbox %s: tags: %v", c.ID, err)
	}
	env, err := encodeMap(c.Env)
	if err != nil {
		return Sandbox{}, invalidf("claim pooled sandbox %s: env: %v", c.ID, err)
	}
	spec := string(c.Spec)
	if spec == "" {
		spec = "{}"
	}
	var sb Sandbox
	err = s.write(ctx, func(tx *sql.Tx) error {
		if c.Claim != nil {
			res, err := tx.ExecContext(ctx, `UPDATE request_idempotency SET target_id = ?
				WHERE scope = ? AND fingerprint = ? AND token = ? AND state = ?`,
				c.ID, c.Claim.Scope, c.Claim.Fingerprint, c.Claim.token, claimPending)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return ErrClaimLost
			}
		}
		now := s.nowMillis()
		state, expires := StateCreating, sql.NullInt64{}
		if c.Commit {
			state, expires = StateRunning, nullMillis(c.ExpiresAt)
		}
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `UPDATE sandboxes
			SET owner = ?, name = ?, tags = ?, env = ?, sealed_secrets = ?, agent_token_sealed = ?,
				boot_token_sealed = ?, ssh_public_key = ?, spec = ?, state = ?, expires_at = ?,
				created_at = ?, updated_at = ?, last_activity_at = ?,
				auto_stop_ms = ?, auto_delete_ms = ?, auto_archive_ms = ?
			WHERE id = ? AND owner = ? AND state = ? AND destroying_since IS NULL
			RETURNING `+sandboxColumns,
			c.Owner, c.Name, tags, env, c.SealedSecrets, c.AgentTokenSealed,
			c.BootTokenSealed, c.SSHPublicKey, spec, state, expires,
			now, now, now,
			max(0, c.Lifecycle.AutoStop.Milliseconds()), c.Lifecycle.autoDeleteMillis(), max(0, c.Lifecycle.AutoArchive.Milliseconds()),
			c.ID, PoolOwner, StateRunning))
		if err = notFound(err); err != nil {
			return err
		}
		if c.Delivery != nil {
			if c.Delivery.TargetID != c.ID {
				return invalidf("the delivery claim names %s", c.Delivery.TargetID)
			}
			return insertDelivery(ctx, tx, *c.Delivery, c.DeliveryWindow, now)
		}
		return nil
	})
	switch {
	case isUniqueViolation(err):
		return Sandbox{}, fmt.Errorf("claim pooled sandbox %s: name %q: %w", c.ID, c.Name, ErrNameConflict)
	case err != nil:
		return Sandbox{}, fmt.Errorf("claim pooled sandbox %s: %w", c.ID, err)
	}
	return sb, nil
}
