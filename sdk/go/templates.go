package sandboxd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Template is an image sandboxes can be created from
// (CreateRequest.Template): built from a Recipe, or a snapshot of a
// sandbox's filesystem.
type Template struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	// Name is the name it was made under; Tags are the name:tag
	// references that point to it now (a newer build of the name takes
	// them).
	Name string   `json:"name,omitempty"`
	Tags []string `json:"tags,omitempty"`
	// Kind is "build" or "snapshot".
	Kind string `json:"kind"`
	// State is "building", "ready" (creates may name it) or "failed".
	State     string `json:"state"`
	BaseImage string `json:"base_image,omitempty"`
	// SourceID is the sandbox a snapshot was taken of.
	SourceID  string `json:"source_id,omitempty"`
	SizeBytes int64  `json:"size_bytes"`
	// Error says why a build failed.
	Error    string `json:"error,omitempty"`
	StartCmd string `json:"start_cmd,omitempty"`
	ReadyCmd string `json:"ready_cmd,omitempty"`
	User     string `json:"user,omitempty"`
	// Memory is set on a snapshot that holds its source's running
	// processes: every sandbox created from it starts with them.
	Memory    bool      `json:"memory,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Cached is set by BuildTemplate when the daemon already had a
	// template of the same recipe and base image: no build started.
	Cached bool `json:"-"`
}

// The states of a template.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

// Recipe is how to build a template: Steps run in order in a sandbox of
// Base (no network), and the result is captured.
type Recipe struct {
	// Name names the template once it is built: name:tag points to it for
	// each of Tags (default "latest"), moved from the build it pointed to.
	Name string   `json:"name,omitempty"`
	Tags []string `json:"tags,omitempty"`
	// Base is an image present on the daemon's host; empty is the
	// daemon's default image. FromTemplate builds over one of the
	// caller's templates instead (an id or name[:tag]).
	Base         string `json:"base,omitempty"`
	FromTemplate string `json:"from_template,omitempty"`
	Steps        []Step `json:"steps,omitempty"`
	// NoCache builds even when the same recipe was built before.
	NoCache bool `json:"no_cache,omitempty"`
	// StartCmd runs (a shell line, in the background) in every sandbox
	// created from the template; ReadyCmd, when set, runs until it exits
	// 0 before the create returns.
	StartCmd string `json:"start_cmd,omitempty"`
	ReadyCmd string `json:"ready_cmd,omitempty"`
}

// Step is one step of a recipe: set exactly one field (but for a run
// step's User).
type Step struct {
	// Run is a shell line; a non-zero exit fails the build.
	Run  string    `json:"run,omitempty"`
	Copy *CopyStep `json:"copy,omitempty"`
	// Env sets variables for later steps and the template's sandboxes.
	Env map[string]string `json:"env,omitempty"`
	// Workdir is the directory (created) later steps and the start
	// command run in.
	Workdir string `json:"workdir,omitempty"`
	// User runs later steps and the start command; set beside Run, it
	// runs that step only.
	User string `json:"user,omitempty"`
}

// CopyStep writes Content to the absolute Path (parents created), with
// Mode's permission bits when it is set; or, with Link set, makes Path a
// symbolic link to Link.
type CopyStep struct {
	Path    string `json:"path"`
	Content []byte `json:"content,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
	// Owner, when set, owns the file (written as root, then given to it).
	Owner string `json:"owner,omitempty"`
	Link  string `json:"link,omitempty"`
}

// BuildTemplate starts a build of r and returns its template, building;
// TemplateLogs follows it. When the daemon already has a template of the
// same recipe over the same base image (and that build did not fail), it
// returns that one with Cached set. That makes the call idempotent, and
// it is retried on transient failures.
func (c *Client) BuildTemplate(ctx context.Context, r Recipe) (*Template, error) {
	req := &request{method: http.MethodPost, segs: []string{"v1", "templates"}, retry: retrySafe}
	b, err := encode(r)
	if err != nil {
		return nil, err
	}
	req.body, req.buffer = b, true
	resp, err := c.send(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("build template: %w", err)
	}
	defer resp.Body.Close()
	var t Template
	if err := decode(resp.Body, &t); err != nil {
		return nil, fmt.Errorf("build template: %w", err)
	}
	t.Cached = resp.Header.Get("Template-Cached") == "true"
	return &t, nil
}

// GetTemplate returns the template with the given id or name. It fails
// with ErrNotFound when there is none (or it is another owner's).
func (c *Client) GetTemplate(ctx context.Context, idOrName string) (*Template, error) {
	var t Template
	r := &request{method: http.MethodGet, segs: []string{"v1", "templates", idOrName}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &t); err != nil {
		return nil, fmt.Errorf("get template %q: %w", idOrName, err)
	}
	return &t, nil
}

// ListTemplates returns the caller's templates and snapshots (an
// admin's: everyone's).
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var out struct {
		Templates []Template `json:"items"`
	}
	r := &request{method: http.MethodGet, segs: []string{"v1", "templates"}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &out); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out.Templates, nil
}

// DeleteTemplate deletes a template, given its id or name. It fails with
// ErrConflict while the template builds or while a sandbox made from it
// exists, and with ErrNotFound when there is none. Like DestroySandbox it
// resolves a name to an id first and is retried on transient failures, a
// not-found after an attempt that may have reached the daemon counting as
// success.
func (c *Client) DeleteTemplate(ctx context.Context, idOrName string) error {
	id := idOrName
	if !strings.HasPrefix(id, "tpl-") {
		t, err := c.GetTemplate(ctx, idOrName)
		if err != nil {
			return fmt.Errorf("delete template: %w", err)
		}
		id = t.ID
	}
	r := &request{method: http.MethodDelete, segs: []string{"v1", "templates", id}, retry: retryDelete}
	if err := c.do(ctx, r, nil, nil); err != nil {
		return fmt.Errorf("delete template %q: %w", idOrName, err)
	}
	return nil
}

// TagTemplate points name:tag, for each of tags, at the template target
// names (an id or name[:tag]), moving a tag that pointed elsewhere. It is
// idempotent and retried on transient failures.
func (c *Client) TagTemplate(ctx context.Context, target, name string, tags ...string) (*Template, error) {
	var t Template
	req := &request{method: http.MethodPost, segs: []string{"v1", "templates", target, "tags"}, retry: retrySafe}
	b, err := encode(struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}{name, tags})
	if err != nil {
		return nil, err
	}
	req.body, req.buffer = b, true
	if err := c.do(ctx, req, nil, &t); err != nil {
		return nil, fmt.Errorf("tag template %q: %w", target, err)
	}
	return &t, nil
}

// UntagTemplate removes name:tag (the template stays, by its id);
// ErrNotFound when it is not there.
func (c *Client) UntagTemplate(ctx context.Context, name, tag string) error {
	r := &request{method: http.MethodDelete, segs: []string{"v1", "templates", name, "tags", tag}, retry: retryDelete}
	if err := c.do(ctx, r, nil, nil); err != nil {
		return fmt.Errorf("untag %s:%s: %w", name, tag, err)
	}
	return nil
}

// TemplateLogs writes a build's output to w as the daemon sends it, from
// the build's start, and returns when the build ends (GetTemplate then
// says how). The request is retried on transient failures until the
// output starts; a connection lost afterwards is an error (call again to
// read the output from the start).
func (c *Client) TemplateLogs(ctx context.Context, idOrName string, w io.Writer) error {
	r := &request{
		method: http.MethodGet,
		segs:   []string{"v1", "templates", idOrName, "logs"},
		header: http.Header{"Accept": {"text/plain"}},
		retry:  retrySafe,
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return fmt.Errorf("logs of template %q: %w", idOrName, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("logs of template %q: %w", idOrName, err)
	}
	return nil
}

// Snapshot captures a sandbox's filesystem (running, paused or stopped)
// as a template, named name unless it is empty, and returns it, ready.
// It is not retried: a repeat would take a second snapshot.
func (c *Client) Snapshot(ctx context.Context, sandboxID, name string) (*Template, error) {
	return c.snapshot(ctx, sandboxID, name, false)
}

// SnapshotWithMemory is Snapshot that holds the running sandbox's
// processes and memory too: every sandbox created from it starts with
// them, where they were, with the source's runtime and size (a create
// that asks for others is ErrInvalidArgument). The source pauses for the
// checkpoint and runs on. Only a daemon that checkpoints the source's
// runtime can (--engine oci, gVisor sandboxes); elsewhere the answer is
// ErrInvalidArgument naming why. The snapshot stays on the node that took
// it.
func (c *Client) SnapshotWithMemory(ctx context.Context, sandboxID, name string) (*Template, error) {
	return c.snapshot(ctx, sandboxID, name, true)
}

func (c *Client) snapshot(ctx context.Context, sandboxID, name string, memory bool) (*Template, error) {
	var t Template
	in := struct {
		Name   string `json:"name,omitempty"`
		Memory bool   `json:"memory,omitempty"`
	}{name, memory}
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", sandboxID, "snapshots"}, retry: retryNever}
	if err := c.do(ctx, r, in, &t); err != nil {
		return nil, fmt.Errorf("snapshot sandbox %q: %w", sandboxID, err)
	}
	return &t, nil
}

// Fork makes n sandboxes (1 to 16) from a sandbox's current filesystem,
// each with its own id and SSH key (SSHPrivateKey set) and the source's
// size, env, secret env, tags, network and runtime. All or none. It is
// not retried: a repeat would fork again.
func (c *Client) Fork(ctx context.Context, sandboxID string, n int) ([]Sandbox, error) {
	return c.fork(ctx, sandboxID, n, false)
}

// ForkWithMemory is Fork whose sandboxes start with the source's running
// processes and memory (a copy each, going on independently). The source
// must be running; it pauses for the checkpoint and runs on. Only a
// daemon that checkpoints the source's runtime can (--engine oci, gVisor
// sandboxes); elsewhere the answer is ErrInvalidArgument naming why.
func (c *Client) ForkWithMemory(ctx context.Context, sandboxID string, n int) ([]Sandbox, error) {
	return c.fork(ctx, sandboxID, n, true)
}

func (c *Client) fork(ctx context.Context, sandboxID string, n int, memory bool) ([]Sandbox, error) {
	var out struct {
		Sandboxes []Sandbox `json:"sandboxes"`
	}
	in := struct {
		Count  int  `json:"count"`
		Memory bool `json:"memory,omitempty"`
	}{n, memory}
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", sandboxID, "fork"}, retry: retryNever}
	if err := c.do(ctx, r, in, &out); err != nil {
		return nil, fmt.Errorf("fork sandbox %q: %w", sandboxID, err)
	}
	return out.Sandboxes, nil
}
