package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service/builds"
	"github.com/sandboxd/sandboxd/internal/service/warmpool"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Store is what the service needs of the database, grouped by noun (each
// part's small interface below); *store.Store is the implementation and
// tests wrap it to inject faults.
type Store interface {
	SandboxStore
	ExposureStore
	ClaimStore
	DeliveryStore
	TemplateStore
	RegistryStore
}

// SandboxStore is the sandboxes table: rows, their states and lifecycle
// timers, and their sealed mounts.
type SandboxStore interface {
	CreateSandbox(ctx context.Context, sb *store.Sandbox) error
	GetSandbox(ctx context.Context, id string) (store.Sandbox, error)
	GetSandboxByName(ctx context.Context, owner, name string) (store.Sandbox, error)
	ListSandboxes(ctx context.Context, f store.ListFilter) ([]store.Sandbox, string, error)
	UpdateSandboxState(ctx context.Context, id string, from []store.SandboxState, to store.SandboxState, reason string) (store.Sandbox, error)
	UpdateSandbox(ctx context.Context, id string, u store.SandboxUpdate) (store.Sandbox, error)
	CommitCreate(ctx context.Context, id string, expiresAt time.Time) (store.Sandbox, error)
	ClaimPooled(ctx context.Context, c store.PoolClaim) (store.Sandbox, error)
	PauseSandbox(ctx context.Context, id string) (store.Sandbox, error)
	ResumeSandbox(ctx context.Context, id string) (store.Sandbox, error)
	PauseExpiredSandbox(ctx context.Context, id string, now time.Time) (store.Sandbox, bool, error)
	ListPausedBefore(ctx context.Context, before time.Time) ([]store.Sandbox, error)
	MarkHibernated(ctx context.Context, id string) (store.Sandbox, error)
	ClearHibernated(ctx context.Context, id string) (store.Sandbox, error)
	TouchSandbox(ctx context.Context, id string, at time.Time) error
	ListIdle(ctx context.Context, now time.Time) ([]store.Sandbox, error)
	ListAutoDeleteDue(ctx context.Context, now time.Time) ([]store.Sandbox, error)
	BeginAutoDelete(ctx context.Context, id string, now time.Time) (store.Sandbox, bool, error)
	ArchiveDue(ctx context.Context, now time.Time) (int, error)
	ArchiveSandbox(ctx context.Context, id string, archived bool) (store.Sandbox, error)
	BeginDestroy(ctx context.Context, id string) (store.Sandbox, error)
	BeginReap(ctx context.Context, id string, now time.Time) (store.Sandbox, bool, error)
	BeginRollBack(ctx context.Context, id string) (store.Sandbox, bool, error)
	DeleteSandbox(ctx context.Context, id string) error
	ListExpired(ctx context.Context, now time.Time) ([]store.Sandbox, error)
	PutSandboxMounts(ctx context.Context, sandboxID string, sealed [][]byte) error
}

// ExposureStore is what a sandbox exposes: its ports (and the host ports
// they hold) and its custom domains.
type ExposureStore interface {
	TryReserveHostPort(ctx context.Context, req store.PortRequest, candidate int) (store.ReserveOutcome, store.ExposedPort, error)
	ReserveHostPort(ctx context.Context, req store.PortRequest, pool store.PortRange, bind func(hostPort int) error) (store.ExposedPort, bool, error)
	ReleaseReservation(ctx context.Context, ep store.ExposedPort) (bool, error)
	DeleteExposedPort(ctx context.Context, sandboxID string, port int) (bool, error)
	ListExposedPorts(ctx context.Context, sandboxID string) ([]store.ExposedPort, error)
	ListAllExposedPorts(ctx context.Context) ([]store.ExposedPort, error)
	AddCustomDomain(ctx context.Context, hostname, sandboxID string, port int) (bool, error)
	PutCustomDomain(ctx context.Context, hostname, sandboxID string, port int) (bool, int64, error)
	ReleaseCustomDomain(ctx context.Context, sandboxID, hostname string, token int64) (bool, error)
	RemoveCustomDomain(ctx context.Context, sandboxID, hostname string) (bool, error)
	ListCustomDomains(ctx context.Context, sandboxID string) ([]store.CustomDomain, error)
	ListAllCustomDomains(ctx context.Context) ([]store.CustomDomain, error)
	ClaimCustomDomain(ctx context.Context, c store.DomainClaim) (store.CustomDomain, store.DomainOutcome, error)
	VerifyCustomDomain(ctx context.Context, sandboxID, hostname string) (bool, int64, error)
	UnverifyCustomDomain(ctx context.Context, sandboxID, hostname string, token int64) (bool, error)
	NoteCustomDomainCheck(ctx context.Context, sandboxID, hostname, why string, retryUntil time.Time) error
	ListPendingCustomDomains(ctx context.Context, limit int) ([]store.CustomDomain, error)
	GetSandboxCustomDomain(ctx context.Context, sandboxID, hostname string) (store.CustomDomain, error)
}

// ClaimStore is the idempotency claims of keyed creates (CreateOnce).
type ClaimStore interface {
	Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error)
	PeekClaim(ctx context.Context, req store.ClaimRequest) (store.Claim, error)
	Complete(ctx context.Context, c store.Claim, targetID string, replayWindow time.Duration) error
	DeleteClaim(ctx context.Context, c store.Claim) (bool, error)
	AttachClaimTarget(ctx context.Context, c store.Claim, targetID string) error
	ExtendClaim(ctx context.Context, c store.Claim, ttl time.Duration) error
	ReleaseClaim(ctx context.Context, c store.Claim) error
	ReleasePendingClaims(ctx context.Context) (int64, error)
	ListStaleClaims(ctx context.Context, limit int) ([]store.StaleClaim, error)
	DeleteStaleClaim(ctx context.Context, c store.StaleClaim) (bool, error)
}

// DeliveryStore is the delivery claims of unkeyed E2B creates
// (delivery.go).
type DeliveryStore interface {
	BeginDelivery(ctx context.Context, scope, fingerprint, target string, window time.Duration) (store.Claim, error)
	HasUndelivered(ctx context.Context, scope, fingerprint string) (bool, error)
	AdoptUndelivered(ctx context.Context, scope, fingerprint string) (store.Claim, bool, error)
	Abandon(ctx context.Context, c store.Claim) (bool, error)
	HandOver(ctx context.Context, c store.Claim) (bool, error)
	Reoffer(ctx context.Context, c store.Claim, window time.Duration) error
	AbandonInflight(ctx context.Context) (int64, error)
	ExpireUndelivered(ctx context.Context, c store.Claim) (store.ExpireOutcome, error)
	ListExpiredUndelivered(ctx context.Context, limit int) ([]store.Claim, error)
}

// TemplateStore is the templates part's table: templates, snapshots,
// forks and their tags (templates.go and its sibling template*.go files).
type TemplateStore interface {
	CreateTemplate(ctx context.Context, t store.Template) (store.Template, error)
	FinishTemplate(ctx context.Context, id string, sizeBytes int64, tags ...string) (store.Template, error)
	FailTemplate(ctx context.Context, id, reason string) (store.Template, error)
	GetTemplate(ctx context.Context, id string) (store.Template, error)
	GetTemplateByTag(ctx context.Context, owner, name, tag string) (store.Template, error)
	GetNewestTemplateNamed(ctx context.Context, owner, name string) (store.Template, error)
	TagTemplate(ctx context.Context, owner, name string, tags []string, id string) error
	UntagTemplates(ctx context.Context, owner, name string, tags []string) (int, error)
	ListTemplateTags(ctx context.Context, f store.TagFilter) ([]store.TemplateTag, error)
	FindTemplateByRecipe(ctx context.Context, owner, hash string) (store.Template, error)
	ListTemplates(ctx context.Context, owner string, forks bool) ([]store.Template, error)
	DeleteTemplate(ctx context.Context, id string) (store.Template, error)
	FailBuildingTemplates(ctx context.Context, reason string) ([]store.Template, error)
	UnusedForks(ctx context.Context) ([]store.Template, error)
	SupersededBuilds(ctx context.Context, before time.Time) ([]store.Template, error)
	DeleteSupersededBuild(ctx context.Context, id string, before time.Time) (bool, error)
	TemplateBytes(ctx context.Context, owner string) (int64, error)
	PutTemplateCopy(ctx context.Context, t store.Template) (bool, error)
	MarkTemplateShared(ctx context.Context, id string) error
	FinishSharedTemplate(ctx context.Context, id string, sizeBytes int64, tags []string) (store.Template, error)
	SandboxesOfImage(ctx context.Context, ref string) (int, error)
}

// RegistryStore is the owners' sealed registry credentials
// (registries.go).
type RegistryStore interface {
	PutRegistryCredential(ctx context.Context, c store.RegistryCredential) error
	GetRegistryCredential(ctx context.Context, owner, host string) (store.RegistryCredential, error)
	ListRegistryCredentials(ctx context.Context, owner string) ([]store.RegistryCredential, error)
	DeleteRegistryCredential(ctx context.Context, owner, host string) error
	RegistryHasCredentials(ctx context.Context, host string) (bool, error)
}

// Runtime is what the service needs of the sandbox runtime.
type Runtime interface {
	Create(ctx context.Context, spec runtime.Spec) (runtime.Instance, error)
	Start(ctx context.Context, sandboxID string) error
	Stop(ctx context.Context, sandboxID string) error
	Pause(ctx context.Context, sandboxID string) error
	Resume(ctx context.Context, sandboxID string) error
	Destroy(ctx context.Context, sandboxID string) error
	Inspect(ctx context.Context, sandboxID string) (runtime.Status, error)
	ListOurs(ctx context.Context) ([]runtime.Instance, error)
	DialAgent(ctx context.Context, sandboxID string) (net.Conn, error)
	Stats(ctx context.Context, sandboxID string) (runtime.Stats, error)
}

// Router is the ingress: a sandbox is routable between Install and Remove
// (Remove also drops its ports, domains and host-port listeners). Every
// method is idempotent; route changes are map updates.
type Router interface {
	Install(ctx context.Context, sandboxID string) error
	Remove(ctx context.Context, sandboxID string) error
	ExposePort(ctx context.Context, sandboxID string, p ingress.Port) error
	UnexposePort(ctx context.Context, sandboxID string, port int) error
	ListenTCP(ctx context.Context, hostPort int, sandboxID string, port int) error
	CloseTCP(hostPort int) error
	BindDomain(ctx context.Context, hostname, sandboxID string, port int) error
	UnbindDomain(ctx context.Context, sandboxID, hostname string) error
}

// Admission reserves host capacity per sandbox, within its owner's quota.
type Admission interface {
	ReserveWithin(id string, req admission.Request, q admission.Quota) error
	Release(id string)
	// Park keeps only id's disk: a stopped sandbox's container keeps what
	// it wrote, so its disk counts in its owner's quota until destroyed.
	Park(id string)
	// ParkWith is Park holding extraDiskMB more disk: a hibernated
	// sandbox's memory image.
	ParkWith(id string, extraDiskMB int64)
	// FitsQuota is ReserveWithin's quota check alone; it changes nothing.
	FitsQuota(id string, req admission.Request, q admission.Quota) error
	Reset(live map[string]admission.Request)
	// Usage is every reservation's sum and the budget: the warm pool grows
	// only into what is free.
	Usage() (used admission.Request, budget admission.Budget)
}

// Volumes prepares the host side of a sandbox's mounts.
type Volumes interface {
	// Prepare makes sure every volume of owner exists and returns the host
	// paths to bind, in the order of mounts. Volumes are per owner: two
	// tenants naming the same volume get two directories.
	// A volume it makes has its size reserved first, by reserve.
	Prepare(ctx context.Context, owner, sandboxID string, mounts []Mount, reserve VolumeReserve) ([]runtime.Mount, error)
	// Abandon undoes Prepare for a create that failed: the volume
	// directories it created are removed while still empty and unused, so
	// a refused create leaves nothing on the host.
	Abandon(ctx context.Context, sandboxID string) error
	// Release is the end of a sandbox that existed: volumes persist.
	Release(ctx context.Context, sandboxID string) error
}

// Config holds the service's settings.
type Config struct {
	NodeID       string
	DefaultImage string
	AgentBinary  string
	// HostMilliCPU is the host's CPU count (1000 per core): the engine
	// refuses a sandbox limit above it. Zero: no check beyond the
	// per-sandbox maximum.
	HostMilliCPU int64
	// HostPortLo and HostPortHi bound the pool TCP exposures take host
	// ports from (inclusive).
	HostPortLo, HostPortHi int
	// PublicURL turns a preview host into the URL users open, e.g.
	// "http://<host>:7070" (scheme and listener port of the daemon).
	PublicURL func(host string) string
	// TLSPort is the SNI listener's port, for tls:// URLs (0: unknown).
	TLSPort int
	// TCPHost is the host tcp:// URLs name (the one host ports are bound
	// on). Empty: 127.0.0.1.
	TCPHost string
	// Domain is the preview domain: <port>-<sandbox-id>.<Domain>.
	Domain string
	// ReservedHosts may never be bound as custom domains: the daemon's own
	// API host names (an IP literal is always refused). Compared after
	// naming.NormalizeHost; a binding made before its host was reserved
	// is not restored at startup.
	ReservedHosts []string
	// AllowNetwork lets sandboxes that ask for it have outbound network;
	// without it such a create is refused.
	AllowNetwork bool
	// GVisor says the runtime can run sandboxes under gVisor (runtime
	// "gvisor"); without it such a create is refused.
	GVisor bool
	// DefaultRuntime is the runtime of a create that names none: "docker"
	// (the default) or "gvisor".
	DefaultRuntime string
	// Pool is what the warm pool keeps (SetPool changes it at run time);
	// PoolConcurrency bounds its refill creates in flight (default 2).
	Pool            []PoolTarget
	PoolConcurrency int
	// PauseMax is how long a sandbox may stay paused (its memory held)
	// before the background loop stops it, keeping its file system; the
	// next resume then starts its processes afresh. Zero: never.
	PauseMax time.Duration
	// HibernateDir holds the hibernate images (hibernate.go), one
	// directory per sandbox; made 0700. Empty: nothing hibernates (a
	// hibernate stops the sandbox, saying so). Where the runtime can
	// checkpoint a sandbox, PauseMax hibernates it rather than stop it
	// (PausedMemoryFloor stops it: a save needs minutes a host short of
	// memory has not).
	HibernateDir string
	// HibernateStorageMaxMB bounds what the hibernate images hold in
	// HibernateDir together (hibernatecap.go): a hibernate that would
	// pass it stops the sandbox instead, saying so. 0: a quarter of
	// HibernateDir's file system.
	HibernateStorageMaxMB int64
	// PausedMemoryFloor is the percent of the host's memory that must stay
	// available: under it, paused sandboxes are stopped, longest paused
	// first (0: never; needs Deps.HostMemory).
	PausedMemoryFloor int
	// TemplateStorageMB bounds the size of each owner's templates and
	// snapshots together (0: unlimited).
	TemplateStorageMB int64
	// DiskDefaultMB is the disk limit of a create that asks for none
	// (0: DefaultDiskMB); DiskMaxMB the largest one may ask for (0:
	// DefaultDiskMaxMB).
	DiskDefaultMB, DiskMaxMB int64
	// StuckCreating is how long a row may stay in state creating before the
	// reconciler rolls it back.
	StuckCreating time.Duration
	// DomainCheckEvery is how often RunBackground looks up pending custom
	// domains (CheckPendingDomains). Zero: 30 s.
	DomainCheckEvery time.Duration
	// RegistryAllow lists the registry hosts images may be pulled from
	// (lowercase; "docker.io" is Docker Hub); empty: any. Images already
	// on the host are used whatever their registry.
	RegistryAllow []string
	// ImageMaxMB refuses a pull whose image is bigger (0: no cap).
	ImageMaxMB int64
	// PullTimeout bounds one pull (0: DefaultPullTimeout).
	PullTimeout time.Duration
	// PullIdleGrace is how long a pull nobody waits for any more goes on
	// before it is cancelled (0: DefaultPullIdleGrace).
	PullIdleGrace time.Duration
	// Registry is the cluster's registry ("host[:port][/path]") its nodes
	// share templates through (shared.go), with RegistryAuth (nil:
	// anonymous); "" shares their records only, and a template's image
	// stays on the node that made it.
	Registry     string
	RegistryAuth *runtime.RegistryAuth
}

// Deps are the service's collaborators. Everything with a side effect is
// injected, so tests can wrap any of them to inject faults.
type Deps struct {
	Store     Store
	Runtime   Runtime
	Router    Router
	Admission Admission
	Volumes   Volumes
	Keyring   *secrets.Keyring
	Logger    *slog.Logger
	Clock     func() time.Time
	Metrics   *Metrics
	// Disk says whether the runtime enforces disk limits (the engine's,
	// not a wrapper's); nil: it does not, and sandboxes' disk limits are
	// only recorded (Sandbox.DiskEnforced false).
	Disk runtime.DiskLimiter
	// Gate, when set, is asked before every local create (cluster topology
	// and role check); an error refuses the create with no side effects.
	Gate func(ctx context.Context) error
	// Cluster keeps the cluster-wide keys of this node's sandboxes
	// (cluster.go); nil on a single node.
	Cluster Cluster
	// Peers lists the other nodes' sandboxes (List); nil on a single node.
	Peers PeerLister
	// Firewall holds sandboxes' network policies (network.go); nil: a
	// sandbox with network reaches what the engine's network reaches, and
	// a policy that restricts anything is refused.
	Firewall Firewall
	// HostMemory reads the host's memory (StopPausedUnderPressure); nil
	// never stops a paused sandbox for memory.
	HostMemory HostMemory
	// Images captures sandboxes as images (templates.go); nil refuses
	// templates, snapshots and forks as unavailable.
	Images runtime.Images
	// ImageCollector removes the runtime's unpacked images nothing uses
	// (imagegc.go); nil: the runtime keeps no copies of its own.
	ImageCollector runtime.ImageCollector
	// Puller pulls images a create names and the engine lacks (pull.go);
	// nil: such a create is refused as before, the image not present.
	Puller runtime.Puller
	// Catalog is the cluster's template catalog (shared.go); nil on a
	// single node. Pusher pushes templates to the cluster's registry.
	Catalog TemplateCatalog
	Pusher  runtime.Pusher
	// Resolver looks up the TXT records that prove control of a custom
	// domain (domains.go); nil: net.DefaultResolver.
	Resolver TXTResolver
	// Probes are readiness's checks of the engine, the disk and the
	// store (health.go); the zero value checks nothing.
	Probes Probes
}

// Service is sandboxd's domain layer. It is safe for concurrent use.
type Service struct {
	cfg Config
	Deps

	// clients caches one agent client per sandbox id: each keeps its idle
	// connections to the agent socket, so an exec after the first costs no
	// dial and no AEAD open of the token.
	clients sync.Map // string → *agent.Client

	// stopped keeps the logs of sandboxes this daemon stopped (logs.go).
	stopped stoppedLogs

	// pool is the warm pool (pool.go): never nil, empty without targets.
	pool *warmpool.Pool

	// builds keeps the output of this process's template builds and
	// bounds how many run.
	builds builds.Builds
	// captures serializes each owner's snapshots and forks (their
	// storage check and capture).
	captures keyedLocks
	// imageVerdicts remembers images checkImage found are no template's
	// (ref → until when); imageVerdictCount bounds it.
	imageVerdicts     sync.Map
	imageVerdictCount atomic.Int64

	// imageGC holds a pending request for an image collection pass
	// (imagegc.go).
	imageGC chan struct{}

	// pulls are the image pulls under way (pull.go).
	pulls pulls
	// copies are the templates whose images this node holds, its own and
	// its copies of other nodes' (id → true; shared.go); copyLocks
	// serialize the first create of one copy; sharedMisses remember
	// lookups the catalog missed a moment ago (key → until when).
	copies       sync.Map
	copyLocks    keyedLocks
	sharedMisses sync.Map
	missCount    atomic.Int64
	// registryHosts caches whether any owner holds a credential for a
	// registry host (host → bool); accessVerdicts when an owner was last
	// let pull an image from such a host (registries.go).
	registryHosts      sync.Map
	accessVerdicts     sync.Map
	accessVerdictCount atomic.Int64

	// readiness is set by the startup repair (Reconcile with startup).
	readiness atomic.Pointer[readiness]
	// health caches the dependencies' last probe (Faults).
	health health

	// engineInFlight is set by a startup pass that rolled back a create
	// whose container it did not see: the dead process may have sent the
	// engine a container create that the engine finishes later, with no
	// row to claim it. RunBackground then sweeps for such orphans soon
	// after startup instead of waiting for the periodic pass.
	engineInFlight atomic.Bool

	// hibImages is what the hibernate images hold, hibernateCap what they
	// may (hibernatecap.go).
	hibImages    imageLedger
	hibernateCap int64

	// transitions serializes the lifecycle transitions of one sandbox
	// (pause, resume, stop, start, and the reconciler's repairs of a
	// paused row): each is a store write and an engine call, which must
	// not interleave with another's (pause.go).
	transitions keyedLocks
	// wakes is the auto-resumes in flight and failed lately; hibernating
	// the sandboxes a hibernate is saving (wake.go).
	wakes       wakeFlight
	hibernating hibernations

	// events fans lifecycle events out to subscribers (Subscribe); Store
	// publishes to it.
	events *eventHub
}

// New returns a Service. It does no I/O. It refuses creates until a
// startup Reconcile (or RunBackground) succeeds.
func New(cfg Config, deps Deps) (*Service, error) {
	switch {
	case deps.Store == nil, deps.Runtime == nil, deps.Router == nil, deps.Admission == nil,
		deps.Volumes == nil, deps.Keyring == nil:
		return nil, errors.New("service.New: Store, Runtime, Router, Admission, Volumes and Keyring are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = time.Now
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics(nil)
	}
	if deps.Resolver == nil {
		deps.Resolver = net.DefaultResolver
	}
	if cfg.StuckCreating == 0 {
		cfg.StuckCreating = 10 * time.Minute
	}
	if cfg.HibernateDir != "" {
		// It holds sandboxes' memory: the daemon's alone.
		if err := os.MkdirAll(cfg.HibernateDir, 0o700); err != nil {
			return nil, fmt.Errorf("service: hibernate dir: %w", err)
		}
		if err := os.Chmod(cfg.HibernateDir, 0o700); err != nil {
			return nil, fmt.Errorf("service: hibernate dir: %w", err)
		}
	}
	reserved := make([]string, len(cfg.ReservedHosts))
	for i, h := range cfg.ReservedHosts {
		reserved[i] = naming.NormalizeHost(h)
	}
	cfg.ReservedHosts = reserved
	if cfg.DefaultRuntime == "" {
		cfg.DefaultRuntime = RuntimeDocker
	}
	if cfg.DefaultRuntime == RuntimeGVisor && !cfg.GVisor {
		return nil, errors.New("service: default runtime gvisor, but the engine has no gVisor (scripts/setup-gvisor.sh registers it)")
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = "sandboxd/base:bookworm"
	}
	s := &Service{cfg: cfg, Deps: deps, pool: warmpool.New(cmp.Or(cfg.PoolConcurrency, 2)), events: &eventHub{}, imageGC: make(chan struct{}, 1)}
	if cfg.HibernateDir != "" {
		s.hibernateCap = hibernateCapBytes(cfg)
	}
	s.Store = publishingStore{Store: deps.Store, hub: s.events}
	if deps.Images != nil && deps.ImageCollector != nil {
		s.Images = collectingImages{Images: deps.Images, kick: s.kickImageGC}
	}
	targets, err := s.normalizeTargets(cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("service: pool: %w", err)
	}
	s.pool.SetTargets(targets)
	s.setReady("the startup repair has not run yet")
	return s, nil
}

// Agent returns the client of a sandbox's agent. The sandbox must exist;
// its container may be stopped (calls then fail with the dial error).
func (s *Service) Agent(ctx context.Context, sandboxID string) (*agent.Client, error) {
	if c, ok := s.clients.Load(sandboxID); ok {
		return c.(*agent.Client), nil
	}
	row, err := s.Store.GetSandbox(ctx, sandboxID)
	if err != nil {
		return nil, s.mapStoreErr(err, sandboxID)
	}
	token, err := s.Keyring.Open(row.AgentTokenSealed, agentTokenAD(sandboxID))
	if err != nil {
		return nil, fmt.Errorf("open agent token of %s: %w", sandboxID, err)
	}
	return s.cacheClient(sandboxID, string(token)), nil
}

// dialer dials a sandbox's agent.
func (s *Service) dialer(sandboxID string) agent.DialFunc {
	return func(ctx context.Context) (net.Conn, error) { return s.Runtime.DialAgent(ctx, sandboxID) }
}

func (s *Service) cacheClient(sandboxID, token string) *agent.Client {
	fresh := agent.NewClient(s.dialer(sandboxID), token)
	c, loaded := s.clients.LoadOrStore(sandboxID, fresh)
	if loaded {
		fresh.Close() // another caller cached one first; theirs is as good
	}
	return c.(*agent.Client)
}

// replaceClient caches c, the client of a sandbox just created or
// claimed, closing any client cached for that id before (one a racing
// lookup made from a previous sandbox of the same id would carry a stale
// token).
func (s *Service) replaceClient(sandboxID string, c *agent.Client) {
	if old, loaded := s.clients.Swap(sandboxID, c); loaded {
		old.(*agent.Client).Close()
	}
}

// forgetClient drops a sandbox's cached agent client and its connections.
func (s *Service) forgetClient(sandboxID string) {
	if c, ok := s.clients.LoadAndDelete(sandboxID); ok {
		c.(*agent.Client).Close()
	}
}

func agentTokenAD(id string) []byte { return secrets.AssociatedData("sandbox", id, "agent-token") }
func secretEnvAD(id string) []byte  { return secrets.AssociatedData("sandbox", id, "secret-env") }
func mountAD(id string, i int) []byte {
	return secrets.AssociatedData("sandbox", id, "mount", fmt.Sprint(i))
}

// mapStoreErr turns store sentinels into the service's.
func (s *Service) mapStoreErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("sandbox %q: %w", what, ErrNotFound)
	case errors.Is(err, store.ErrNameConflict):
		return fmt.Errorf("a sandbox named %q already exists: %w", what, ErrNameConflict)
	case errors.Is(err, store.ErrStateConflict):
		return refuse(ErrConflict, err, "sandbox %q changed state meanwhile (%v); read it and retry", what, stateOf(err))
	case errors.Is(err, store.ErrIdempotencyKeyReused):
		return ErrIdempotencyKeyReused
	case errors.Is(err, store.ErrInvalidArgument):
		return refuse(ErrInvalidArgument, err, "%v", err)
	}
	return err
}

// stateOf words a state conflict: the state the sandbox is in when the
// store says, else the store's text.
func stateOf(err error) string {
	var sc *store.StateConflictError
	if errors.As(err, &sc) {
		return "it is " + string(sc.Current)
	}
	return err.Error()
}

// NetworkAllowed reports whether sandboxes may have outbound network on
// this daemon (facades whose SDKs default to network ask before asking).
func (s *Service) NetworkAllowed() bool { return s.cfg.AllowNetwork }
