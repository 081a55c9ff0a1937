// Package config is the one place that reads sandboxd's flags, its
// environment and its config file (file.go). Every other package receives
// the values it needs as plain fields; nothing else calls os.Getenv.
package config

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/sandboxd/sandboxd/internal/imageref"
	"github.com/sandboxd/sandboxd/internal/naming"
)

// Daemon is the whole configuration of one sandboxd process.
type Daemon struct {
	// Listen is the address of the HTTP listener (API, facades, ingress).
	// It must be a loopback address unless AllowPublic is set.
	Listen string
	// AllowPublic lets Listen and HTTPSListen be any address or host name
	// (a cluster across hosts, docs/deploy.md). Every route but /healthz,
	// /readyz and public previews then asks for a credential (/metrics
	// always asks for an admin token).
	AllowPublic bool
	// DataDir holds the database, keys, agent sockets and the admin token.
	DataDir string
	// AgentBinary is the toolboxd binary bind-mounted into every sandbox.
	AgentBinary string
	// NodeID names this daemon in container labels and, later, the
	// cluster. Empty: the id kept in the data directory (made at first
	// start), so two daemons with different data directories on one
	// Docker engine never take each other's containers for orphans.
	NodeID string
	// Domain is the suffix of preview URLs: <port>-<sandbox-id>.<Domain>.
	Domain string
	// APIHosts are the host names clients reach the API by besides the
	// listen address (behind a proxy, say api.example.com). They are
	// reserved: no sandbox may bind one as a custom domain, which would
	// route the API's own traffic into a tenant's sandbox. Normalized
	// (lowercase, no port, no trailing dot).
	APIHosts []string
	// PprofListen, when set, serves net/http/pprof on this loopback
	// address (profiling a benchmark: `go run ./bench/poolbench
	// -cpuprofile`). Off by default; never a non-loopback address, since
	// profiles show memory and command lines.
	PprofListen string
	// HTTPSListen, when set, serves preview URLs (and the API) over TLS
	// too: with certificates from ACME when ACMEEmail is set, else from a
	// local CA whose certificate is written to <data-dir>/preview-ca.pem.
	HTTPSListen string
	// ACMEEmail is the ACME account contact for production certificates.
	ACMEEmail string
	// HTTPSCert and HTTPSKey are the operator's certificate (PEM, the
	// chain after the leaf) and its key for HTTPSListen: served for every
	// server name it covers (the API's, a wildcard of the preview domain);
	// other names get ACME's or the local CA's. Both or neither.
	HTTPSCert, HTTPSKey string
	// TLSListen is the address of the SNI passthrough listener for TLS
	// port exposures; it is bound on the first TCP or TLS exposure.
	TLSListen string
	// TCPHost is the host raw TCP exposures bind their host ports on and
	// name in their tcp:// URLs. Loopback unless AllowPublic is set;
	// DefaultTCPHost when not given.
	TCPHost string
	// DefaultImage is used when a create request names no image.
	DefaultImage string
	// DefaultRuntime is the runtime of a create that names none: docker
	// or gvisor.
	DefaultRuntime string
	// Engine runs the sandboxes: "oci" (an OCI runtime directly, crun or
	// runc: internal/runtime/oci; the engine keeps the images), the
	// default, or "docker" (the Docker engine).
	Engine string
	// OCIDir holds the oci engine's images and sandboxes (default
	// <data-dir>/oci); on btrfs with quotas (scripts/setup-oci.sh makes
	// one) sandboxes' disk limits are enforced.
	OCIDir string
	// SandboxIOMBps and SandboxIOIOPS are every oci engine sandbox's
	// block I/O limit, each for reads and for writes, on the devices of
	// OCIDir (internal/runtime/oci/io.go); 0: none.
	SandboxIOMBps, SandboxIOIOPS int64
	// DefaultTimeout is the lifetime of a native API create that sends no
	// timeout_s (one that sends 0 asks for none). Zero: no default. The
	// E2B and Daytona facades keep their SDKs' own defaults.
	DefaultTimeout time.Duration
	// HostPortLo and HostPortHi bound the pool of host ports that TCP
	// exposures take (inclusive).
	HostPortLo, HostPortHi int
	// MilliCPU and MemoryMB are the host budget that admission reserves
	// sandboxes against.
	MilliCPU, MemoryMB int64
	// SandboxNetwork lets sandboxes have outbound network when they ask
	// for it. Off by default: sandboxes have no route out.
	SandboxNetwork bool
	// SandboxNetworkName is the engine network (a bridge made by the
	// daemon, traffic between its containers off) sandboxes with network
	// join; its bridge interface has the same name (at most 15 bytes).
	SandboxNetworkName string
	// E2BBodyDedupe is the rule for E2B creates without an Idempotency-Key
	// (README "Create dedupe"): "undelivered" (the default) adopts only a
	// create whose client went away before its answer; "body" (also "true",
	// the old behaviour) collapses identical bodies within the window;
	// "off" (also "false") neither.
	E2BBodyDedupe string
	// E2BReplayWindow is how long an E2B create stays adoptable (undelivered)
	// or replayable (body).
	E2BReplayWindow time.Duration
	// PauseMax is how long a sandbox may stay paused (its processes frozen,
	// its memory held) before it is stopped, its file system kept; the next
	// resume restarts its processes. Zero: never.
	PauseMax time.Duration
	// HibernateStorageMaxMB bounds what the hibernate images hold in the
	// data dir together, daemon-wide: a hibernate that would pass it
	// stops the sandbox instead. 0: a quarter of the data dir's file
	// system.
	HibernateStorageMaxMB int64
	// PausedMemoryFloor is the percent of the host's memory kept
	// available: under it, paused sandboxes are stopped (their file
	// systems kept), longest paused first. 0: never.
	PausedMemoryFloor int
	// TemplateStorageMB bounds each owner's templates and snapshots
	// together, in MB of image (0: unlimited).
	TemplateStorageMB int64
	// DiskDefaultMB is the disk limit of a create that asks for none, and
	// DiskMaxMB the most one may ask for, in MiB of what the sandbox
	// writes to its own file system.
	DiskDefaultMB, DiskMaxMB int64
	// VolumeSizeMB is the size of each new volume, a file system of its
	// own where the daemon can make one; it counts in its owner's disk
	// quota while the volume exists. VolumeStorageMaxMB bounds all the
	// volumes' sizes together (0: half of the data directory's file
	// system).
	VolumeSizeMB, VolumeStorageMaxMB int64
	// RegistryAllow lists the registry hosts images may be pulled from
	// ("docker.io" is Docker Hub; "host:port", or a host for all its
	// ports); empty: any.
	RegistryAllow []string
	// ImageMaxMB refuses a pull whose image is bigger, and removes it
	// (0: no cap).
	ImageMaxMB int64
	// Registry is, in cluster mode, the registry ("host[:port][/path]")
	// the nodes share templates through, with the "user:password" in
	// RegistryAuthFile (empty: anonymous). "": templates' records are
	// shared, their images stay on the node that made them.
	Registry, RegistryAuthFile string
	// Pool is how many started, idle sandboxes the warm pool keeps per
	// image (default CPU, memory and runtime, no network); the default is
	// two of DefaultImage. The admin API (PUT /v1/pools) changes it at
	// run time, for any class.
	Pool []PoolSize
	// IdleTimeout closes a kept-alive connection that has had no request
	// for that long.
	IdleTimeout time.Duration
	// RequestTimeout bounds a whole request (reading its body, handling
	// it, writing the answer) on routes that are not streams; exec, file
	// transfers, envd traffic, WebSockets and preview proxying have none.
	RequestTimeout time.Duration
	// MaxConns caps the HTTP connections open at once across the API and
	// HTTPS listeners; past it new connections wait. 0: a quarter of the
	// process's open-file limit.
	MaxConns int
	// ReconcileEvery is the period of the background reconciler.
	ReconcileEvery time.Duration
	// DNSResolver is the DNS server (host:port) custom-domain
	// verification looks TXT records up with. Empty: the system's.
	DNSResolver string
	// DomainCheckEvery is how often pending custom domains are looked up
	// again (each for an hour after its claim or its last verify call).
	DomainCheckEvery time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// DefaultQuota is the quota of user tokens created through the API
	// without one (zero: unlimited).
	DefaultQuota Quota
	// AdvertiseURL is the base URL other cluster nodes reach this node's
	// API by (forwarded calls). Empty: http://<Listen>. Cluster mode is on
	// when the data directory holds the cluster file that `sandboxd
	// cluster init|join` writes (docs/cluster.md).
	AdvertiseURL string
	// AdvertiseTLS is the host:port other cluster nodes carry TLS
	// connections for this node's sandboxes to (its SNI listener). Empty:
	// the address TLSListen is bound on. Set it when TLSListen binds a
	// wildcard or sits behind a NAT.
	AdvertiseTLS string
}

// MaxTimeout is the longest --default-timeout: the longest timeout a
// create may ask for (the service's bound).
const MaxTimeout = 7 * 24 * time.Hour

// DefaultEngine is --engine when none is given (nor SANDBOXD_ENGINE):
// the engine-free runtime, which passes every test the Docker engine
// passes (docs/design.md, "The engine-free runtime").
const DefaultEngine = "oci"

// MinDiskMB is the smallest disk limit a sandbox may have: the agent and
// a shell need a little room to write (their state, a temporary file).
const MinDiskMB = 16

// Quota bounds what one owner holds at once; a zero field is unlimited.
type Quota struct {
	Sandboxes, MilliCPU, MemoryMB int64
	// DiskMB bounds the sum of the owner's sandboxes' disk limits.
	DiskMB int64
}

// ParseQuota reads "sandboxes=N,cpu=C,memory_mb=M,disk_mb=D" (any subset, cpu in
// cores; "" is no quota).
func ParseQuota(s string) (Quota, error) {
	var q Quota
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return Quota{}, fmt.Errorf("quota %q: want key=value", item)
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 0 || n > 1e12 {
			return Quota{}, fmt.Errorf("quota %q: want a number from 0 (unlimited)", item)
		}
		switch k {
		case "sandboxes":
			q.Sandboxes = int64(n)
		case "cpu":
			q.MilliCPU = int64(n*1000 + 0.5)
		case "memory_mb":
			q.MemoryMB = int64(n)
		case "disk_mb":
			q.DiskMB = int64(n)
		default:
			return Quota{}, fmt.Errorf("quota %q: keys are sandboxes, cpu, memory_mb and disk_mb", item)
		}
	}
	return q, nil
}

// Parse reads the daemon's configuration from args (without the program
// name), the environment lookup function env (os.LookupEnv in main) and
// the config file that --config or SANDBOXD_CONFIG names (file.go).
// Flags win over environment variables, which win over the file, which
// wins over defaults.
func Parse(args []string, env func(string) (string, bool)) (Daemon, error) {
	d, err := defaults(env)
	if err != nil {
		return Daemon{}, err
	}
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	configPath := ""
	if v, ok := env("SANDBOXD_CONFIG"); ok {
		configPath = v
	}
	fs.StringVar(&configPath, "config", configPath, "settings file: one name = value a line (the names of these flags), # comments; flags and environment win over it (env SANDBOXD_CONFIG)")
	fs.StringVar(&d.Listen, "listen", d.Listen, "HTTP listen address (env SANDBOXD_LISTEN)")
	fs.BoolVar(&d.AllowPublic, "allow-public", d.AllowPublic, "let --listen and --https-listen be a non-loopback address or a host name (env SANDBOXD_ALLOW_PUBLIC)")
	fs.StringVar(&d.DataDir, "data-dir", d.DataDir, "data directory (env SANDBOXD_DATA_DIR)")
	fs.StringVar(&d.AgentBinary, "agent-binary", d.AgentBinary, "toolboxd binary mounted into sandboxes (default: beside sandboxd)")
	fs.StringVar(&d.NodeID, "node-id", d.NodeID, "node id used in container labels (env SANDBOXD_NODE_ID; default: one kept in the data dir)")
	fs.StringVar(&d.Domain, "domain", d.Domain, "preview URL domain (env SANDBOXD_DOMAIN)")
	var apiHosts []string
	fs.Func("api-host", "a host name clients reach the API by, never bindable as a custom domain; repeatable (env SANDBOXD_API_HOSTS, comma-separated)",
		func(v string) error { apiHosts = append(apiHosts, v); return nil })
	fs.StringVar(&d.HTTPSListen, "https-listen", d.HTTPSListen, "also serve over TLS on this address (env SANDBOXD_HTTPS_LISTEN; default off)")
	fs.StringVar(&d.PprofListen, "pprof-listen", d.PprofListen, "serve net/http/pprof on this loopback address (default off)")
	fs.StringVar(&d.ACMEEmail, "acme-email", d.ACMEEmail, "ACME account email: certificates for --https-listen from ACME instead of a local CA")
	fs.StringVar(&d.HTTPSCert, "https-cert", d.HTTPSCert, "certificate (PEM, with its chain) served on --https-listen for the names it covers; with --https-key (env SANDBOXD_HTTPS_CERT)")
	fs.StringVar(&d.HTTPSKey, "https-key", d.HTTPSKey, "the key of --https-cert, PEM (env SANDBOXD_HTTPS_KEY)")
	fs.StringVar(&d.TLSListen, "tls-listen", d.TLSListen, "SNI passthrough listener for TLS exposures (env SANDBOXD_TLS_LISTEN)")
	fs.StringVar(&d.TCPHost, "tcp-host", d.TCPHost, "host (address or name) raw TCP exposures bind their host ports on and name in their URLs (default 127.0.0.2: a loopback address apart from the API's, so that a browser does not send the dashboard's cookie to them; the dashboard is not served on this host); beyond loopback with --allow-public, where they answer anyone who reaches this host: a raw TCP exposure has no credential (env SANDBOXD_TCP_HOST)")
	fs.StringVar(&d.DefaultImage, "default-image", d.DefaultImage, "image used when a request names none")
	fs.StringVar(&d.Engine, "engine", d.Engine, "what runs sandboxes: oci (crun or runc directly, runsc for gVisor; images still come from the Docker engine) or docker (the Docker engine) (env SANDBOXD_ENGINE)")
	fs.Int64Var(&d.SandboxIOMBps, "sandbox-io-mbps", d.SandboxIOMBps,
		"under --engine oci, the MiB/s each sandbox may read, and may write, on the disk of --oci-dir; 0: no limit (env SANDBOXD_SANDBOX_IO_MBPS)")
	fs.Int64Var(&d.SandboxIOIOPS, "sandbox-io-iops", d.SandboxIOIOPS,
		"under --engine oci, the read and the write operations per second each sandbox may do on the disk of --oci-dir; 0: no limit (env SANDBOXD_SANDBOX_IO_IOPS)")
	fs.StringVar(&d.OCIDir, "oci-dir", d.OCIDir, "the oci engine's images and sandboxes, on btrfs with quotas for disk limits (default <data-dir>/oci; env SANDBOXD_OCI_DIR)")
	fs.StringVar(&d.DefaultRuntime, "default-runtime", d.DefaultRuntime, "runtime used when a request names none: docker or gvisor (env SANDBOXD_DEFAULT_RUNTIME)")
	fs.DurationVar(&d.DefaultTimeout, "default-timeout", d.DefaultTimeout,
		"lifetime of a native create that sends no timeout_s (timeout_s 0 asks for none); 0: no default (env SANDBOXD_DEFAULT_TIMEOUT)")
	portRange := fmt.Sprintf("%d-%d", d.HostPortLo, d.HostPortHi)
	if v, ok := env("SANDBOXD_HOST_PORTS"); ok && v != "" {
		portRange = v // parsed below with the flag, so a bad value is an error too
	}
	fs.StringVar(&portRange, "host-ports", portRange, "host port pool for TCP exposure, lo-hi (env SANDBOXD_HOST_PORTS)")
	fs.Int64Var(&d.MilliCPU, "cpu-budget", d.MilliCPU, "CPU budget in millicores for all sandboxes")
	fs.Int64Var(&d.MemoryMB, "memory-budget", d.MemoryMB, "memory budget in MB for all sandboxes")
	fs.BoolVar(&d.SandboxNetwork, "sandbox-network", d.SandboxNetwork, "let sandboxes that ask for it have outbound network (env SANDBOXD_SANDBOX_NETWORK)")
	fs.StringVar(&d.SandboxNetworkName, "sandbox-network-name", d.SandboxNetworkName, "the bridge network (and interface) the daemon makes for sandboxes with network, at most 15 bytes (env SANDBOXD_SANDBOX_NETWORK_NAME)")
	fs.Var(dedupeFlag{&d.E2BBodyDedupe}, "e2b-body-dedupe",
		"E2B creates without an Idempotency-Key: undelivered (adopt only a create whose client went away), body or true (collapse identical bodies, the old rule), off or false (env SANDBOXD_E2B_BODY_DEDUPE)")
	fs.DurationVar(&d.E2BReplayWindow, "e2b-replay-window", d.E2BReplayWindow,
		"how long an undelivered E2B create stays adoptable (or, with --e2b-body-dedupe=body, an identical body is replayed) (env SANDBOXD_E2B_REPLAY_WINDOW)")
	fs.DurationVar(&d.PauseMax, "pause-max", d.PauseMax,
		"stop a sandbox paused for longer than this, keeping its file system (its next resume restarts its processes); 0: never (env SANDBOXD_PAUSE_MAX)")
	fs.Int64Var(&d.HibernateStorageMaxMB, "hibernate-storage-max", d.HibernateStorageMaxMB,
		"MiB the hibernate images may hold in the data dir together, one owner's at most half: a hibernate that would pass it stops the sandbox instead, saying so; 0: a quarter of the data dir's file system (env SANDBOXD_HIBERNATE_STORAGE_MAX)")
	fs.IntVar(&d.PausedMemoryFloor, "pause-memory-floor", d.PausedMemoryFloor,
		"percent of the host's memory to keep available: under it, paused sandboxes are stopped, longest paused first; 0: never (env SANDBOXD_PAUSE_MEMORY_FLOOR)")
	fs.Int64Var(&d.TemplateStorageMB, "template-storage-max", d.TemplateStorageMB,
		"MB of images each owner's templates and snapshots may hold together; 0: unlimited (env SANDBOXD_TEMPLATE_STORAGE_MAX)")
	fs.Int64Var(&d.DiskDefaultMB, "disk-default-mb", d.DiskDefaultMB,
		"disk limit in MiB of a sandbox whose create asks for none (env SANDBOXD_DISK_DEFAULT_MB)")
	fs.Int64Var(&d.DiskMaxMB, "disk-max-mb", d.DiskMaxMB,
		"largest disk limit in MiB a create may ask for (env SANDBOXD_DISK_MAX_MB)")
	fs.Int64Var(&d.VolumeSizeMB, "volume-size-mb", d.VolumeSizeMB,
		"size in MiB of each new volume, a file system of its own; it counts in its owner's disk quota (env SANDBOXD_VOLUME_SIZE_MB)")
	fs.Int64Var(&d.VolumeStorageMaxMB, "volume-storage-max", d.VolumeStorageMaxMB,
		"MiB all volumes' sizes may come to together; 0: half of the data directory's file system (env SANDBOXD_VOLUME_STORAGE_MAX)")
	registryAllow := strings.Join(d.RegistryAllow, ",")
	fs.StringVar(&registryAllow, "registry-allow", registryAllow,
		"comma-separated registry hosts images may be pulled from (docker.io is Docker Hub; a host without a port allows all its ports); '*': any, which lets tenants point the engine at any host the daemon's host reaches (env SANDBOXD_REGISTRY_ALLOW)")
	fs.Int64Var(&d.ImageMaxMB, "image-max-mb", d.ImageMaxMB,
		"refuse, and remove, a pulled image bigger than this many MiB; 0: no cap (env SANDBOXD_IMAGE_MAX_MB)")
	fs.StringVar(&d.Registry, "registry", d.Registry,
		"cluster mode: the registry (host[:port][/path]) the nodes push templates to and pull them from, so that every node creates from any node's templates (env SANDBOXD_REGISTRY)")
	fs.StringVar(&d.RegistryAuthFile, "registry-auth-file", d.RegistryAuthFile,
		"file holding user:password for --registry; unset: anonymous (env SANDBOXD_REGISTRY_AUTH_FILE)")
	pool := ""
	if v, ok := env("SANDBOXD_POOL"); ok {
		pool = v
	}
	fs.StringVar(&pool, "pool", pool, "warm pool: IMAGE=N[,IMAGE=N...] idle sandboxes per image (IMAGE=MIN-MAX: following demand), or none (env SANDBOXD_POOL; default: 2 of the default image)")
	fs.DurationVar(&d.IdleTimeout, "idle-timeout", d.IdleTimeout, "close a kept-alive connection idle this long (env SANDBOXD_IDLE_TIMEOUT)")
	fs.DurationVar(&d.RequestTimeout, "request-timeout", d.RequestTimeout, "bound on a whole request to a route that is not a stream (env SANDBOXD_REQUEST_TIMEOUT)")
	fs.IntVar(&d.MaxConns, "max-conns", d.MaxConns, "HTTP connections open at once; 0: a quarter of the open-file limit (env SANDBOXD_MAX_CONNS)")
	fs.DurationVar(&d.ReconcileEvery, "reconcile-every", d.ReconcileEvery, "period of the reconciler")
	fs.StringVar(&d.DNSResolver, "dns-resolver", d.DNSResolver, "host:port of the DNS server custom-domain verification asks for TXT records (env SANDBOXD_DNS_RESOLVER; default the system's)")
	fs.DurationVar(&d.DomainCheckEvery, "domain-check-every", d.DomainCheckEvery, "how often pending custom domains are looked up again (env SANDBOXD_DOMAIN_CHECK_EVERY)")
	fs.StringVar(&d.LogLevel, "log-level", d.LogLevel, "debug, info, warn or error")
	fs.StringVar(&d.AdvertiseURL, "advertise-url", d.AdvertiseURL, "cluster mode: the URL other nodes reach this node's API by (env SANDBOXD_ADVERTISE_URL; default http://<listen>)")
	fs.StringVar(&d.AdvertiseTLS, "advertise-tls", d.AdvertiseTLS, "cluster mode: the host:port other nodes reach this node's SNI listener by (env SANDBOXD_ADVERTISE_TLS; default the bound --tls-listen address)")
	defaultQuota := ""
	if v, ok := env("SANDBOXD_DEFAULT_QUOTA"); ok {
		defaultQuota = v
	}
	fs.StringVar(&defaultQuota, "default-quota", defaultQuota,
		"quota of user tokens created without one: sandboxes=N,cpu=C,memory_mb=M,disk_mb=D (env SANDBOXD_DEFAULT_QUOTA; default unlimited)")
	if err := fs.Parse(args); err != nil {
		return Daemon{}, err
	}
	var origin map[string]string
	if configPath != "" {
		set := make(map[string]bool)
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		overridden := func(name string) bool {
			if set[name] {
				return true
			}
			key, ok := flagEnv[name]
			if !ok {
				return false
			}
			v, ok := env(key)
			return ok && v != ""
		}
		if origin, err = applyFile(fs, configPath, overridden); err != nil {
			return Daemon{}, err
		}
	}
	q, err := ParseQuota(defaultQuota)
	if err != nil {
		return Daemon{}, fmt.Errorf("--default-quota: %w", err)
	}
	d.DefaultQuota = q
	if d.Pool, err = ParsePool(pool, d.DefaultImage); err != nil {
		return Daemon{}, fmt.Errorf("--pool: %w", err)
	}
	lo, hi, err := parseRange(portRange)
	if err != nil {
		return Daemon{}, fmt.Errorf("--host-ports: %w", err)
	}
	d.HostPortLo, d.HostPortHi = lo, hi
	if d.RegistryAllow, err = ParseRegistryAllow(registryAllow); err != nil {
		return Daemon{}, fmt.Errorf("--registry-allow: %w", err)
	}
	if d.Registry, err = parseClusterRegistry(d.Registry); err != nil {
		return Daemon{}, fmt.Errorf("--registry: %w", err)
	}
	if apiHosts != nil { // the flags replace the environment's list
		d.APIHosts = apiHosts
	}
	if d.APIHosts, err = normalizeHosts(d.APIHosts); err != nil {
		return Daemon{}, fmt.Errorf("--api-host: %w", err)
	}
	if d.TCPHost == "" {
		d.TCPHost = DefaultTCPHost(d.Listen)
	}
	if err := d.validate(); err != nil {
		return Daemon{}, withOrigin(err, origin)
	}
	return d, nil
}

// DefaultTCPHost is --tcp-host when none is given: a loopback address
// that is not the API's (listen's), 127.0.0.2 (127.0.0.3 when the API is
// on 127.0.0.2). Browsers scope cookies by host, not by port: were raw
// TCP exposures, which pass bytes straight through, on the dashboard's
// address (localhost, 127.0.0.1), a browser logged in to the dashboard
// would send its session cookie to any exposure a page links to. No name
// a browser uses for the dashboard on loopback (localhost, 127.0.0.1,
// ::1) reaches 127.0.0.2, and the dashboard refuses to serve the TCP
// host (ui.Options.TCPHost).
func DefaultTCPHost(listen string) string {
	if host, _, err := net.SplitHostPort(listen); err == nil && host == "127.0.0.2" {
		return "127.0.0.3"
	}
	return "127.0.0.2"
}

// parseClusterRegistry checks --registry: a registry host (a name or an
// address, with a port or not) and an optional repository path, no
// scheme; lowercased.
func parseClusterRegistry(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	s = strings.ToLower(strings.TrimSuffix(s, "/"))
	if strings.Contains(s, "://") {
		return "", fmt.Errorf("%q: give host[:port][/path], without a scheme", s)
	}
	host, _, _ := strings.Cut(s, "/")
	if _, err := reference.ParseNormalizedNamed(s + "/sandboxd/templates"); err != nil || host == "" ||
		(!strings.ContainsAny(host, ".:") && host != "localhost") {
		return "", fmt.Errorf("%q: not a registry host[:port][/path] (a host needs a dot or a port, as the engine reads it)", s)
	}
	return s, nil
}

// ParseRegistryAllow reads a comma-separated list of registry hosts,
// each normalized as image references name them (imageref.RegistryHost:
// lowercase, "docker.io" for Docker Hub, index.docker.io too, a port
// kept). Empty items are skipped; "*" (or nothing at all) allows every
// registry, and is nil.
func ParseRegistryAllow(s string) ([]string, error) {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if item == "*" {
			return nil, nil
		}
		host, err := imageref.RegistryHost(item)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, host) {
			out = append(out, host)
		}
	}
	return out, nil
}

// normalizeHosts lowercases each host and drops a :port and a trailing dot
// (as Host headers are compared), refusing one that is not a host name or
// an IP literal.
func normalizeHosts(hosts []string) ([]string, error) {
	var out []string
	for _, h := range hosts {
		n := naming.NormalizeHost(strings.TrimSpace(h))
		if net.ParseIP(n) == nil && !naming.ValidLabel(n) && !naming.ValidHostname(n) {
			return nil, fmt.Errorf("%q is not a host name", h)
		}
		out = append(out, n)
	}
	return out, nil
}

func defaults(env func(string) (string, bool)) (Daemon, error) {
	get := func(key, def string) string {
		if v, ok := env(key); ok && v != "" {
			return v
		}
		return def
	}
	d := Daemon{
		Listen:             get("SANDBOXD_LISTEN", "127.0.0.1:7070"),
		AllowPublic:        get("SANDBOXD_ALLOW_PUBLIC", "false") == "true",
		DataDir:            get("SANDBOXD_DATA_DIR", ".sandboxd"),
		AgentBinary:        get("SANDBOXD_AGENT_BINARY", ""),
		NodeID:             get("SANDBOXD_NODE_ID", ""),
		Domain:             get("SANDBOXD_DOMAIN", "localhost"),
		TLSListen:          get("SANDBOXD_TLS_LISTEN", "127.0.0.1:7443"),
		TCPHost:            get("SANDBOXD_TCP_HOST", ""), // "": DefaultTCPHost, once --listen is known
		HTTPSListen:        get("SANDBOXD_HTTPS_LISTEN", ""),
		HTTPSCert:          get("SANDBOXD_HTTPS_CERT", ""),
		HTTPSKey:           get("SANDBOXD_HTTPS_KEY", ""),
		DefaultImage:       get("SANDBOXD_DEFAULT_IMAGE", "sandboxd/base:bookworm"),
		APIHosts:           splitList(get("SANDBOXD_API_HOSTS", "")),
		DefaultRuntime:     get("SANDBOXD_DEFAULT_RUNTIME", "docker"),
		Engine:             get("SANDBOXD_ENGINE", DefaultEngine),
		OCIDir:             get("SANDBOXD_OCI_DIR", ""),
		HostPortLo:         40000,
		HostPortHi:         40999,
		MilliCPU:           int64(runtime.NumCPU()) * 1000 * 4, // CPU is shared, so overcommit 4x
		MemoryMB:           16 * 1024,
		E2BBodyDedupe:      get("SANDBOXD_E2B_BODY_DEDUPE", DedupeUndelivered),
		SandboxNetwork:     get("SANDBOXD_SANDBOX_NETWORK", "false") == "true",
		SandboxNetworkName: get("SANDBOXD_SANDBOX_NETWORK_NAME", "sandboxd0"),
		ReconcileEvery:     30 * time.Second,
		DNSResolver:        get("SANDBOXD_DNS_RESOLVER", ""),
		LogLevel:           get("SANDBOXD_LOG_LEVEL", "info"),
		AdvertiseURL:       get("SANDBOXD_ADVERTISE_URL", ""),
		AdvertiseTLS:       get("SANDBOXD_ADVERTISE_TLS", ""),
	}
	if d.AgentBinary == "" {
		if exe, err := os.Executable(); err == nil {
			d.AgentBinary = filepath.Join(filepath.Dir(exe), "toolboxd")
		}
	}
	var err error
	if d.IdleTimeout, err = time.ParseDuration(get("SANDBOXD_IDLE_TIMEOUT", "60s")); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_IDLE_TIMEOUT: %w", err)
	}
	if d.RequestTimeout, err = time.ParseDuration(get("SANDBOXD_REQUEST_TIMEOUT", "5m")); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_REQUEST_TIMEOUT: %w", err)
	}
	if d.E2BReplayWindow, err = time.ParseDuration(get("SANDBOXD_E2B_REPLAY_WINDOW", "10s")); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_E2B_REPLAY_WINDOW: %w", err)
	}
	if d.PauseMax, err = time.ParseDuration(get("SANDBOXD_PAUSE_MAX", "10m")); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_PAUSE_MAX: %w", err)
	}
	if d.HibernateStorageMaxMB, err = strconv.ParseInt(get("SANDBOXD_HIBERNATE_STORAGE_MAX", "0"), 10, 64); err != nil || d.HibernateStorageMaxMB < 0 {
		return Daemon{}, fmt.Errorf("SANDBOXD_HIBERNATE_STORAGE_MAX: must be a whole number of MiB, 0 or more")
	}
	if d.PausedMemoryFloor, err = strconv.Atoi(get("SANDBOXD_PAUSE_MEMORY_FLOOR", "10")); err != nil || d.PausedMemoryFloor < 0 || d.PausedMemoryFloor > 90 {
		return Daemon{}, fmt.Errorf("SANDBOXD_PAUSE_MEMORY_FLOOR: must be a percent from 0 to 90")
	}
	if d.TemplateStorageMB, err = strconv.ParseInt(get("SANDBOXD_TEMPLATE_STORAGE_MAX", "10240"), 10, 64); err != nil || d.TemplateStorageMB < 0 {
		return Daemon{}, fmt.Errorf("SANDBOXD_TEMPLATE_STORAGE_MAX: must be a whole number of MB, 0 or more")
	}
	// The defaults: a fifth of this machine's disk for 1 MiB direct
	// writes (536 MB/s) and an eighth of its 4 KiB ones (16,000/s), so
	// that one sandbox cannot take the disk from the others.
	if d.SandboxIOMBps, err = strconv.ParseInt(get("SANDBOXD_SANDBOX_IO_MBPS", "100"), 10, 64); err != nil || d.SandboxIOMBps < 0 {
		return Daemon{}, fmt.Errorf("SANDBOXD_SANDBOX_IO_MBPS: must be a whole number of MiB/s, 0 or more")
	}
	if d.SandboxIOIOPS, err = strconv.ParseInt(get("SANDBOXD_SANDBOX_IO_IOPS", "2000"), 10, 64); err != nil || d.SandboxIOIOPS < 0 {
		return Daemon{}, fmt.Errorf("SANDBOXD_SANDBOX_IO_IOPS: must be a whole number of operations per second, 0 or more")
	}
	if d.DiskDefaultMB, err = strconv.ParseInt(get("SANDBOXD_DISK_DEFAULT_MB", "10240"), 10, 64); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_DISK_DEFAULT_MB: must be a whole number of MiB")
	}
	if d.DiskMaxMB, err = strconv.ParseInt(get("SANDBOXD_DISK_MAX_MB", "102400"), 10, 64); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_DISK_MAX_MB: must be a whole number of MiB")
	}
	if d.VolumeSizeMB, err = strconv.ParseInt(get("SANDBOXD_VOLUME_SIZE_MB", "10240"), 10, 64); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_VOLUME_SIZE_MB: must be a whole number of MiB")
	}
	if d.VolumeStorageMaxMB, err = strconv.ParseInt(get("SANDBOXD_VOLUME_STORAGE_MAX", "0"), 10, 64); err != nil || d.VolumeStorageMaxMB < 0 {
		return Daemon{}, fmt.Errorf("SANDBOXD_VOLUME_STORAGE_MAX: must be a whole number of MiB, 0 or more")
	}
	if d.ImageMaxMB, err = strconv.ParseInt(get("SANDBOXD_IMAGE_MAX_MB", "10240"), 10, 64); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_IMAGE_MAX_MB: must be a whole number of MiB")
	}
	// Docker Hub only by default: the engine fetches whatever a registry
	// (or its token realm) a tenant names points it at, from the host's
	// network, so every other host is the operator's choice.
	d.RegistryAllow = strings.Split(get("SANDBOXD_REGISTRY_ALLOW", "docker.io"), ",") // checked with the flag's value
	d.Registry = get("SANDBOXD_REGISTRY", "")
	d.RegistryAuthFile = get("SANDBOXD_REGISTRY_AUTH_FILE", "")
	if d.E2BBodyDedupe, err = parseDedupe(d.E2BBodyDedupe); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_E2B_BODY_DEDUPE: %w", err)
	}
	if d.MaxConns, err = strconv.Atoi(get("SANDBOXD_MAX_CONNS", "0")); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_MAX_CONNS: %w", err)
	}
	if d.DomainCheckEvery, err = time.ParseDuration(get("SANDBOXD_DOMAIN_CHECK_EVERY", "30s")); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_DOMAIN_CHECK_EVERY: %w", err)
	}
	if d.DefaultTimeout, err = time.ParseDuration(get("SANDBOXD_DEFAULT_TIMEOUT", "1h")); err != nil {
		return Daemon{}, fmt.Errorf("SANDBOXD_DEFAULT_TIMEOUT: %w", err)
	}
	return d, nil
}

func (d Daemon) validate() error {
	if d.DiskMaxMB < MinDiskMB || d.DiskDefaultMB < MinDiskMB || d.DiskDefaultMB > d.DiskMaxMB {
		return bad([]string{"disk-default-mb", "disk-max-mb"}, "--disk-default-mb %d, --disk-max-mb %d: each at least %d, the default at most the maximum", d.DiskDefaultMB, d.DiskMaxMB, MinDiskMB)
	}
	if d.VolumeSizeMB < MinDiskMB || d.VolumeSizeMB > d.DiskMaxMB {
		return bad([]string{"volume-size-mb", "disk-max-mb"}, "--volume-size-mb %d: at least %d and at most --disk-max-mb %d", d.VolumeSizeMB, MinDiskMB, d.DiskMaxMB)
	}
	if d.ImageMaxMB < 0 {
		return fmt.Errorf("--image-max-mb %d: must be zero (no cap) or positive", d.ImageMaxMB)
	}
	if d.E2BReplayWindow <= 0 {
		return bad([]string{"e2b-replay-window"}, "--e2b-replay-window %v: must be positive", d.E2BReplayWindow)
	}
	if d.HibernateStorageMaxMB < 0 {
		return bad([]string{"hibernate-storage-max"}, "--hibernate-storage-max %d: must be zero (a quarter of the data dir's file system) or positive", d.HibernateStorageMaxMB)
	}
	if d.PauseMax < 0 {
		return bad([]string{"pause-max"}, "--pause-max %v: must be zero (never) or positive", d.PauseMax)
	}
	if n := d.SandboxNetworkName; n == "" || len(n) > 15 || strings.ContainsAny(n, " /:\t\n\x00") {
		return bad([]string{"sandbox-network-name"}, "--sandbox-network-name %q: must be an interface name, 1 to 15 bytes", n)
	}
	if d.Engine != "docker" && d.Engine != "oci" {
		return bad([]string{"engine"}, "--engine %q: want docker or oci", d.Engine)
	}
	if d.SandboxIOMBps < 0 || d.SandboxIOIOPS < 0 {
		return bad([]string{"sandbox-io-mbps", "sandbox-io-iops"}, "--sandbox-io-mbps %d, --sandbox-io-iops %d: want 0 (no limit) or more", d.SandboxIOMBps, d.SandboxIOIOPS)
	}
	if d.OCIDir != "" && !filepath.IsAbs(d.OCIDir) {
		return bad([]string{"oci-dir"}, "--oci-dir %q: want an absolute path", d.OCIDir)
	}
	if d.DefaultRuntime != "docker" && d.DefaultRuntime != "gvisor" {
		return bad([]string{"default-runtime"}, "--default-runtime %q: want docker or gvisor", d.DefaultRuntime)
	}
	if err := listenAddr("--listen", d.Listen, d.AllowPublic); err != nil {
		return &invalid{flags: []string{"listen"}, err: err}
	}
	if d.HTTPSListen != "" {
		if err := listenAddr("--https-listen", d.HTTPSListen, d.AllowPublic); err != nil {
			return &invalid{flags: []string{"https-listen"}, err: err}
		}
	}
	if ip := net.ParseIP(d.TCPHost); d.TCPHost == "" || strings.ContainsAny(d.TCPHost, ":[]") && ip == nil {
		return bad([]string{"tcp-host"}, "--tcp-host %q: want an address or a host name, no port", d.TCPHost)
	} else if ip != nil && ip.IsUnspecified() {
		return bad([]string{"tcp-host"}, "--tcp-host %q: TCP exposures' URLs name this host, so it must be one clients reach (an address of this host or its name), not every address", d.TCPHost)
	} else if !d.AllowPublic && d.TCPHost != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return bad([]string{"tcp-host"}, "--tcp-host %q: only loopback addresses are allowed without --allow-public", d.TCPHost)
	}
	if (d.HTTPSCert == "") != (d.HTTPSKey == "") || d.HTTPSCert != "" && d.HTTPSListen == "" {
		return bad([]string{"https-cert", "https-key"}, "--https-cert and --https-key go together, with --https-listen")
	}
	if d.PprofListen != "" {
		if err := loopbackOnly("--pprof-listen", d.PprofListen, "(profiles show memory and command lines)"); err != nil {
			return &invalid{flags: []string{"pprof-listen"}, err: err}
		}
	}
	if d.DefaultTimeout < 0 || d.DefaultTimeout > MaxTimeout {
		return bad([]string{"default-timeout"}, "--default-timeout %v: from 0 (none) to %v", d.DefaultTimeout, MaxTimeout)
	}
	if d.DataDir == "" {
		return bad([]string{"data-dir"}, "--data-dir is required")
	}
	if d.MilliCPU <= 0 || d.MemoryMB <= 0 {
		return bad([]string{"cpu-budget", "memory-budget"}, "--cpu-budget and --memory-budget must be positive")
	}
	if d.IdleTimeout <= 0 || d.RequestTimeout <= 0 {
		return bad([]string{"idle-timeout", "request-timeout"}, "--idle-timeout and --request-timeout must be positive")
	}
	if d.MaxConns < 0 {
		return bad([]string{"max-conns"}, "--max-conns must be 0 (automatic) or positive")
	}
	if d.DomainCheckEvery <= 0 {
		return bad([]string{"domain-check-every"}, "--domain-check-every must be positive")
	}
	if d.DNSResolver != "" {
		if _, _, err := net.SplitHostPort(d.DNSResolver); err != nil {
			return bad([]string{"dns-resolver"}, "--dns-resolver %q: want host:port", d.DNSResolver)
		}
	}
	return nil
}

// listenAddr checks an API listen address: host:port, and on loopback
// unless public is set (--allow-public: the operator chose to serve beyond
// the host, where every route but health and public previews asks for a
// credential).
func listenAddr(flag, addr string, public bool) error {
	if !public {
		return loopbackOnly(flag, addr, "without --allow-public")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	return nil
}

// loopbackOnly refuses a listen address that is not on loopback, saying
// why (local mode serves nothing beyond the host).
func loopbackOnly(flag, addr, why string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s %q: only loopback addresses are allowed %s", flag, addr, why)
	}
	return nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func parseRange(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("range %q: want lo-hi", s)
	}
	if lo, err = strconv.Atoi(a); err != nil {
		return 0, 0, fmt.Errorf("range %q: %w", s, err)
	}
	if hi, err = strconv.Atoi(b); err != nil {
		return 0, 0, fmt.Errorf("range %q: %w", s, err)
	}
	if lo < 1024 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("range %q: want 1024 <= lo <= hi <= 65535", s)
	}
	return lo, hi, nil
}

// The values of --e2b-body-dedupe.
const (
	DedupeUndelivered = "undelivered"
	DedupeBody        = "body"
	DedupeOff         = "off"
)

// parseDedupe accepts the modes and the old boolean spellings: true was
// the old body dedupe, false was none.
func parseDedupe(v string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case DedupeUndelivered:
		return DedupeUndelivered, nil
	case DedupeBody, "true", "1":
		return DedupeBody, nil
	case DedupeOff, "false", "0":
		return DedupeOff, nil
	}
	return "", fmt.Errorf("%q: want undelivered, body (or true) or off (or false)", v)
}

// dedupeFlag is --e2b-body-dedupe. It is a boolean flag to the parser, so
// the old bare --e2b-body-dedupe still means true (body).
type dedupeFlag struct{ p *string }

func (f dedupeFlag) String() string {
	if f.p == nil {
		return ""
	}
	return *f.p
}

func (f dedupeFlag) Set(v string) error {
	m, err := parseDedupe(v)
	if err != nil {
		return err
	}
	*f.p = m
	return nil
}

func (dedupeFlag) IsBoolFlag() bool { return true }

// PoolSize is how many idle sandboxes of an image the warm pool keeps:
// Size, or, with Max above it, from Size to Max following demand.
type PoolSize struct {
	Image string
	Size  int
	Max   int
}

// maxPoolSize bounds one image's pool (the service's bound).
const maxPoolSize = 64

// ParsePool parses --pool: "IMAGE=N[,IMAGE=N...]" (an item may be
// IMAGE=MIN-MAX, a size that follows demand), "none" (or "0") for no
// pool, and "" for the default, two of defaultImage.
func ParsePool(s, defaultImage string) ([]PoolSize, error) {
	switch strings.TrimSpace(s) {
	case "":
		return []PoolSize{{Image: defaultImage, Size: 2}}, nil
	case "none", "0":
		return nil, nil
	}
	var out []PoolSize
	for _, item := range splitList(s) {
		img, n, ok := strings.Cut(item, "=")
		if lo, hi, ranged := strings.Cut(n, "-"); ok && ranged {
			size, err1 := strconv.Atoi(lo)
			most, err2 := strconv.Atoi(hi)
			if strings.TrimSpace(img) == "" || err1 != nil || err2 != nil || size < 0 || most <= size || most > maxPoolSize {
				return nil, fmt.Errorf("%q: want IMAGE=MIN-MAX with MIN below MAX, both from 0 to %d", item, maxPoolSize)
			}
			out = append(out, PoolSize{Image: strings.TrimSpace(img), Size: size, Max: most})
			continue
		}
		size, err := strconv.Atoi(n)
		if !ok || strings.TrimSpace(img) == "" || err != nil || size < 0 || size > maxPoolSize {
			return nil, fmt.Errorf("%q: want IMAGE=N with N from 0 to %d", item, maxPoolSize)
		}
		out = append(out, PoolSize{Image: strings.TrimSpace(img), Size: size})
	}
	return out, nil
}
