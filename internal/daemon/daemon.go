// Package daemon assembles sandboxd from its parts — store, keyring,
// runtime, ingress, admission, service and the HTTP edges — in one place,
// so the binary and every end-to-end test harness run the same stack.
package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/api/daytona"
	"github.com/sandboxd/sandboxd/internal/api/e2b"
	"github.com/sandboxd/sandboxd/internal/api/router"
	v1 "github.com/sandboxd/sandboxd/internal/api/v1"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/datadir"
	"github.com/sandboxd/sandboxd/internal/httplimit"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/sessions"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/ui"
	"github.com/sandboxd/sandboxd/internal/version"
	"github.com/sandboxd/sandboxd/internal/volume"
)

// reapEvery is how often expired sandboxes are looked for: the granularity
// of timeouts.
const reapEvery = time.Second

// Options adjust a daemon for tests; the zero value is production.
type Options struct {
	// Clock replaces time.Now in the service and the store.
	Clock func() time.Time
	// WrapRuntime wraps the Docker runtime (fault injection).
	WrapRuntime func(runtime.Runtime) runtime.Runtime
	// Registry receives the metrics; default a fresh registry.
	Registry *prometheus.Registry
}

// Daemon is one assembled sandboxd. Build it with New, run it with Serve,
// release it with Close.
type Daemon struct {
	// e2bServesHost: whether the E2B facade serves a preview host (its
	// ServePort), and the sandbox's owner, for the TLS listener's
	// certificate decision.
	e2bServesHost func(host string) (owner string, ok bool)

	Config   config.Daemon
	Store    *store.Store
	Service  *service.Service
	Router   *ingress.Router
	Auth     *auth.Authenticator
	Registry *prometheus.Registry
	// AdminTokenFile holds the local admin token (0600).
	AdminTokenFile string
	// Handler serves everything: preview hosts and custom domains through
	// the ingress, the rest through the API edges.
	Handler http.Handler

	logger  *slog.Logger
	ln      net.Listener // counted by limiter
	limiter *httplimit.Limiter
	closers []func() error

	// httpsLn serves Handler over TLS when Config.HTTPSListen is set.
	httpsLn net.Listener
	// gvisor: the engine runs sandboxes under gVisor (checked at start).
	gvisor bool
	// keyring seals the daemon's secrets, the oci runtime's checkpoint
	// images among them.
	keyring *secrets.Keyring
	// firewall holds sandboxes' network policies (--sandbox-network).
	firewall service.Firewall
	// images is the engine's image side (templates, snapshots, forks).
	images runtime.Images
	// puller pulls the images creates name and the engine lacks.
	puller runtime.Puller
	// disk says whether the engine enforces sandboxes' disk limits.
	disk runtime.DiskLimiter
	// imageCollector is the oci runtime (its unpacked images); nil under
	// the Docker runtime.
	imageCollector runtime.ImageCollector
	// cluster is this node's part in a cluster (cluster.go); nil on a
	// single node.
	cluster *clusterNode
	// dataDir is the absolute data directory.
	dataDir string
	// admission is the host's capacity (the cluster's headroom reads it).
	admission *admission.Controller
}

// New builds every part in order on the listener ln (whose address names
// the preview URLs), reconciles what a previous process left, and makes
// sure the admin token exists. On error everything built so far is closed.
// Each step wraps its own errors with the name of the part that failed.
func New(ctx context.Context, cfg config.Daemon, ln net.Listener, logger *slog.Logger, opts Options) (_ *Daemon, err error) {
	d := &Daemon{Config: cfg, logger: logger, ln: ln}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	dataDir, agentBinary, err := d.resolvePaths()
	if err != nil {
		return nil, err
	}
	d.dataDir = dataDir
	keyring, err := d.openStore(ctx, dataDir, opts.Clock)
	if err != nil {
		return nil, err
	}
	d.keyring = keyring
	if d.cluster, err = d.openCluster(ctx, dataDir); err != nil {
		return nil, err
	}
	rt, volumes, err := d.openRuntime(ctx, dataDir, opts.WrapRuntime)
	if err != nil {
		return nil, err
	}
	d.Registry = metricsRegistry(opts.Registry)
	if err := d.limitConns(); err != nil {
		return nil, fmt.Errorf("connection limit metrics: %w", err)
	}
	previews, err := d.openAuth(dataDir)
	if err != nil {
		return nil, err
	}

	// The ingress dials sandbox ports through the service, which routes
	// through the ingress: the dialer is bound once both exist.
	dialer := &serviceDialer{}
	if err := d.buildIngress(dialer, previews); err != nil {
		return nil, err
	}
	if d.cluster != nil {
		if err := d.cluster.publishTLS(ctx, d.Router, d.Config.TLSListen, d.Config.AdvertiseTLS); err != nil {
			return nil, err
		}
	}
	if err := d.buildService(agentBinary, rt, volumes, keyring, opts.Clock); err != nil {
		return nil, err
	}
	dialer.svc = d.Service

	// Before serving: finish or undo whatever a previous process left.
	if err := d.Service.Reconcile(ctx, true); err != nil {
		logger.Warn("startup repair failed; serving not ready (/readyz) and retrying with backoff", "err", err)
	}
	if d.cluster != nil {
		// A node back from the dead: sandboxes moved elsewhere meanwhile,
		// or declared lost, are stale here.
		d.cluster.fo.Service = d.Service
		if err := d.cluster.fo.DropStale(ctx); err != nil {
			logger.Warn("cluster: look for stale sandboxes", "err", err)
		}
		// The cluster's templates: this node's copy of the catalog, kept
		// current from now on.
		if err := d.cluster.node.FollowTemplates(ctx, templateMirror{d.Service}); err != nil {
			return nil, fmt.Errorf("cluster templates: %w", err)
		}
	}
	if d.AdminTokenFile, err = ensureAdminToken(ctx, d.Store, dataDir); err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	if d.cluster != nil {
		if err := d.cluster.shareAdminToken(ctx, d.AdminTokenFile); err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
	}

	if err := d.buildHandler(dataDir, previews); err != nil {
		return nil, err
	}
	if d.Config.HTTPSListen != "" {
		if err := d.listenHTTPS(d.Config, dataDir); err != nil {
			return nil, fmt.Errorf("https: %w", err)
		}
	}
	return d, nil
}

// resolvePaths makes the data directory (0700) and returns it and the
// agent binary as absolute paths, failing when the binary is missing. With
// no node id configured it loads or creates one in the data directory and
// records it in d.Config.
func (d *Daemon) resolvePaths() (dataDir, agentBinary string, err error) {
	dataDir, err = filepath.Abs(d.Config.DataDir)
	if err != nil {
		return "", "", fmt.Errorf("data dir: %w", err)
	}
	if err := privateDir(dataDir, d.logger); err != nil {
		return "", "", fmt.Errorf("data dir: %w", err)
	}
	agentBinary, err = filepath.Abs(d.Config.AgentBinary)
	if err != nil {
		return "", "", fmt.Errorf("agent binary: %w", err)
	}
	if _, err := os.Stat(agentBinary); err != nil {
		return "", "", fmt.Errorf("agent binary (build it with `make build` or pass --agent-binary): %w", err)
	}

	if d.Config.NodeID == "" {
		if d.Config.NodeID, err = datadir.LoadOrCreateNodeID(datadir.NodeIDPath(dataDir)); err != nil {
			return "", "", fmt.Errorf("node id: %w", err)
		}
	}
	return dataDir, agentBinary, nil
}

// privateDir makes dir, the data directory, 0700: created so, or an
// existing one that others may read or enter tightened (it holds the
// database, the keyring and the admin token), saying so in the log.
func privateDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("make %s private (0700; it is %o): %w", dir, perm, err)
		}
		log.Warn("data dir was open to other users; made it 0700", "dir", dir, "was", fmt.Sprintf("%o", perm))
	}
	return nil
}

// openStore opens the store in dataDir (registering its Close) and the
// secrets keyring beside it.
func (d *Daemon) openStore(ctx context.Context, dataDir string, clock func() time.Time) (*secrets.Keyring, error) {
	var err error
	if d.Store, err = store.Open(ctx, filepath.Join(dataDir, "sandboxd.db"), store.Options{Clock: clock}); err != nil {
		return nil, fmt.Errorf("store.Open: %w", err)
	}
	d.closers = append(d.closers, d.Store.Close)
	keyring, err := secrets.OpenKeyring(dataDir)
	if err != nil {
		return nil, fmt.Errorf("secrets.OpenKeyring: %w", err)
	}
	return keyring, nil
}

// probeGVisor asks the engine whether it has runsc. An engine that does
// not answer yet counts as without (the daemon still starts and repairs
// once it answers); gVisor creates are then refused until a restart.
func (d *Daemon) probeGVisor(drt *docker.Runtime) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	isos, err := drt.Isolations(ctx)
	if err != nil {
		d.logger.Warn("could not ask the engine for gVisor; runtime gvisor is unavailable", "err", err)
		return false
	}
	return slices.Contains(isos, runtime.IsolationGVisor)
}

// probeDisk says at start whether the engine enforces sandboxes' disk
// limits. Where it does not, sandboxes still get their limit recorded,
// answered with disk_enforced false: nothing polls in its place. An engine
// that does not answer yet is asked again at the first create.
func (d *Daemon) probeDisk(drt runtime.DiskLimiter) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lim, err := drt.DiskLimits(ctx)
	switch {
	case err != nil:
		d.logger.Warn("could not ask the engine whether it enforces disk limits; asked again at the first create", "err", err)
	case lim.Enforced:
		d.logger.Info("sandboxes' disk limits are enforced by the kernel", "how", lim.How, "default_mb", d.Config.DiskDefaultMB, "max_mb", d.Config.DiskMaxMB)
	case d.Config.Engine == "oci":
		d.logger.Warn("SANDBOXES' DISK LIMITS ARE NOT ENFORCED: a sandbox can fill the file system of --oci-dir; put it on the btrfs file system scripts/setup-oci.sh mounts (--oci-dir /var/lib/sandboxd-oci/root/NAME)",
			"why", lim.How)
	default:
		d.logger.Warn("SANDBOXES' DISK LIMITS ARE NOT ENFORCED: a sandbox can fill the engine's file system; run the engine through scripts/setup-docker.sh (a btrfs data root) or on overlay2 over xfs with pquota",
			"why", lim.How)
	}
}

// probeCheckpoint says at start, per isolation, whether sandboxes
// hibernate (their processes checkpointed to disk) or are stopped in its
// place, and why (service.Hibernate).
func (d *Daemon) probeCheckpoint(rt runtime.Runtime) {
	isos := []runtime.Isolation{runtime.IsolationContainer}
	if d.gvisor {
		isos = append(isos, runtime.IsolationGVisor)
	}
	for _, iso := range isos {
		name := cmp.Or(string(iso), "runc")
		if sup := runtime.CanCheckpoint(rt, iso); sup.OK {
			d.logger.Info("sandboxes hibernate: their processes are checkpointed to disk", "isolation", name, "how", sup.How)
		} else {
			d.logger.Warn("sandboxes cannot hibernate here: a hibernate, --pause-max and memory pressure stop them instead", "isolation", name, "why", sup.How)
		}
	}
}

// openOCI opens the oci engine's runtime (registering its Close) in
// --oci-dir, on the sandboxes' bridge when they may have network.
func (d *Daemon) openOCI(dataDir, sockets string, nameKey []byte, n docker.Network) (*oci.Runtime, error) {
	dir := d.Config.OCIDir
	if dir == "" {
		dir = filepath.Join(dataDir, "oci")
	}
	opts := oci.Options{NodeID: d.Config.NodeID, Dir: dir, SocketRoot: sockets, NameKey: nameKey, Logger: d.logger, ImageSealer: d.keyring}
	mbps, iops := uint64(d.Config.SandboxIOMBps), uint64(d.Config.SandboxIOIOPS)
	opts.IOLimit = oci.IOLimit{ReadBPS: mbps << 20, WriteBPS: mbps << 20, ReadIOPS: iops, WriteIOPS: iops}
	if d.Config.SandboxNetwork {
		resolvConf, _ := os.ReadFile("/etc/resolv.conf")
		opts.Network = &oci.Network{Bridge: n.Bridge, Subnet: n.Subnet, Gateway: n.Gateway, Resolvers: netpolicy.HostResolvers(resolvConf)}
	}
	ort, err := oci.New(opts)
	if err != nil {
		return nil, fmt.Errorf("oci.New: %w", err)
	}
	ort.SweepStages()
	d.closers = append(d.closers, ort.Close)
	d.logger.Info("sandboxes run by an OCI runtime, without the engine", "binary", ort.Binary(), "dir", dir)
	if lim, applied, how := ort.IOLimits(); lim != (oci.IOLimit{}) && !applied {
		d.logger.Warn("SANDBOXES' BLOCK I/O IS NOT LIMITED: no block device found for --oci-dir", "why", how)
	} else if applied {
		d.logger.Info("sandboxes' block I/O limit (direct and synced writes, and reads, on cgroup v1; all writes on v2)", "mbps", d.Config.SandboxIOMBps, "iops", d.Config.SandboxIOIOPS, "on", how)
	}
	return ort, nil
}

// ociImages are the engine's images, with commits of the oci runtime's
// sandboxes (whose file systems the engine does not hold).
type ociImages struct {
	*docker.Runtime
	oci *oci.Runtime
}

// Commit implements runtime.Images.
func (i ociImages) Commit(ctx context.Context, sandboxID, ref string, cfg runtime.ImageConfig) (runtime.Image, error) {
	return i.oci.Commit(ctx, sandboxID, ref, cfg)
}

// must is v, the answer of a call that cannot fail.
func must[T any](v T, _ error) T { return v }

// openRuntime connects to Docker (registering its Close), wrapped by wrap
// when set, and opens the volume directory under dataDir.
func (d *Daemon) openRuntime(ctx context.Context, dataDir string, wrap func(runtime.Runtime) runtime.Runtime) (runtime.Runtime, *volume.Dir, error) {
	sockets := socketRoot(dataDir)
	// Containers' names are keyed, so that the engine's resolver, which
	// answers them on the sandboxes' network, gives no sandbox id away.
	nameKey, err := d.key(dataDir, "container-names.key")
	if err != nil {
		return nil, nil, fmt.Errorf("container name key: %w", err)
	}
	drt, err := docker.New(docker.Options{
		NodeID: d.Config.NodeID, SocketRoot: sockets, Logger: d.logger, QualifyNames: d.cluster != nil,
		Network: d.Config.SandboxNetworkName, NameKey: nameKey, DiskProbeImage: d.Config.DefaultImage,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("docker.New: %w", err)
	}
	// With --engine oci the engine keeps the images (pull, build,
	// commit) and the sandboxes' bridge; an OCI runtime runs sandboxes.
	var ort *oci.Runtime
	ipOf := drt.SandboxIP
	if d.Config.Engine == "oci" {
		ipOf = func(ctx context.Context, id string) (netip.Addr, error) { return ort.SandboxIP(ctx, id) }
	}
	var sandboxNet docker.Network
	if d.Config.SandboxNetwork {
		var closeProxy func() error
		denied, err := registryAddrs(ctx, clusterRegistry(d.cluster, d.Config.Registry))
		if err != nil {
			drt.Close()
			return nil, nil, err
		}
		if d.firewall, sandboxNet, closeProxy, err = openFirewall(ctx, drt, d.Config.SandboxNetworkName, denied, ipOf, d.logger); err != nil {
			drt.Close()
			return nil, nil, err
		}
		d.closers = append(d.closers, closeProxy)
	}
	d.closers = append(d.closers, drt.Close, func() error {
		_ = os.Remove(sockets) // only when empty: running sandboxes keep their sockets
		return nil
	})
	d.images = drt
	d.puller = drt
	var rt runtime.Runtime = drt
	if d.Config.Engine == "oci" {
		if ort, err = d.openOCI(dataDir, sockets, nameKey, sandboxNet); err != nil {
			return nil, nil, err
		}
		rt = ort
		d.images = ociImages{Runtime: drt, oci: ort}
		d.gvisor = slices.Contains(must(ort.Isolations(ctx)), runtime.IsolationGVisor)
		d.probeDisk(ort)
		d.disk = ort
		d.imageCollector = ort
	} else {
		d.gvisor = d.probeGVisor(drt)
		d.probeDisk(drt)
		d.disk = drt
	}
	d.probeCheckpoint(rt)
	if wrap != nil {
		rt = wrap(rt)
	}
	volumes, warnings, err := volume.New(filepath.Join(dataDir, "volumes"), volume.Options{SizeMB: d.Config.VolumeSizeMB, MaxTotalMB: d.Config.VolumeStorageMaxMB})
	if err != nil {
		return nil, nil, fmt.Errorf("volume.New: %w", err)
	}
	for _, w := range warnings {
		d.logger.Warn("volumes: " + w)
	}
	if size, total, why := volumes.Limits(); size > 0 {
		d.logger.Info("volumes are file systems of their own", "size_mb", size, "all_volumes_max_mb", total)
	} else {
		d.logger.Warn("VOLUMES ARE NOT LIMITED: a sandbox can fill the data directory's file system through a volume", "why", why)
	}
	return rt, volumes, nil
}

// metricsRegistry returns reg, or when it is nil a fresh registry with the
// Go and process collectors.
func metricsRegistry(reg *prometheus.Registry) *prometheus.Registry {
	if reg != nil {
		return reg
	}
	reg = prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// openAuth sets up the API token authenticator over the store and returns
// the preview-token signer, whose key is loaded or created in dataDir.
func (d *Daemon) openAuth(dataDir string) (*auth.PreviewTokens, error) {
	var tokens auth.TokenLookup = tokenLookup{d.Store}
	if d.cluster != nil {
		tokens = clusterTokens{cluster: cluster.NewTokenStore(d.cluster.node), local: tokens}
	}
	d.Auth = auth.NewAuthenticator(tokens)
	previewKey, err := d.key(dataDir, "preview.key")
	if err != nil {
		return nil, fmt.Errorf("preview key: %w", err)
	}
	return auth.NewPreviewTokens(previewKey), nil
}

// buildIngress builds the router (registering its Close), which reaches
// sandbox ports through dialer and lets requests to private ports through
// when authorizePreview allows them.
func (d *Daemon) buildIngress(dialer *serviceDialer, previews *auth.PreviewTokens) error {
	opts := ingress.Options{
		Domain:           d.Config.Domain,
		Dialer:           dialer,
		Authorize:        authorizePreview(d.Auth, previews, d.Store, d.Config.Domain),
		CredentialCookie: previewCookie,
		TLSAddr:          d.Config.TLSListen,
		BindAddr:         d.Config.TCPHost,
		Logger:           d.logger,
		Wake:             dialer.Wake,
	}
	if d.cluster != nil {
		// TLS exposures answer on every node: the SNI listener carries
		// a name this node does not route to its owner's.
		opts.Remote = tlsRemote(d.cluster.node, d.cluster.self, d.Config.Domain)
		opts.Peers = d.cluster.signer
	}
	var err error
	d.Router, err = ingress.New(opts)
	if err != nil {
		return fmt.Errorf("ingress.New: %w", err)
	}
	d.closers = append(d.closers, d.Router.Close)
	return nil
}

// poolTargets are --pool's sizes as the service's targets: each image in
// the default class (default CPU, memory and runtime, no network).
func poolTargets(sizes []config.PoolSize) []service.PoolTarget {
	out := make([]service.PoolTarget, len(sizes))
	for i, p := range sizes {
		out[i] = service.PoolTarget{PoolClass: service.PoolClass{Image: p.Image}, Size: p.Size, Max: p.Max}
	}
	return out
}

// buildService builds the service over the parts made so far. Its public
// URLs are previewURL's.
func (d *Daemon) buildService(agentBinary string, rt runtime.Runtime, volumes *volume.Dir, keyring *secrets.Keyring, clock func() time.Time) error {
	cfg := d.Config
	_, listenPort, _ := net.SplitHostPort(d.ln.Addr().String())
	_, tlsPort, _ := net.SplitHostPort(cfg.TLSListen)
	tlsPortN, _ := strconv.Atoi(tlsPort)
	var err error
	d.admission = admission.New(admission.Budget{MilliCPU: cfg.MilliCPU, MemoryMB: cfg.MemoryMB})
	if d.cluster != nil {
		d.admission.SetElsewhere(d.cluster.holdingElsewhere) // quotas are the cluster's
	}
	var regAuth *runtime.RegistryAuth
	if d.cluster != nil && cfg.Registry != "" {
		if regAuth, err = registryAuth(cfg.Registry, cfg.RegistryAuthFile); err != nil {
			return err
		}
	}
	d.Service, err = service.New(service.Config{
		NodeID:            cfg.NodeID,
		DefaultImage:      cfg.DefaultImage,
		AgentBinary:       agentBinary,
		HostMilliCPU:      int64(goruntime.NumCPU()) * 1000,
		Domain:            cfg.Domain,
		ReservedHosts:     reservedHosts(cfg, d.ln.Addr()),
		AllowNetwork:      cfg.SandboxNetwork,
		GVisor:            d.gvisor,
		DefaultRuntime:    cfg.DefaultRuntime,
		Pool:              poolTargets(cfg.Pool),
		PauseMax:          cfg.PauseMax,
		HibernateDir:      filepath.Join(d.dataDir, "hibernate"),
		TemplateStorageMB: cfg.TemplateStorageMB,
		DiskDefaultMB:     cfg.DiskDefaultMB,
		DiskMaxMB:         cfg.DiskMaxMB,
		PausedMemoryFloor: cfg.PausedMemoryFloor,
		HostPortLo:        cfg.HostPortLo,
		HostPortHi:        cfg.HostPortHi,
		TLSPort:           tlsPortN,
		TCPHost:           cfg.TCPHost,
		PublicURL:         previewURL(cfg, listenPort),
		DomainCheckEvery:  cfg.DomainCheckEvery,
		RegistryAllow:     cfg.RegistryAllow,
		ImageMaxMB:        cfg.ImageMaxMB,
		Registry:          clusterRegistry(d.cluster, cfg.Registry),
		RegistryAuth:      regAuth,

		HibernateStorageMaxMB: cfg.HibernateStorageMaxMB,
	}, service.Deps{
		Store:      d.Store,
		Runtime:    rt,
		Router:     d.Router,
		Admission:  d.admission,
		Volumes:    volumes,
		Keyring:    keyring,
		Logger:     d.logger,
		Clock:      clock,
		Metrics:    service.NewMetrics(d.Registry),
		Cluster:    d.clusterKeys(),
		Peers:      d.peerLister(),
		Images:     d.images,
		Puller:     d.puller,
		Catalog:    d.templateCatalog(),
		Pusher:     d.pusher(),
		HostMemory: hostMemory,
		Firewall:   d.firewall,
		Resolver:   dnsResolver(cfg.DNSResolver),
		Probes:     d.probes(),
		Disk:       d.disk,

		// The oci runtime's unpacked images; nil under the engine.
		ImageCollector: d.imageCollector,
	})
	if err != nil {
		return fmt.Errorf("service.New: %w", err)
	}
	volumes.Dropped = d.Service.VolumeDropped
	return nil
}

// dnsResolver is the resolver custom-domain verification asks: the
// system's, or (--dns-resolver) a pure-Go one that sends every query to
// addr, over UDP or TCP as the resolver chooses.
func dnsResolver(addr string) *net.Resolver {
	if addr == "" {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

// probes are readiness's checks: the engine's ping, the data dir's space
// and the database's files.
func (d *Daemon) probes() service.Probes {
	db := filepath.Join(d.dataDir, "sandboxd.db")
	p := service.Probes{DataDir: d.dataDir, StoreFiles: []string{db, db + "-wal"}}
	if e, ok := d.images.(interface{ Ping(context.Context) error }); ok {
		p.Engine = e.Ping
	}
	return p
}

// peerSandboxes is the E2B facade's PeerSandboxes: nil on a single node.
func (d *Daemon) peerSandboxes() func() []string {
	if d.cluster == nil {
		return nil
	}
	return d.cluster.peerSandboxes
}

// placer is the edges' Placer: nil on a single node.
func (d *Daemon) placer() *router.Placer {
	if d.cluster == nil {
		return nil
	}
	return d.cluster.placer(d.Service)
}

// elsewhere is the E2B facade's Elsewhere: nil on a single node.
func (d *Daemon) elsewhere() func(http.ResponseWriter, *http.Request, string) bool {
	if d.cluster == nil {
		return nil
	}
	return d.cluster.elsewhere
}

// reservedHosts are the host names that reach the daemon's API: those
// configured with --api-host, the hosts of its listen addresses and the
// one it advertises to other cluster nodes (an IP literal or localhost,
// which AddDomain refuses anyway; listed so the rule does not hang on
// that). A custom domain equal to one would route the API's own traffic
// into a sandbox.
func reservedHosts(cfg config.Daemon, ln net.Addr) []string {
	hosts := append([]string(nil), cfg.APIHosts...)
	for _, addr := range []string{cfg.Listen, ln.String(), cfg.HTTPSListen} {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
			hosts = append(hosts, naming.NormalizeHost(host))
		}
	}
	if u, err := url.Parse(cfg.AdvertiseURL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, naming.NormalizeHost(u.Hostname()))
	}
	return hosts
}

// apiHostOf reports whether a request's Host is one the daemon answers
// as itself: an address literal, localhost, or one of reserved (the
// --api-host names, the listeners' and the advertised host). The
// dashboard is served there only: a name someone pointed at the daemon
// (a custom domain not yet verified, any stranger's) gets the API's 404,
// never a login page under that name.
func apiHostOf(reserved []string) func(host string) bool {
	return func(host string) bool {
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		h = naming.NormalizeHost(strings.Trim(h, "[]"))
		if h == "localhost" || net.ParseIP(h) != nil {
			return true
		}
		return slices.Contains(reserved, h)
	}
}

// e2bDomain is the domain E2B's create reports, from which the SDK
// builds getHost(port) as <port>-<id>.<domain> (and, without
// E2B_SANDBOX_URL, envd's https URL): in local mode (--domain localhost)
// the preview domain with the port of the listener the names are served
// on, --https-listen's when set, else --listen's (the bound one), unless
// it is the scheme's default (443, 80); otherwise the preview domain.
func e2bDomain(cfg config.Daemon, ln net.Addr) string {
	if cfg.Domain != "localhost" {
		return cfg.Domain
	}
	addr, dflt := ln.String(), "80"
	if cfg.HTTPSListen != "" {
		addr, dflt = cfg.HTTPSListen, "443"
	}
	if _, port, err := net.SplitHostPort(addr); err == nil && port != "" && port != "0" && port != dflt {
		return net.JoinHostPort(cfg.Domain, port)
	}
	return cfg.Domain
}

// buildHandler builds the API edges — the native API, the E2B facade
// (whose access-token key is loaded or created in dataDir) and the Daytona
// facade (registering its Close) — and sets d.Handler to route between
// them and the ingress.
func (d *Daemon) buildHandler(dataDir string, previews *auth.PreviewTokens) error {
	// Sessions live in the agents; the part only caches them and ends its
	// streams at Close, so they survive a restart of the daemon.
	sessionPart := sessions.New(sessions.Options{Agents: d.Service, Events: d.Service, Logger: d.logger})
	d.closers = append(d.closers, sessionPart.Close)
	api, err := v1.New(v1.Options{
		Service:        d.Service,
		Sessions:       sessionPart,
		Auth:           d.Auth,
		Tokens:         auth.NewIssuer(d.tokenStore()),
		Logger:         d.logger,
		Registry:       d.Registry,
		Version:        version.Version,
		RequestTimeout: d.Config.RequestTimeout,

		DefaultQuota:   auth.Quota(d.Config.DefaultQuota),
		DefaultTimeout: d.Config.DefaultTimeout,
		Placer:         d.placer(),
	})
	if err != nil {
		return fmt.Errorf("v1.New: %w", err)
	}
	e2bKey, err := d.key(dataDir, "e2b-access.key")
	if err != nil {
		return fmt.Errorf("e2b access key: %w", err)
	}
	e2bFacade := e2b.New(e2b.Options{
		Service:        d.Service,
		Auth:           d.Auth,
		Logger:         d.logger,
		Domain:         d.Config.Domain,
		AccessTokenKey: e2bKey,
		BodyDedupe:     e2b.Dedupe(d.Config.E2BBodyDedupe),
		ReplayWindow:   d.Config.E2BReplayWindow,
		RequestTimeout: d.Config.RequestTimeout,
		Elsewhere:      d.elsewhere(),
		PeerSandboxes:  d.peerSandboxes(),
		Placer:         d.placer(),
		// getHost(port) must name a host that opens in the default setup:
		// the port the client reached (whichever node it reached), or this
		// listener's when the request does not say.
		AdvertisedDomain:   e2bDomain(d.Config, d.ln.Addr()),
		DomainPortFromHost: d.Config.Domain == "localhost",
	})

	daytonaFacade := daytona.New(daytona.Options{
		Service: d.Service, Auth: d.Auth, Logger: d.logger, Domain: d.Config.Domain,
		PreviewToken: previews.Token, RequestTimeout: d.Config.RequestTimeout,
		Sessions: sessionPart,
		Placer:   d.placer(),
	})
	d.closers = append(d.closers, daytonaFacade.Close) // ends its event streams

	// One listener, routed by Host first: E2B's direct envd hosts
	// (<49983|49999>-<id>.<domain>) to the facade; every other preview host
	// and every bound custom domain to the ingress, whatever the path or
	// headers (a sandbox app's own /sandboxes or /daytona/api route is the
	// app's); a preview host of a port the ingress has not exposed goes to
	// the E2B facade, which serves any port of its own sandboxes by host
	// (and declines the rest, left 404). Requests for no sandbox host go by
	// path and header: E2B (control plane, envd by E2b-Sandbox-Id), Daytona
	// under /daytona/api, then the dashboard (/ and /ui/…), then the
	// native API; /mcp is the MCP server's.
	mcpHandler := d.mcpHandler()
	uiHandler, err := d.uiHandler()
	if err != nil {
		return fmt.Errorf("ui.New: %w", err)
	}
	onAPIHost := apiHostOf(reservedHosts(d.Config, d.ln.Addr()))
	byPath := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/mcp":
			mcpHandler.ServeHTTP(w, r)
		case e2bFacade.Match(r):
			e2bFacade.ServeHTTP(w, r)
		case daytonaFacade.Match(r):
			daytonaFacade.ServeHTTP(w, r)
		case ui.Match(r) && onAPIHost(r.Host):
			uiHandler.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	})
	ingressed := d.Router.WrapFallback(byPath, e2bFacade.ServePort)
	d.e2bServesHost = e2bFacade.ServesHost
	d.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e2bFacade.MatchHost(r.Host) {
			e2bFacade.ServeHTTP(w, r)
			return
		}
		ingressed.ServeHTTP(w, r)
	})
	if d.cluster != nil {
		// The edges' registrations, in byPath's order, and who a
		// request's credential stands for on any edge.
		route := router.Of(v1.Route, e2bFacade, daytonaFacade)
		who := func(r *http.Request) (service.Caller, bool) {
			if p, err := d.Auth.Authenticate(r.Context(), r); err == nil {
				return service.Caller{Owner: p.Owner, Admin: p.IsAdmin()}, true
			}
			c, err := e2bFacade.Caller(r)
			return c, err == nil
		}
		d.Handler = d.cluster.handler(d.Handler, d.Service, d.Auth, who, route, d.Config.Domain, reservedHosts(d.Config, d.ln.Addr()))
	}
	return nil
}

// listenHTTPS binds the TLS listener for the API and preview URLs: the
// operator's certificate (--https-cert) for the names it covers; for
// the others certificates from ACME (certmagic, issued on demand for
// routable hosts and --api-host names only) when an ACME email is
// configured, else from a local CA made at start whose certificate is
// written to <data-dir>/preview-ca.pem for clients to trust.
func (d *Daemon) listenHTTPS(cfg config.Daemon, dataDir string) error {
	allow := func(host string) bool { return d.Router.Routable(host) || slices.Contains(cfg.APIHosts, host) }
	// With the local CA, a preview host the E2B facade serves (any port of
	// a running E2B sandbox, no expose call: getHost's links) gets a
	// certificate too, and in a cluster a preview host of a sandbox placed
	// on another live node (the request is forwarded there once TLS ends
	// here; the watch-fed directory, no etcd call); the CA bounds what
	// those 65,535 names per sandbox cost (ingress.LocalCA), the facade
	// admits only ports that listen, and each name counts against its
	// sandbox's owner where known (an exposed port's: one store read per
	// handshake; a custom domain's or an API host's: its own group; those
	// are names a credential made and DNS proved). Not from
	// ACME: any caller could then make the daemon request a certificate per
	// port against the CA's rate limits; there, expose the port or use a
	// wildcard certificate (--https-cert).
	admitLocal := func(host string) (owner string, ok bool) {
		if allow(host) {
			return d.previewOwner(cfg.Domain, host), true
		}
		if d.e2bServesHost != nil {
			if owner, ok := d.e2bServesHost(host); ok {
				return owner, true
			}
		}
		if d.cluster != nil {
			return servesElsewhere(d.cluster.node, d.cluster.self, cfg.Domain, host)
		}
		return "", false
	}
	var tlsConf *tls.Config
	if cfg.ACMEEmail != "" {
		acme, err := ingress.NewACME(ingress.ACMEOptions{
			Email: cfg.ACMEEmail, StorageDir: filepath.Join(dataDir, "acme"), Routable: allow,
		})
		if err != nil {
			return err
		}
		d.closers = append(d.closers, func() error { acme.Close(); return nil })
		tlsConf = acme.TLSConfig()
	} else {
		ca, err := ingress.NewLocalCA()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dataDir, "preview-ca.pem"), ca.CertPEM(), 0o644); err != nil {
			return err
		}
		if err := registerLocalCA(d.Registry, ca); err != nil {
			return err
		}
		tlsConf = ca.TLSConfigByOwner(admitLocal)
	}
	if cfg.HTTPSCert != "" {
		var err error
		if tlsConf, err = withOperatorCert(tlsConf, cfg.HTTPSCert, cfg.HTTPSKey); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", cfg.HTTPSListen)
	if err != nil {
		return err
	}
	d.httpsLn = tls.NewListener(d.limiter.Wrap(ln), tlsConf) // counted before the handshake
	d.closers = append(d.closers, func() error { d.httpsLn.Close(); return nil })
	return nil
}

// previewOwner is the owner of the sandbox of host when it is a preview
// host under domain, else "" (the local CA then counts the name against
// its own group): one store read.
func (d *Daemon) previewOwner(domain, host string) string {
	id, _, ok := naming.ParsePreviewHost(host, domain)
	if !ok || !service.IsID(id) {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sb, err := d.Service.Get(ctx, service.Caller{Admin: true}, id)
	if err != nil {
		return ""
	}
	return sb.Owner
}

// registerLocalCA reports the local CA's issuance in reg.
func registerLocalCA(reg *prometheus.Registry, ca *ingress.LocalCA) error {
	refused := prometheus.NewDesc("sandboxd_tls_local_handshakes_refused_total",
		"TLS handshakes the local CA gave no certificate: reason=name (no sandbox or route serves it), budget (past the issuance bounds).", []string{"reason"}, nil)
	return errors.Join(
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sandboxd_tls_local_certificates_issued_total", Help: "Certificates the local CA signed for --https-listen.",
		}, func() float64 { return float64(ca.Counts().Issued) })),
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandboxd_tls_local_certificates_cached", Help: "Certificates of the local CA kept in memory (least recently used go first).",
		}, func() float64 { return float64(ca.Counts().Cached) })),
		reg.Register(collectorFunc{desc: refused, collect: func(ch chan<- prometheus.Metric) {
			c := ca.Counts()
			ch <- prometheus.MustNewConstMetric(refused, prometheus.CounterValue, float64(c.RefusedName), "name")
			ch <- prometheus.MustNewConstMetric(refused, prometheus.CounterValue, float64(c.RefusedBudget), "budget")
		}}),
	)
}

// collectorFunc is a collector of one description.
type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// previewURL turns a preview host into the URL users open: over TLS on
// the --https-listen port (left out when 443) when the daemon serves
// beyond loopback (--allow-public) with an HTTPS listener, since its plain
// listener is then for the host or the nodes; else plain HTTP on the
// listener's port, as on one host.
func previewURL(cfg config.Daemon, listenPort string) func(host string) string {
	if _, port, err := net.SplitHostPort(cfg.HTTPSListen); cfg.AllowPublic && err == nil {
		if port == "443" {
			return func(host string) string { return "https://" + host }
		}
		return func(host string) string { return "https://" + net.JoinHostPort(host, port) }
	}
	return func(host string) string { return "http://" + net.JoinHostPort(host, listenPort) }
}

// withOperatorCert returns base serving the certificate in certFile (its
// key in keyFile) for every server name the certificate covers, and for a
// hello that names none (a client dialing an address); other names are
// base's. The files are read once, at start.
func withOperatorCert(base *tls.Config, certFile, keyFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--https-cert, --https-key: %w", err)
	}
	leaf := pair.Leaf // set by LoadX509KeyPair
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--https-cert: %w", err)
		}
	}
	conf := base.Clone()
	next := base.GetCertificate
	conf.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if hello.ServerName == "" || leaf.VerifyHostname(hello.ServerName) == nil {
			return &pair, nil
		}
		return next(hello)
	}
	return conf, nil
}

// loadOrCreateKey returns the 32-byte key in path, creating it (0600) on
// first use.
func loadOrCreateKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != 32 {
			return nil, fmt.Errorf("%s: want 32 bytes, have %d", path, len(b))
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, key, 0o600); err != nil {
		return nil, err
	}
	return key, os.Rename(tmp, path)
}

// Addr is the address of the daemon's listener.
func (d *Daemon) Addr() net.Addr { return d.ln.Addr() }

// Serve serves on the daemon's listener and runs the reaper and the
// reconciler until ctx is cancelled, then shuts the server down. A
// cancelled context is a clean shutdown, not an error.
func (d *Daemon) Serve(ctx context.Context) error {
	srv := d.newServer()
	d.logger.Info("sandboxd listening", "addr", d.ln.Addr().String(), "data_dir", d.Config.DataDir,
		"max_conns", d.limiter.Max(), "version", version.Version)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(d.ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	if d.httpsLn != nil {
		d.logger.Info("sandboxd listening (TLS)", "addr", d.httpsLn.Addr().String())
		g.Go(func() error {
			if err := srv.Serve(d.httpsLn); !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("serve TLS: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		d.Service.RunBackground(gctx, reapEvery, d.Config.ReconcileEvery)
		// Once the pool's refills have ended: a daemon that stops leaves no
		// idle sandboxes (one that is killed leaves them for the next start
		// to adopt).
		drainCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d.Service.DrainPool(drainCtx)
		if err := d.Service.DropUnusedForks(drainCtx); err != nil {
			d.logger.Warn("stop: fork captures left for the next start's sweep", "err", err)
		}
		return nil
	})
	if d.cluster != nil {
		g.Go(func() error { d.cluster.run(gctx, d.Service, d.admission); return nil })
	}
	g.Go(func() error {
		<-gctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	})
	return g.Wait()
}

// Server limits. No ReadTimeout or WriteTimeout: exec streams, file
// transfers, envd streams, WebSockets and preview proxying last for hours.
// The edges bound their other routes (Config.RequestTimeout, through
// httplimit.Deadline); these bound what every connection may hold.
const (
	// readHeaderTimeout bounds a request's headers: a client that opens
	// connections and trickles headers holds nothing for long.
	readHeaderTimeout = 10 * time.Second
	// maxHeaderBytes caps a request's headers (the default is 1 MiB): the
	// SDKs send a few hundred bytes; a browser on a preview host, cookies
	// included, a few KiB.
	maxHeaderBytes = 64 << 10
)

// newServer is the HTTP server of every listener the daemon serves.
func (d *Daemon) newServer() *http.Server {
	return &http.Server{
		Handler:           d.Handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       d.Config.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(d.logger.Handler(), slog.LevelWarn),
	}
}

// limitConns caps the connections of the API listener and, when there is
// one, the HTTPS listener, together (Config.MaxConns, else a quarter of
// the open-file limit), and reports them in the metrics.
func (d *Daemon) limitConns() error {
	n := d.Config.MaxConns
	if n == 0 {
		n = autoMaxConns()
	}
	d.limiter = httplimit.NewLimiter(n, d.logger)
	d.ln = d.limiter.Wrap(d.ln)
	reg := d.Registry
	return errors.Join(
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandboxd_http_connections", Help: "HTTP connections being served.",
		}, func() float64 { return float64(d.limiter.Open()) })),
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandboxd_http_connections_max", Help: "The cap on HTTP connections open at once (--max-conns).",
		}, func() float64 { return float64(d.limiter.Max()) })),
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sandboxd_http_connection_waits_total", Help: "Connections that found the cap reached and waited for one to close.",
		}, func() float64 { return float64(d.limiter.Waits()) })),
	)
}

// autoMaxConns is a quarter of the open-file limit (Go raises the soft
// limit to the hard one at start), at least 64: the other three quarters
// stay for the store, the engine, agent sockets (a proxied connection
// holds one more), TCP exposures and the upstream pool.
func autoMaxConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 1024
	}
	return int(max(min(lim.Cur/4, 1<<20), 64))
}

// Close releases everything New built, in reverse order. Sandboxes keep
// running: the next daemon reconciles them.
func (d *Daemon) Close() error {
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		errs = append(errs, d.closers[i]())
	}
	d.closers = nil
	return errors.Join(errs...)
}

// socketRoot is where the per-sandbox agent socket directories live:
// /run/sandboxd/<hash of the data directory> (under the temp directory
// when /run is not writable). Never inside the data directory: each
// socket directory is bind-mounted into its sandbox, whose
// /proc/self/mountinfo shows the source path; a hash tells the sandbox
// nothing, keeps unix socket addresses short (108 bytes with the sandbox
// id and file name) and keeps daemons on one host apart.
func socketRoot(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	name := hex.EncodeToString(sum[:6])
	if unix.Access("/run", unix.W_OK) == nil {
		return filepath.Join("/run", "sandboxd", name)
	}
	return filepath.Join(os.TempDir(), "sandboxd-"+name)
}

// serviceDialer reaches sandbox ports for the ingress, through the service
// (agent tunnel). svc is set once the service exists, before serving.
type serviceDialer struct{ svc *service.Service }

func (d *serviceDialer) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	return d.svc.DialPort(ctx, sandboxID, port)
}

// Wake is the ingress's Options.Wake: Service.Wake, its error in the
// API's shape (the edges' one table), with no more than its class: a
// public port's caller is whoever has the link, and the owner's quota
// and the daemon's faults are not theirs to read (the log has them).
func (d *serviceDialer) Wake(ctx context.Context, sandboxID string) (bool, error) {
	_, ok, err := d.svc.Wake(ctx, sandboxID)
	if err != nil {
		class, _ := apierr.Classify(err)
		d.svc.Logger.Warn("ingress: auto-resume failed", "sandbox", sandboxID, "err", err)
		return ok, &ingress.WakeError{Status: class.Status, Code: string(class.Code), Message: "the sandbox is paused and could not be resumed (" + string(class.Code) + ")", Retryable: class.Retryable}
	}
	return ok, nil
}

// previewCookie may carry an API token to private preview ports from a
// browser; the ingress strips it before proxying.
const previewCookie = auth.CredentialCookie

// authorizePreview lets a request reach a private port when it carries a
// valid API token — Authorization: Bearer, X-Sandboxd-Token, or the cookie —
// whose principal may see the sandbox behind the host: an admin, or the
// sandbox's owner. Another tenant's token is refused like no token.
func authorizePreview(authn *auth.Authenticator, previews *auth.PreviewTokens, st *store.Store, domain string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		ctx := r.Context()
		// A preview token opens exactly one port of one sandbox.
		if pt := r.Header.Get(previewTokenHeader); pt != "" {
			id, port, ok := naming.ParsePreviewHost(r.Host, domain)
			return ok && previews.Valid(id, port, pt)
		}
		token := r.Header.Get("X-Sandboxd-Token")
		if token == "" {
			if c, err := r.Cookie(previewCookie); err == nil {
				token = c.Value
			}
		}
		var (
			p   auth.Principal
			err error
		)
		if token == "" {
			p, err = authn.Authenticate(ctx, r)
		} else {
			p, err = authn.AuthenticateToken(ctx, token)
		}
		if err != nil {
			return false
		}
		if p.IsAdmin() {
			return true
		}
		id, ok := sandboxOfHost(ctx, st, r.Host, domain)
		if !ok {
			return false
		}
		sb, err := st.GetSandbox(ctx, id)
		return err == nil && p.CanSee(sb.Owner)
	}
}

// previewTokenHeader carries a scoped preview token (the header Daytona's
// SDK documents for its preview URLs).
const previewTokenHeader = "X-Daytona-Preview-Token"

// sandboxOfHost names the sandbox a preview host (<port>-<id>.<domain>)
// or a custom domain routes to.
func sandboxOfHost(ctx context.Context, st *store.Store, host, domain string) (string, bool) {
	if id, _, ok := naming.ParsePreviewHost(host, domain); ok {
		return id, true
	}
	host = naming.NormalizeHost(host)
	d, err := st.GetCustomDomain(ctx, host)
	if err != nil {
		return "", false
	}
	return d.SandboxID, true
}
