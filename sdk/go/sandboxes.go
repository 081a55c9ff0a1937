package sandboxd

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// State is the lifecycle state of a sandbox.
type State string

// The states of a sandbox.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	// StatePaused: running with its processes frozen in memory (PauseSandbox).
	StatePaused   State = "paused"
	StateStopping State = "stopping"
	StateStopped  State = "stopped"
	StateError    State = "error"
)

// Sandbox is the API's sandbox object.
type Sandbox struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Owner is the tenant that owns the sandbox.
	Owner    string  `json:"owner,omitempty"`
	Image    string  `json:"image"`
	State    State   `json:"state"`
	CPU      float64 `json:"cpu"`
	MemoryMB int     `json:"memory_mb"`
	// DiskMB is the sandbox's disk limit in MiB: what it may write to its
	// own file system (uploads included). DiskEnforced says whether the
	// host's kernel enforces it (a write past it fails with ENOSPC or
	// EDQUOT) or it is only recorded (the daemon logs why at start).
	DiskMB       int               `json:"disk_mb,omitempty"`
	DiskEnforced bool              `json:"disk_enforced,omitempty"`
	Tags         map[string]string `json:"tags,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Network      bool              `json:"network"`
	// NetworkPolicy is the policy in force when it has network.
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
	// CreatedAt is when the sandbox was created (UTC).
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the daemon destroys the sandbox; zero when it has
	// no timeout.
	ExpiresAt    time.Time `json:"expires_at,omitzero"`
	SSHPublicKey string    `json:"ssh_public_key,omitempty"`
	// SSHPrivateKey is set only on the result of CreateSandbox: the daemon
	// never returns it again.
	SSHPrivateKey string `json:"ssh_private_key,omitempty"`
	// ErrorReason explains StateError.
	ErrorReason string `json:"error_reason,omitempty"`
	// PausedAt is when the sandbox was paused; zero unless StatePaused.
	PausedAt time.Time `json:"paused_at,omitzero"`
	// HibernatedAt is when the paused sandbox was hibernated (its
	// processes on disk, its memory freed); zero unless it is.
	HibernatedAt time.Time `json:"hibernated_at,omitzero"`
	// Lifecycle is the sandbox's lifecycle rules; nil when it has none.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	// StoppedAt is when the sandbox stopped and ArchivedAt when it was
	// archived; zero unless it is stopped (and archived).
	StoppedAt  time.Time `json:"stopped_at,omitzero"`
	ArchivedAt time.Time `json:"archived_at,omitzero"`
}

// Lifecycle is what the daemon does to a sandbox nobody acts on. The
// daemon applies it from its database, so it holds across restarts.
type Lifecycle struct {
	// AutoStopS stops a running sandbox idle this many seconds (its
	// files kept); 0: never.
	AutoStopS int64 `json:"auto_stop_s,omitempty"`
	// AutoDeleteS destroys a stopped sandbox this many seconds after its
	// stop; a pointer to 0 destroys it at the stop; nil: never.
	AutoDeleteS *int64 `json:"auto_delete_s,omitempty"`
	// AutoArchiveS archives a stopped sandbox this many seconds after its
	// stop; 0: never.
	AutoArchiveS int64 `json:"auto_archive_s,omitempty"`
	// OnTimeout is what its timeout does: "destroy" (the default) or
	// "pause".
	OnTimeout string `json:"on_timeout,omitempty"`
}

// Mount binds a named volume (a directory the daemon keeps) into a sandbox.
type Mount struct {
	Volume   string `json:"volume"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Subpath mounts only this directory of the volume (a clean relative
	// path, made when missing); empty mounts the whole volume.
	Subpath string `json:"subpath,omitempty"`
}

// CreateRequest describes a sandbox to create. Zero fields take the
// daemon's defaults.
type CreateRequest struct {
	Image string `json:"image,omitempty"`
	// Template is a ready template's id or name to create from, instead
	// of Image. Its start command runs in the sandbox before the create
	// returns.
	Template string  `json:"template,omitempty"`
	Name     string  `json:"name,omitempty"`
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int     `json:"memory_mb,omitempty"`
	// DiskMB is the disk limit in MiB; 0 takes the daemon's default.
	DiskMB int `json:"disk_mb,omitempty"`
	// Env is visible to every process in the sandbox and is returned by
	// the API; SecretEnv is too, but is stored sealed and never returned.
	Env       map[string]string `json:"env,omitempty"`
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"`
	// Timeout is the sandbox's lifetime, counted from creation, rounded up
	// to whole seconds; zero takes the daemon's default (--default-timeout,
	// 1 h unless its operator changed it).
	Timeout time.Duration `json:"-"`
	// NoTimeout asks for a sandbox that never expires (timeout_s 0 on the
	// wire) when Timeout is zero: it lives until destroyed, holding its
	// share of the host and the owner's quota.
	NoTimeout bool `json:"-"`
	// Network gives the sandbox outbound network access (mode open);
	// NetworkPolicy, when set, says where it may connect instead.
	Network       bool           `json:"-"`
	NetworkPolicy *NetworkPolicy `json:"-"`
	Mounts        []Mount        `json:"mounts,omitempty"`
	Runtime       string         `json:"runtime,omitempty"`
	// Lifecycle is the sandbox's lifecycle rules (auto-stop, auto-delete,
	// auto-archive, pause on timeout); nil: none.
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`

	// IdempotencyKey is sent as the Idempotency-Key header. Empty means a
	// fresh random key per CreateSandbox call (NewIdempotencyKey). Set it
	// to make a create safe to repeat across calls or processes: the
	// daemon answers a repeat with the first call's sandbox.
	IdempotencyKey string `json:"-"`
}

// createBody is the wire form of CreateRequest.
type createBody struct {
	CreateRequest
	// TimeoutS is absent for the daemon's default, 0 for none.
	TimeoutS *int64 `json:"timeout_s,omitempty"`
	// Network is true, or a policy.
	Network any `json:"network,omitempty"`
}

// NetworkPolicy is where a sandbox with network may connect.
type NetworkPolicy struct {
	// Mode is "none", "open" (anywhere but Deny) or "restricted" (Allow
	// only, minus Deny).
	Mode string `json:"mode"`
	// Allow lists CIDRs and host names (honoured for HTTP and TLS on
	// ports 80 and 443; "*.example.com" for the names under it).
	Allow []string `json:"allow,omitempty"`
	// Deny lists CIDRs nothing reaches.
	Deny []string `json:"deny,omitempty"`
}

// The network modes.
const (
	NetworkNone       = "none"
	NetworkOpen       = "open"
	NetworkRestricted = "restricted"
)

func networkOf(req CreateRequest) any {
	switch {
	case req.NetworkPolicy != nil:
		return req.NetworkPolicy
	case req.Network:
		return true
	}
	return nil
}

// SetNetworkPolicy replaces a running sandbox's network policy; it holds
// for its next connection when this returns. A sandbox keeps having
// network or not for its life.
func (c *Client) SetNetworkPolicy(ctx context.Context, id string, p NetworkPolicy) (*Sandbox, error) {
	var sb Sandbox
	r := &request{method: http.MethodPatch, segs: []string{"v1", "sandboxes", id}, retry: retrySafe}
	if err := c.do(ctx, r, map[string]any{"network": p}, &sb); err != nil {
		return nil, fmt.Errorf("set the network policy of %q: %w", id, err)
	}
	return &sb, nil
}

// seconds rounds d up to whole seconds; the API counts in seconds and a
// positive duration must not become "no timeout".
// timeoutOf is a create's timeout_s: nil (the daemon's default), 0 (none)
// or the lifetime in seconds.
func timeoutOf(req CreateRequest) *int64 {
	s := seconds(req.Timeout)
	if s == 0 && !req.NoTimeout {
		return nil
	}
	return &s
}

func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// CreateSandbox creates a sandbox and returns it, with SSHPrivateKey set.
//
// The request carries an Idempotency-Key (req.IdempotencyKey or a fresh
// random one) and is retried on transient failures (transport errors, 429
// after its Retry-After, 500, 502, 503, 504) with the same key and the
// same body, so a retry returns the sandbox the first attempt created
// instead of creating a second one. A name already in use fails with
// ErrNameConflict; a key reused with a different body with
// ErrIdempotencyKeyReused.
func (c *Client) CreateSandbox(ctx context.Context, req CreateRequest) (*Sandbox, error) {
	key := req.IdempotencyKey
	if key == "" {
		key = NewIdempotencyKey()
	}
	r := &request{
		method: http.MethodPost,
		segs:   []string{"v1", "sandboxes"},
		header: http.Header{"Idempotency-Key": {key}},
		retry:  retrySafe,
	}
	var sb Sandbox
	if err := c.do(ctx, r, createBody{req, timeoutOf(req), networkOf(req)}, &sb); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	return &sb, nil
}

// GetSandbox returns the sandbox with the given id or name. It fails with
// ErrNotFound when there is none (or it belongs to another owner).
func (c *Client) GetSandbox(ctx context.Context, idOrName string) (*Sandbox, error) {
	var sb Sandbox
	r := &request{method: http.MethodGet, segs: []string{"v1", "sandboxes", idOrName}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &sb); err != nil {
		return nil, fmt.Errorf("get sandbox %q: %w", idOrName, err)
	}
	return &sb, nil
}

// ListOptions filters and pages ListSandboxes. Zero fields do not filter.
type ListOptions struct {
	Name string
	// Tags selects sandboxes carrying every one of these tags.
	Tags  map[string]string
	State State
	// Limit is the page size, 1 to 1000; 0 means the daemon's default (100).
	Limit int
	// PageToken continues from a previous page's NextPageToken.
	PageToken string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.Name != "" {
		q.Set("name", o.Name)
	}
	for k, v := range o.Tags {
		q.Set("tag."+k, v)
	}
	if o.State != "" {
		q.Set("state", string(o.State))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.PageToken != "" {
		q.Set("page_token", o.PageToken)
	}
	return q
}

// SandboxPage is one page of ListSandboxes.
type SandboxPage struct {
	Items []Sandbox `json:"items"`
	// NextPageToken fetches the next page; empty on the last one.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// ListSandboxes returns one page of the caller's sandboxes. See
// AllSandboxes to walk every page.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (*SandboxPage, error) {
	var page SandboxPage
	r := &request{method: http.MethodGet, segs: []string{"v1", "sandboxes"}, query: opts.query(), retry: retrySafe}
	if err := c.do(ctx, r, nil, &page); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return &page, nil
}

// AllSandboxes yields every sandbox matching opts, fetching pages as the
// loop needs them (opts.Limit sets the page size; opts.PageToken is where
// to start). A failed page is yielded as (nil, err) and ends the sequence.
//
//	for sb, err := range c.AllSandboxes(ctx, sandboxd.ListOptions{}) {
//		if err != nil { return err }
//		fmt.Println(sb.ID)
//	}
//
// Sandboxes created or destroyed during the walk may or may not appear.
func (c *Client) AllSandboxes(ctx context.Context, opts ListOptions) iter.Seq2[*Sandbox, error] {
	return func(yield func(*Sandbox, error) bool) {
		for {
			page, err := c.ListSandboxes(ctx, opts)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range page.Items {
				if !yield(&page.Items[i], nil) {
					return
				}
			}
			if page.NextPageToken == "" || page.NextPageToken == opts.PageToken {
				return
			}
			opts.PageToken = page.NextPageToken
		}
	}
}

// DestroySandbox destroys a sandbox, given its id or name.
//
// It fails with ErrNotFound when the sandbox does not exist. It retries
// transient failures, and a retry that finds the sandbox gone after an
// earlier attempt that may have reached the daemon (the connection broke,
// or the daemon answered 5xx) counts as success: that attempt destroyed
// it. The window this leaves is a sandbox destroyed by someone else
// between our attempts, which is also reported as success; the outcome
// (the sandbox is gone) is the same.
//
// Because a name can be taken again as soon as its sandbox is gone, a
// name is first resolved to an id (one extra round trip) and the id is
// destroyed, so that a retry can never destroy a newer sandbox that took
// the name in the meantime.
func (c *Client) DestroySandbox(ctx context.Context, idOrName string) error {
	id := idOrName
	if !IsSandboxID(id) {
		sb, err := c.GetSandbox(ctx, idOrName)
		if err != nil {
			return fmt.Errorf("destroy sandbox: %w", err)
		}
		id = sb.ID
	}
	r := &request{method: http.MethodDelete, segs: []string{"v1", "sandboxes", id}, retry: retryDelete}
	if err := c.do(ctx, r, nil, nil); err != nil {
		return fmt.Errorf("destroy sandbox %q: %w", idOrName, err)
	}
	return nil
}

// StartSandbox starts a stopped sandbox and returns it. It is retried on
// transient failures: start names a target state, so repeating it after
// an attempt that succeeded asks for what already holds.
func (c *Client) StartSandbox(ctx context.Context, id string) (*Sandbox, error) {
	return c.lifecycle(ctx, id, "start")
}

// StopSandbox stops a running sandbox and returns it; StartSandbox starts
// it again. It is retried on transient failures, like StartSandbox.
func (c *Client) StopSandbox(ctx context.Context, id string) (*Sandbox, error) {
	return c.lifecycle(ctx, id, "stop")
}

// PauseSandbox freezes a running sandbox's processes in memory and returns
// it; pausing a paused sandbox returns it unchanged. Until ResumeSandbox,
// exec and file calls fail with a conflict. A sandbox paused for longer
// than the daemon's --pause-max is stopped, its file system kept. It is
// retried on transient failures, like StartSandbox.
func (c *Client) PauseSandbox(ctx context.Context, id string) (*Sandbox, error) {
	return c.lifecycle(ctx, id, "pause")
}

// Hibernated is the result of HibernateSandbox.
type Hibernated struct {
	Sandbox
	// Stopped: the daemon's runtime cannot checkpoint this sandbox, and
	// stopped it instead (its file system kept); StoppedReason says why.
	Stopped       bool   `json:"stopped"`
	StoppedReason string `json:"stopped_reason,omitempty"`
}

// HibernateSandbox checkpoints a running or paused sandbox's processes
// and memory to disk and frees its memory; ResumeSandbox (or
// StartSandbox) restores them where they were, across daemon restarts.
// Where the daemon's runtime cannot checkpoint the sandbox it is stopped
// instead, and Hibernated.Stopped says so. Hibernating a hibernated
// sandbox returns it unchanged. It is retried on transient failures, like
// StartSandbox.
func (c *Client) HibernateSandbox(ctx context.Context, id string) (*Hibernated, error) {
	var res Hibernated
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", id, "hibernate"}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &res); err != nil {
		return nil, fmt.Errorf("hibernate sandbox %q: %w", id, err)
	}
	return &res, nil
}

// Resumed is the result of ResumeSandbox.
type Resumed struct {
	Sandbox
	// ProcessesRestarted: the sandbox was not paused but stopped (paused
	// past the daemon's --pause-max, say) and was started; its file system
	// was kept, its processes were not.
	ProcessesRestarted bool `json:"processes_restarted"`
	// ConnectionsClosed: connections from outside the sandbox (exec and
	// file streams, port tunnels, preview connections) did not survive:
	// it was restored from hibernation, or its processes restarted.
	// Reconnect.
	ConnectionsClosed bool `json:"connections_closed"`
}

// ResumeSandbox thaws a paused sandbox (its processes continue where they
// were) or starts a stopped one (Resumed.ProcessesRestarted), and returns
// it; resuming a running sandbox returns it unchanged. It is retried on
// transient failures, like StartSandbox.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (*Resumed, error) {
	var res Resumed
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", id, "resume"}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &res); err != nil {
		return nil, fmt.Errorf("resume sandbox %q: %w", id, err)
	}
	return &res, nil
}

func (c *Client) lifecycle(ctx context.Context, id, verb string) (*Sandbox, error) {
	var sb Sandbox
	r := &request{method: http.MethodPost, segs: []string{"v1", "sandboxes", id, verb}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &sb); err != nil {
		return nil, fmt.Errorf("%s sandbox %q: %w", verb, id, err)
	}
	return &sb, nil
}

// UpdateRequest changes a sandbox. Nil fields are left as they are.
type UpdateRequest struct {
	// Timeout sets the sandbox's remaining lifetime, counted from the
	// daemon's receipt of the request; a pointer to 0 removes the timeout.
	Timeout *time.Duration
	// Tags, when non-nil, replaces the sandbox's tags; an empty non-nil
	// map removes them all.
	Tags map[string]string
}

type updateBody struct {
	TimeoutS *int64            `json:"timeout_s,omitempty"`
	Tags     map[string]string `json:"tags,omitzero"`
}

// UpdateSandbox applies req and returns the updated sandbox. It is
// retried on transient failures: applying the same update twice has the
// effect of applying it once (a timeout then counts from the later
// attempt).
func (c *Client) UpdateSandbox(ctx context.Context, id string, req UpdateRequest) (*Sandbox, error) {
	var body updateBody
	if req.Timeout != nil {
		s := seconds(*req.Timeout)
		body.TimeoutS = &s
	}
	body.Tags = req.Tags
	var sb Sandbox
	r := &request{method: http.MethodPatch, segs: []string{"v1", "sandboxes", id}, retry: retrySafe}
	if err := c.do(ctx, r, body, &sb); err != nil {
		return nil, fmt.Errorf("update sandbox %q: %w", id, err)
	}
	return &sb, nil
}

// IsSandboxID reports whether s has the form of a sandbox id: "sb-" and 16
// lowercase hex digits. Anything else given where the API takes an id or
// a name is a name.
func IsSandboxID(s string) bool {
	if len(s) != 19 || s[:3] != "sb-" {
		return false
	}
	for i := 3; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
