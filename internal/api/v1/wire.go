package v1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"math"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/service"
)

// The JSON shapes of docs/api-v1.md. Requests decode strictly (unknown
// fields are errors); absent optional values are omitted from answers.

// sandboxJSON is the sandbox object.
type sandboxJSON struct {
	ID       string  `json:"id"`
	Name     string  `json:"name,omitempty"`
	Owner    string  `json:"owner,omitempty"`
	Image    string  `json:"image"`
	State    string  `json:"state"`
	CPU      float64 `json:"cpu"`
	MemoryMB int64   `json:"memory_mb"`
	// DiskMB is the sandbox's disk limit (absent for sandboxes made
	// before disk limits); DiskEnforced whether the kernel enforces it.
	DiskMB        int64             `json:"disk_mb,omitempty"`
	DiskEnforced  bool              `json:"disk_enforced"`
	Tags          map[string]string `json:"tags"`
	Env           map[string]string `json:"env,omitempty"`
	Network       bool              `json:"network"`
	NetworkPolicy *netpolicy.Policy `json:"network_policy,omitempty"`
	Runtime       string            `json:"runtime"`
	Mounts        []mountJSON       `json:"mounts,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	ExpiresAt     *time.Time        `json:"expires_at,omitempty"`
	SSHPublicKey  string            `json:"ssh_public_key"`
	SSHPrivateKey string            `json:"ssh_private_key,omitempty"`
	ErrorReason   string            `json:"error_reason,omitempty"`
	PausedAt      *time.Time        `json:"paused_at,omitempty"`
	// HibernatedAt is when the paused sandbox was hibernated; only while
	// it is.
	HibernatedAt *time.Time `json:"hibernated_at,omitempty"`
	// Lifecycle is the sandbox's lifecycle rules (absent: none).
	Lifecycle *lifecycleJSON `json:"lifecycle,omitempty"`
	// StoppedAt is when the sandbox stopped, ArchivedAt when it was
	// archived (its auto-archive); both only while it is stopped.
	StoppedAt  *time.Time `json:"stopped_at,omitempty"`
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}

// lifecycleJSON is a sandbox's lifecycle rules (service.Lifecycle), in
// seconds. In a request an absent field is no rule.
type lifecycleJSON struct {
	// AutoStopS stops a running sandbox idle this long (0: never).
	AutoStopS *int64 `json:"auto_stop_s,omitempty"`
	// AutoDeleteS destroys a stopped sandbox this long after its stop; 0
	// at the stop itself; absent: never.
	AutoDeleteS *int64 `json:"auto_delete_s,omitempty"`
	// AutoArchiveS archives a stopped sandbox this long after its stop
	// (0: never).
	AutoArchiveS *int64 `json:"auto_archive_s,omitempty"`
	// OnTimeout is what the timeout does: "destroy" (the default) or
	// "pause".
	OnTimeout string `json:"on_timeout,omitempty"`
}

// toService is the service's rules, or a field error.
func (l *lifecycleJSON) toService() (service.Lifecycle, error) {
	var out service.Lifecycle
	if l == nil {
		return out, nil
	}
	switch l.OnTimeout {
	case "", "destroy":
	case "pause":
		out.PauseOnTimeout = true
	default:
		return out, &service.FieldError{Field: "lifecycle.on_timeout", Reason: fmt.Sprintf("must be \"destroy\" or \"pause\", not %q", l.OnTimeout)}
	}
	if l.AutoStopS != nil {
		out.AutoStop = seconds(*l.AutoStopS)
	}
	if l.AutoDeleteS != nil {
		out.AutoDelete, out.DeleteOnStop = seconds(*l.AutoDeleteS), *l.AutoDeleteS == 0
	}
	if l.AutoArchiveS != nil {
		out.AutoArchive = seconds(*l.AutoArchiveS)
	}
	return out, out.Validate()
}

// lifecycleFrom is l on the wire; nil for no rules.
func lifecycleFrom(l service.Lifecycle) *lifecycleJSON {
	if l == (service.Lifecycle{}) {
		return nil
	}
	secs := func(d time.Duration) *int64 {
		if d <= 0 {
			return nil
		}
		n := int64(d / time.Second)
		return &n
	}
	out := &lifecycleJSON{AutoStopS: secs(l.AutoStop), AutoDeleteS: secs(l.AutoDelete), AutoArchiveS: secs(l.AutoArchive)}
	if l.DeleteOnStop {
		out.AutoDeleteS = new(int64)
	}
	if l.PauseOnTimeout {
		out.OnTimeout = "pause"
	}
	return out
}

// resumeJSON is the answer to a resume: the sandbox, whether its
// processes were restarted (it was stopped, not paused), and whether its
// connections from outside were closed (restored from hibernation, or
// restarted).
type resumeJSON struct {
	sandboxJSON
	ProcessesRestarted bool `json:"processes_restarted"`
	// ConnectionsClosed: connections from outside did not survive
	// (Resumed.ConnectionsClosed); the client reconnects.
	ConnectionsClosed bool `json:"connections_closed"`
}

// hibernateJSON is the answer to a hibernate: the sandbox, and whether it
// was stopped instead, and why.
type hibernateJSON struct {
	sandboxJSON
	Stopped       bool   `json:"stopped"`
	StoppedReason string `json:"stopped_reason,omitempty"`
}

type mountJSON struct {
	Volume   string `json:"volume"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	Subpath  string `json:"subpath,omitempty"`
}

func toSandboxJSON(sb service.Sandbox) sandboxJSON {
	out := sandboxJSON{
		ID:           sb.ID,
		Name:         sb.Name,
		Owner:        sb.Owner,
		Image:        sb.Image,
		State:        string(sb.State),
		CPU:          float64(sb.MilliCPU) / 1000,
		MemoryMB:     sb.MemoryMB,
		DiskMB:       sb.DiskMB,
		DiskEnforced: sb.DiskEnforced,
		Tags:         sb.Tags,
		Env:          sb.Env,
		Network:      sb.Network,
		Runtime:      sb.Runtime,
		CreatedAt:    sb.CreatedAt.UTC(),
		SSHPublicKey: sb.SSHPublicKey,
		ErrorReason:  sb.ErrorReason,
	}
	if out.Tags == nil {
		out.Tags = map[string]string{}
	}
	if sb.Network {
		p := sb.NetworkPolicy
		out.NetworkPolicy = &p
	}
	for _, m := range sb.Mounts {
		out.Mounts = append(out.Mounts, mountJSON(m))
	}
	if !sb.ExpiresAt.IsZero() {
		t := sb.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	if !sb.PausedAt.IsZero() {
		t := sb.PausedAt.UTC()
		out.PausedAt = &t
	}
	if !sb.HibernatedAt.IsZero() {
		t := sb.HibernatedAt.UTC()
		out.HibernatedAt = &t
	}
	out.Lifecycle = lifecycleFrom(sb.Lifecycle)
	if !sb.StoppedAt.IsZero() {
		t := sb.StoppedAt.UTC()
		out.StoppedAt = &t
	}
	if !sb.ArchivedAt.IsZero() {
		t := sb.ArchivedAt.UTC()
		out.ArchivedAt = &t
	}
	return out
}

// createRequest is the body of POST /v1/sandboxes. Its JSON encoding, with
// sorted map keys and no whitespace, is also the canonical form hashed for
// Idempotency-Key reuse detection, so every field is omitempty: an absent
// field and its zero value hash alike.
type createRequest struct {
	Image string `json:"image,omitempty"`
	// Template is a template's id or name to create from, instead of an
	// image.
	Template  string            `json:"template,omitempty"`
	Name      string            `json:"name,omitempty"`
	CPU       float64           `json:"cpu,omitempty"`
	MemoryMB  int64             `json:"memory_mb,omitempty"`
	DiskMB    int64             `json:"disk_mb,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	SecretEnv map[string]string `json:"secret_env,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"`
	// TimeoutS is the sandbox's lifetime in seconds: absent, the daemon's
	// --default-timeout; 0, none. (A pointer, so that the two differ in
	// the canonical form too.)
	TimeoutS *int64       `json:"timeout_s,omitempty"`
	Network  *networkJSON `json:"network,omitempty"`
	Mounts   []mountJSON  `json:"mounts,omitempty"`
	Runtime  string       `json:"runtime,omitempty"`
	// Failover is what a cluster does when the sandbox's node is lost:
	// "recreate", or empty (it becomes lost).
	Failover string `json:"failover,omitempty"`
	// Lifecycle is the sandbox's lifecycle rules.
	Lifecycle *lifecycleJSON `json:"lifecycle,omitempty"`
}

// toService is the service's request for owner; a create that sends no
// timeout_s gets defaultTimeout.
func (c createRequest) toService(owner string, defaultTimeout time.Duration) (service.CreateRequest, error) {
	timeout := defaultTimeout
	if c.TimeoutS != nil {
		timeout = seconds(*c.TimeoutS)
	}
	rules, err := c.Lifecycle.toService()
	if err != nil {
		return service.CreateRequest{}, err
	}
	req := service.CreateRequest{
		Lifecycle: rules,
		Owner:     owner,
		Image:     c.Image,
		Template:  c.Template,
		Name:      c.Name,
		MilliCPU:  milliCPU(c.CPU),
		MemoryMB:  c.MemoryMB,
		DiskMB:    c.DiskMB,
		Env:       c.Env,
		SecretEnv: c.SecretEnv,
		Tags:      c.Tags,
		Timeout:   timeout,
		Runtime:   c.Runtime,
		Failover:  c.Failover,
	}
	for _, m := range c.Mounts {
		req.Mounts = append(req.Mounts, service.Mount(m))
	}
	if c.Network != nil {
		req.NetworkPolicy = c.Network.Policy
	}
	return req, nil
}

// networkJSON is a create's or an update's network: true (mode open),
// false (none), or a policy {"mode", "allow", "deny"}.
type networkJSON struct{ netpolicy.Policy }

func (n *networkJSON) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "true":
		n.Policy = netpolicy.Policy{Mode: netpolicy.ModeOpen}
		return nil
	case "false", "null":
		n.Policy = netpolicy.Policy{Mode: netpolicy.ModeNone}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p netpolicy.Policy
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("network: want true, false or {\"mode\", \"allow\", \"deny\"}: %w", err)
	}
	n.Policy = p
	return nil
}

func (n networkJSON) MarshalJSON() ([]byte, error) { return json.Marshal(n.Policy) }

// milliCPU converts cores to millicores for the service, which validates
// the range. The conversion keeps what validation needs to see: a negative
// stays negative, a positive that rounds to zero stays positive (zero
// would mean "default"), and a huge value saturates instead of wrapping.
func milliCPU(cores float64) int64 {
	m := math.Round(cores * 1000)
	switch {
	case cores == 0:
		return 0
	case m >= math.MaxInt64:
		return math.MaxInt64
	case m <= math.MinInt64:
		return math.MinInt64
	case cores > 0 && m < 1:
		return 1
	case cores < 0 && m > -1:
		return -1
	}
	return int64(m)
}

// seconds converts a wire timeout to a Duration, saturating instead of
// overflowing (the service rejects out-of-range values).
func seconds(s int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Second)
	switch {
	case s > limit:
		return math.MaxInt64
	case s < -limit:
		return math.MinInt64
	}
	return time.Duration(s) * time.Second
}

// updateRequest is the body of PATCH /v1/sandboxes/{id}.
type updateRequest struct {
	TimeoutS *int64            `json:"timeout_s"`
	Tags     map[string]string `json:"tags"`
	// Network replaces the sandbox's network policy (in force at once).
	Network *networkJSON `json:"network"`
	// Lifecycle replaces the sandbox's lifecycle rules (its idle time
	// starts again); {} clears them.
	Lifecycle *lifecycleJSON `json:"lifecycle"`
}

// listJSON is a page of a list route.
type listJSON[T any] struct {
	Items         []T    `json:"items"`
	NextPageToken string `json:"next_page_token,omitempty"`
}

// execRequest is the body of POST /v1/sandboxes/{id}/exec.
type execRequest struct {
	Cmd      []string          `json:"cmd"`
	Command  string            `json:"command"`
	Env      map[string]string `json:"env"`
	Cwd      string            `json:"cwd"`
	User     string            `json:"user"`
	Stdin    *string           `json:"stdin"`
	TimeoutS int64             `json:"timeout_s"`
}

type execResult struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	Truncated  bool   `json:"truncated"`
	// TimedOut is set when timeout_s killed the command (an addition to
	// the doc's shape; clients that do not know it see exit code 124).
	TimedOut bool `json:"timed_out,omitempty"`
}

// fileEntryJSON is one entry of GET …/files/list.
type fileEntryJSON struct {
	Name       string    `json:"name"`
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	Mode       uint32    `json:"mode"`
	ModifiedAt time.Time `json:"modified_at"`
}

// tokenRequest is the body of POST /v1/tokens.
type tokenRequest struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	Owner string `json:"owner"`
	// Quota absent: the daemon's default quota for new user tokens.
	Quota *quotaJSON `json:"quota"`
}

// quotaJSON is what a user token's owner may hold at once; 0 (or absent)
// is unlimited.
type quotaJSON struct {
	Sandboxes int64   `json:"sandboxes,omitempty"`
	CPU       float64 `json:"cpu,omitempty"`
	MemoryMB  int64   `json:"memory_mb,omitempty"`
	// DiskMB bounds the sum of the owner's sandboxes' disk limits.
	DiskMB int64 `json:"disk_mb,omitempty"`
}

func (q quotaJSON) toAuth() auth.Quota {
	return auth.Quota{Sandboxes: q.Sandboxes, MilliCPU: milliCPU(q.CPU), MemoryMB: q.MemoryMB, DiskMB: q.DiskMB}
}

func toQuotaJSON(q auth.Quota) *quotaJSON {
	if q == (auth.Quota{}) {
		return nil
	}
	return &quotaJSON{Sandboxes: q.Sandboxes, CPU: float64(q.MilliCPU) / 1000, MemoryMB: q.MemoryMB, DiskMB: q.DiskMB}
}

// tokenJSON describes a token; Token (the secret) only in the create answer.
type tokenJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	Owner     string     `json:"owner"`
	Quota     *quotaJSON `json:"quota,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	Token     string     `json:"token,omitempty"`
}
