// Package config is the one place that reads sandboxd's flags and
// environment. Every other package receives the values it needs as plain
// fields; nothing else calls os.Getenv.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Daemon is the whole configuration of one sandboxd process.
type Daemon struct {
	// Listen is the address of the HTTP listener (API, facades, ingress).
	// It must be a loopback address unless AllowPublic is set.
	Listen string
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
	// HTTPSListen, when set, serves preview URLs (and the API) over TLS
	// too: with certificates from ACME when ACMEEmail is set, else from a
	// local CA whose certificate is written to <data-dir>/preview-ca.pem.
	HTTPSListen string
	// ACMEEmail is the ACME account contact for production certificates.
	ACMEEmail string
	// TLSListen is the address of the SNI passthrough listener for TLS
	// port exposures; it is bound on the first TCP or TLS exposure.
	TLSListen string
	// DefaultImage is used when a create request names no image.
	DefaultImage string
	// DefaultRuntime is the runtime of a create that names none: docker
	// or gvisor.
	DefaultRuntime string
	// HostPortLo and HostPortHi bound the pool of host ports that TCP
	// exposures take (inclusive).
	HostPortLo, HostPortHi int
	// MilliCPU and MemoryMB are the host budget that admission reserves
	// sandboxes against.
	MilliCPU, MemoryMB int64
	// SandboxNetwork lets sandboxes have outbound network when they ask
	// for it. Off by default: sandboxes have no route out.
	SandboxNetwork bool
	// E2BBodyDedupe turns on deduplication of identical E2B create bodies.
	E2BBodyDedupe bool
	// ReconcileEvery is the period of the background reconciler.
	ReconcileEvery time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
}

// Parse reads the daemon's configuration from args (without the program
// name) and the environment lookup function env (os.LookupEnv in main).
// Flags win over environment variables, which win over defaults.
func Parse(args []string, env func(string) (string, bool)) (Daemon, error) {
	d := defaults(env)
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	fs.StringVar(&d.Listen, "listen", d.Listen, "HTTP listen address (env SANDBOXD_LISTEN)")
	fs.StringVar(&d.DataDir, "data-dir", d.DataDir, "data directory (env SANDBOXD_DATA_DIR)")
	fs.StringVar(&d.AgentBinary, "agent-binary", d.AgentBinary, "toolboxd binary mounted into sandboxes (default: beside sandboxd)")
	fs.StringVar(&d.NodeID, "node-id", d.NodeID, "node id used in container labels (env SANDBOXD_NODE_ID; default: one kept in the data dir)")
	fs.StringVar(&d.Domain, "domain", d.Domain, "preview URL domain (env SANDBOXD_DOMAIN)")
	fs.StringVar(&d.HTTPSListen, "https-listen", d.HTTPSListen, "also serve over TLS on this address (env SANDBOXD_HTTPS_LISTEN; default off)")
	fs.StringVar(&d.ACMEEmail, "acme-email", d.ACMEEmail, "ACME account email: certificates for --https-listen from ACME instead of a local CA")
	fs.StringVar(&d.TLSListen, "tls-listen", d.TLSListen, "SNI passthrough listener for TLS exposures (env SANDBOXD_TLS_LISTEN)")
	fs.StringVar(&d.DefaultImage, "default-image", d.DefaultImage, "image used when a request names none")
	fs.StringVar(&d.DefaultRuntime, "default-runtime", d.DefaultRuntime, "runtime used when a request names none: docker or gvisor (env SANDBOXD_DEFAULT_RUNTIME)")
	portRange := fmt.Sprintf("%d-%d", d.HostPortLo, d.HostPortHi)
	if v, ok := env("SANDBOXD_HOST_PORTS"); ok && v != "" {
		portRange = v // parsed below with the flag, so a bad value is an error too
	}
	fs.StringVar(&portRange, "host-ports", portRange, "host port pool for TCP exposure, lo-hi (env SANDBOXD_HOST_PORTS)")
	fs.Int64Var(&d.MilliCPU, "cpu-budget", d.MilliCPU, "CPU budget in millicores for all sandboxes")
	fs.Int64Var(&d.MemoryMB, "memory-budget", d.MemoryMB, "memory budget in MB for all sandboxes")
	fs.BoolVar(&d.SandboxNetwork, "sandbox-network", d.SandboxNetwork, "let sandboxes that ask for it have outbound network (env SANDBOXD_SANDBOX_NETWORK)")
	fs.BoolVar(&d.E2BBodyDedupe, "e2b-body-dedupe", d.E2BBodyDedupe, "deduplicate identical E2B create bodies (env SANDBOXD_E2B_BODY_DEDUPE)")
	fs.DurationVar(&d.ReconcileEvery, "reconcile-every", d.ReconcileEvery, "period of the reconciler")
	fs.StringVar(&d.LogLevel, "log-level", d.LogLevel, "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return Daemon{}, err
	}
	lo, hi, err := parseRange(portRange)
	if err != nil {
		return Daemon{}, fmt.Errorf("--host-ports: %w", err)
	}
	d.HostPortLo, d.HostPortHi = lo, hi
	return d, d.validate()
}

func defaults(env func(string) (string, bool)) Daemon {
	get := func(key, def string) string {
		if v, ok := env(key); ok && v != "" {
			return v
		}
		return def
	}
	d := Daemon{
		Listen:         get("SANDBOXD_LISTEN", "127.0.0.1:7070"),
		DataDir:        get("SANDBOXD_DATA_DIR", ".sandboxd"),
		AgentBinary:    get("SANDBOXD_AGENT_BINARY", ""),
		NodeID:         get("SANDBOXD_NODE_ID", ""),
		Domain:         get("SANDBOXD_DOMAIN", "localhost"),
		TLSListen:      get("SANDBOXD_TLS_LISTEN", "127.0.0.1:7443"),
		HTTPSListen:    get("SANDBOXD_HTTPS_LISTEN", ""),
		DefaultImage:   get("SANDBOXD_DEFAULT_IMAGE", "sandboxd/base:bookworm"),
		DefaultRuntime: get("SANDBOXD_DEFAULT_RUNTIME", "docker"),
		HostPortLo:     40000,
		HostPortHi:     40999,
		MilliCPU:       int64(runtime.NumCPU()) * 1000 * 4, // CPU is shared, so overcommit 4x
		MemoryMB:       16 * 1024,
		E2BBodyDedupe:  get("SANDBOXD_E2B_BODY_DEDUPE", "true") != "false",
		SandboxNetwork: get("SANDBOXD_SANDBOX_NETWORK", "false") == "true",
		ReconcileEvery: 30 * time.Second,
		LogLevel:       get("SANDBOXD_LOG_LEVEL", "info"),
	}
	if d.AgentBinary == "" {
		if exe, err := os.Executable(); err == nil {
			d.AgentBinary = filepath.Join(filepath.Dir(exe), "toolboxd")
		}
	}
	return d
}

func (d Daemon) validate() error {
	if d.DefaultRuntime != "docker" && d.DefaultRuntime != "gvisor" {
		return fmt.Errorf("--default-runtime %q: want docker or gvisor", d.DefaultRuntime)
	}
	host, _, err := net.SplitHostPort(d.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", d.Listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %q: only loopback addresses are allowed in local mode", d.Listen)
	}
	if d.HTTPSListen != "" {
		host, _, err := net.SplitHostPort(d.HTTPSListen)
		if err != nil {
			return fmt.Errorf("--https-listen %q: %w", d.HTTPSListen, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("--https-listen %q: only loopback addresses are allowed in local mode", d.HTTPSListen)
		}
	}
	if d.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	if d.MilliCPU <= 0 || d.MemoryMB <= 0 {
		return errors.New("--cpu-budget and --memory-budget must be positive")
	}
	return nil
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
