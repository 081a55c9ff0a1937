package service

import (
	"cmp"
	"encoding/json"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/store"
)

// State is a sandbox's lifecycle state as the API shows it.
type State = store.SandboxState

// The lifecycle states.
const (
	StateCreating = store.StateCreating
	StateRunning  = store.StateRunning
	StatePaused   = store.StatePaused
	StateStopping = store.StateStopping
	StateStopped  = store.StateStopped
	StateError    = store.StateError
)

// List page sizes: ListFilter.Limit <= 0 is DefaultListLimit; larger than
// MaxListLimit is capped.
const (
	DefaultListLimit = store.DefaultListLimit
	MaxListLimit     = store.MaxListLimit
)

// Sandbox is the service's view of one sandbox. It never carries secrets:
// no agent token, no secret env, no private key.
type Sandbox struct {
	ID       string
	Name     string
	Owner    string
	Image    string
	State    State
	MilliCPU int64
	MemoryMB int64
	// DiskMB is the sandbox's disk limit in MiB (0 for sandboxes made
	// before disk limits); DiskEnforced says whether the kernel enforces
	// it (the runtime could when the sandbox was created).
	DiskMB       int64
	DiskEnforced bool
	Tags         map[string]string
	Env          map[string]string
	Network      bool
	// NetworkPolicy is the network policy in force.
	NetworkPolicy netpolicy.Policy
	// Runtime is what runs the sandbox: RuntimeDocker or RuntimeGVisor.
	Runtime      string
	Mounts       []Mount
	Annotations  map[string]string
	CreatedAt    time.Time
	ExpiresAt    time.Time // zero: no timeout
	SSHPublicKey string
	ErrorReason  string
	// PausedAt is when the sandbox was paused (zero unless StatePaused).
	PausedAt time.Time
	// HibernatedAt is when the paused sandbox was hibernated: its
	// processes and memory on disk, its memory freed (zero unless
	// hibernated; see Hibernate).
	HibernatedAt time.Time
	// PauseOnTimeout: the sandbox pauses instead of being destroyed when
	// its timeout passes (Lifecycle.PauseOnTimeout).
	PauseOnTimeout bool
	// Lifecycle is the sandbox's lifecycle rules (rules.go).
	Lifecycle Lifecycle
	// LastActivityAt is the last activity of the sandbox while it ran: its
	// auto-stop counts from it. StoppedAt is when it stopped (zero unless
	// stopped): its auto-delete and auto-archive count from it.
	// ArchivedAt is when it was archived (zero unless stopped and
	// archived: Archive, or its auto-archive).
	LastActivityAt, StoppedAt, ArchivedAt time.Time
}

// Created is the outcome of a create call.
type Created struct {
	Sandbox
	// SSHPrivateKey is shown once, in the create response; it is not stored.
	// Empty when the create was replayed (an idempotent retry).
	SSHPrivateKey string
	// Timings has one entry per create step, in order (Server-Timing).
	Timings []StepTiming
	// Replayed is true when an idempotent retry returned an earlier result.
	Replayed bool
	// Delivery, when set (OnceKey.Delivery), must be told before the
	// answer is written (HandOver) and if writing it failed (Failed).
	Delivery *Delivery
}

// StepTiming is how long one create step took.
type StepTiming struct {
	Step string
	// Desc says more of the step (the pool's is "hit").
	Desc     string
	Duration time.Duration
}

// sandboxSpec is the JSON kept in the sandboxes.spec column: what the
// service needs to start the sandbox again and to describe it, minus the
// columns of its own and minus secrets.
type sandboxSpec struct {
	Network bool `json:"network,omitempty"`
	// Policy is the network policy in force (nil: Network says open or none).
	Policy      *netpolicy.Policy `json:"network_policy,omitempty"`
	Mounts      []Mount           `json:"mounts,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Runtime     string            `json:"runtime,omitempty"`
	// SecretEnvKeys lists the names (not values) of sealed env vars.
	SecretEnvKeys []string `json:"secret_env_keys,omitempty"`
	// PauseOnTimeout: the reaper pauses the sandbox instead of destroying it.
	PauseOnTimeout bool `json:"pause_on_timeout,omitempty"`
	// TimeoutPause is how (Lifecycle.TimeoutPause).
	TimeoutPause PauseKind `json:"timeout_pause,omitempty"`
	// Wake, when set, is the sandbox's auto-resume (Lifecycle.AutoResume;
	// wake.go).
	Wake *wakeRule `json:"wake,omitempty"`
	// Failover is the create's (cluster.go): a sandbox recreated on
	// failover is recreated with its create's network policy.
	Failover string `json:"failover,omitempty"`
	// DiskMB is the disk limit the container was created with, and
	// DiskEnforced whether the runtime enforced it then.
	DiskMB       int64 `json:"disk_mb,omitempty"`
	DiskEnforced bool  `json:"disk_enforced,omitempty"`
	// DiskQuotaMB is the owner's disk quota the create was held to
	// (0: none): every hibernate's image is held to it, whoever asks.
	DiskQuotaMB int64 `json:"disk_quota_mb,omitempty"`
}

// ownerDiskQuota is the disk quota of the owner the sandbox's create was
// held to, as its spec keeps it (a row from before DiskQuotaMB: its
// auto-resume's), or 0.
func (spec sandboxSpec) ownerDiskQuota() int64 {
	if spec.DiskQuotaMB > 0 {
		return spec.DiskQuotaMB
	}
	if spec.Wake != nil {
		return spec.Wake.Quota.DiskMB
	}
	return 0
}

func fromRow(row store.Sandbox) Sandbox {
	var spec sandboxSpec
	_ = json.Unmarshal(row.Spec, &spec) // written by us; a bad row shows as empty spec
	return Sandbox{
		ID:            row.ID,
		Name:          row.Name,
		Owner:         row.Owner,
		Image:         row.Image,
		State:         row.State,
		MilliCPU:      row.CPUMillis,
		MemoryMB:      row.MemoryMB,
		DiskMB:        spec.DiskMB,
		DiskEnforced:  spec.DiskEnforced,
		Tags:          row.Tags,
		Env:           row.Env,
		Network:       spec.Network,
		NetworkPolicy: spec.policy(),
		Runtime:       cmp.Or(spec.Runtime, RuntimeDocker),
		Mounts:        spec.Mounts,
		Annotations:   spec.Annotations,
		CreatedAt:     row.CreatedAt,
		ExpiresAt:     row.ExpiresAt,
		SSHPublicKey:  row.SSHPublicKey,
		ErrorReason:   row.ErrorReason,
		PausedAt:      row.PausedAt,
		HibernatedAt:  row.HibernatedAt,

		PauseOnTimeout: spec.PauseOnTimeout,
		Lifecycle:      lifecycleOf(row, spec),
		LastActivityAt: row.LastActivityAt,
		StoppedAt:      row.StoppedAt,
		ArchivedAt:     row.ArchivedAt,
	}
}

// holding is the capacity a sandbox's row holds in admission: its CPU
// and memory on the host, its disk limit against its owner's quota.
func holding(row store.Sandbox) admission.Request {
	return admission.Request{MilliCPU: row.CPUMillis, MemoryMB: row.MemoryMB, DiskMB: specOf(row).DiskMB, Owner: row.Owner}
}

// specOf is a row's spec (empty for a row whose spec does not decode).
func specOf(row store.Sandbox) sandboxSpec {
	var spec sandboxSpec
	_ = json.Unmarshal(row.Spec, &spec) // written by us
	return spec
}

func marshalSpec(spec sandboxSpec) json.RawMessage {
	b, err := json.Marshal(spec)
	if err != nil {
		panic(fmt.Sprintf("marshal sandbox spec: %v", err)) // maps of strings always marshal
	}
	return b
}
