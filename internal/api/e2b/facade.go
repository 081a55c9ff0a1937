package e2b

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/api/router"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/httplimit"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
	"golang.org/x/sync/singleflight"
)

// Service is what the facade needs of the domain layer; *service.Service
// implements it.
type Service interface {
	CreateOnce(ctx context.Context, c service.Caller, r service.CreateOnceRequest) (*service.Created, error)
	Get(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	List(ctx context.Context, c service.Caller, f service.ListFilter) ([]service.Sandbox, string, error)
	ListLocal(ctx context.Context, c service.Caller, f service.ListFilter) ([]service.Sandbox, string, error)
	Destroy(ctx context.Context, c service.Caller, idOrName string) error
	Start(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Stop(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Pause(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Resume(ctx context.Context, c service.Caller, idOrName string) (service.Resumed, error)
	Hibernate(ctx context.Context, c service.Caller, idOrName string) (service.Hibernated, error)
	Wake(ctx context.Context, id string) (service.Resumed, bool, error)
	UpdateSandbox(ctx context.Context, c service.Caller, idOrName string, u service.Update) (service.Sandbox, error)
	Stats(ctx context.Context, c service.Caller, idOrName string) (runtime.Stats, error)
	SandboxDisk(ctx context.Context, c service.Caller, idOrName string) (service.Disk, error)
	Logs(ctx context.Context, c service.Caller, idOrName string, q service.LogQuery, emit func([]service.LogLine) error) error
	DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error)
	Agent(ctx context.Context, sandboxID string) (*agent.Client, error)
	Snapshot(ctx context.Context, c service.Caller, idOrName, name string, memory service.SnapshotMemory) (service.Template, error)
	Fork(ctx context.Context, c service.Caller, idOrName string, n int) ([]*service.Created, error)
	GetTemplate(ctx context.Context, c service.Caller, idOrName string) (service.Template, error)
	ListTemplates(ctx context.Context, c service.Caller) ([]service.Template, error)
	DeleteTemplate(ctx context.Context, c service.Caller, idOrName string) error
	BuildTemplate(ctx context.Context, c service.Caller, r service.Recipe) (service.Template, bool, error)
	BuildLogLines(ctx context.Context, c service.Caller, idOrName string, offset int) ([]string, error)
	TagTemplate(ctx context.Context, c service.Caller, target, name string, tags []string) (service.Template, error)
	UntagTemplate(ctx context.Context, c service.Caller, name string, tags []string) error
	TemplateTags(ctx context.Context, c service.Caller, name string) ([]service.TemplateTag, error)
	SetNetworkPolicy(ctx context.Context, c service.Caller, idOrName string, p netpolicy.Policy) (service.Sandbox, error)
	// NetworkAllowed reports whether sandboxes may have network at all
	// (the daemon's --sandbox-network).
	NetworkAllowed() bool
}

var _ Service = (*service.Service)(nil)

// Authenticator verifies an API token; *auth.Authenticator is one. Every
// credential failure matches auth.ErrUnauthenticated; any other error is a
// failed lookup (answered 500, not 401).
type Authenticator interface {
	AuthenticateToken(ctx context.Context, token string) (auth.Principal, error)
}

// Options configures New. Service and Auth are required.
type Options struct {
	Service Service
	Auth    Authenticator
	// Logger receives one line per failed request (server errors in full).
	// Default: discard.
	Logger *slog.Logger
	// Domain is the preview domain: envd traffic may also arrive with
	// Host <port>-<sandbox-id>.<Domain>, and create reports it as the
	// sandbox's domain. Empty: header routing only, domain null.
	Domain string
	// AdvertisedDomain, when set, is the domain create reports instead of
	// Domain: Domain with the port clients reach the daemon on when that
	// is not the scheme's default ("localhost:7070"), so that the SDK's
	// getHost(port), <port>-<id>.<domain>, is a host that opens.
	AdvertisedDomain string
	// DomainPortFromHost, when set, makes the domain an answer reports
	// Domain with the port of the Host the request arrived with (none when
	// the Host has none: the client used its scheme's default), instead of
	// AdvertisedDomain. That is the address the client reached, which
	// cluster forwarding keeps, so getHost(port) opens through the node the
	// client talks to whichever node holds the sandbox. For a Domain that
	// names only this host ("localhost"); a real domain is advertised as is.
	DomainPortFromHost bool
	// AccessTokenKey keys the HMAC that derives each sandbox's envd access
	// token (see the package documentation). Give 32 random bytes kept with
	// the daemon's data, so tokens survive restarts. Empty: a random key
	// per process (tokens handed out before a restart stop working).
	AccessTokenKey []byte
	// BodyDedupe is the rule for creates without an Idempotency-Key (an
	// explicit key works either way). Default DedupeUndelivered.
	BodyDedupe Dedupe
	// ReplayWindow is how long an undelivered create stays adoptable
	// (DedupeUndelivered) or an identical body is replayed (DedupeBody).
	// Default 10 s.
	ReplayWindow time.Duration
	// Images maps templates to images; nil: DefaultImages.
	Images map[string]string
	// InterpreterReady bounds how long create and resume wait for the
	// code-interpreter server to accept connections. Default 20 s.
	InterpreterReady time.Duration
	// MaxBodyBytes caps JSON request bodies. Default 1 MiB.
	MaxBodyBytes int64
	// RequestTimeout bounds a whole control-plane request (body, handling,
	// answer). envd traffic has none: its Connect streams last as long as
	// the SDK keeps them. 0: no bound.
	RequestTimeout time.Duration
	// Elsewhere, in cluster mode, serves r on the node that has sandbox
	// id when that is another node, and reports whether it did. It is
	// asked for what no Host, header or path names (a signed /files URL on
	// E2B_SANDBOX_URL, matched by its signature).
	Elsewhere func(w http.ResponseWriter, r *http.Request, id string) bool
	// PeerSandboxes, in cluster mode, lists the ids of the sandboxes the
	// other nodes have, from memory (no I/O): the candidates of a signed
	// /files URL that no sandbox of this node made.
	PeerSandboxes func() []string
	// Placer places creates in a cluster (package router). Nil: every
	// create is this node's.
	Placer *router.Placer
}

// DefaultImages are the built-in templates (scripts/build-images.sh). An
// empty image is the daemon's default image (config --default-image), so
// `base` follows the operator's choice instead of naming one here.
var DefaultImages = map[string]string{
	"base":                  "",
	codeInterpreterTemplate: "sandboxd/code-interpreter:v1",
	// The SDK's template when a create names mcp servers and no template:
	// the base image, whose mcp-gateway explains that there is none.
	mcpGatewayTemplate: "",
}

// mcpGatewayTemplate is the SDK's defaultMcpTemplate.
const mcpGatewayTemplate = "mcp-gateway"

// Facade is the E2B edge. Mount it in front of the native API and send it
// every request Match accepts.
type Facade struct {
	svc          Service
	auth         Authenticator
	log          *slog.Logger
	domain       string
	advertised   string // the domain create reports (Options.AdvertisedDomain)
	portFromHost bool   // Options.DomainPortFromHost
	tokenKey     []byte
	bodyDedupe   Dedupe
	window       time.Duration
	images       map[string]string
	ready        time.Duration
	maxBody      int64
	timeout      time.Duration
	elsewhere    func(w http.ResponseWriter, r *http.Request, id string) bool
	peerIDs      func() []string
	placer       *router.Placer

	control     http.Handler
	interpreter singleflight.Group // one interpreter start per sandbox at a time
	pending     pendingBuilds      // template builds requested, not started
	uploads     *uploads           // the files of template builds' COPY steps
	listening   *listening         // which ports ServesHost found listening
}

// New returns the facade. It does no I/O.
func New(opts Options) *Facade {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if len(opts.AccessTokenKey) == 0 {
		opts.AccessTokenKey = make([]byte, 32)
		_, _ = rand.Read(opts.AccessTokenKey) // never fails
		opts.Logger.Warn("e2b: no access-token key given; envd access tokens will not survive a restart")
	}
	if opts.Images == nil {
		opts.Images = DefaultImages
	}
	if opts.InterpreterReady <= 0 {
		opts.InterpreterReady = 20 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.BodyDedupe == "" {
		opts.BodyDedupe = DedupeUndelivered
	}
	if opts.ReplayWindow <= 0 {
		opts.ReplayWindow = dedupeReplayWindow
	}
	f := &Facade{
		svc:          opts.Service,
		auth:         opts.Auth,
		log:          opts.Logger,
		domain:       strings.ToLower(opts.Domain),
		advertised:   strings.ToLower(cmp.Or(opts.AdvertisedDomain, opts.Domain)),
		portFromHost: opts.DomainPortFromHost,
		tokenKey:     opts.AccessTokenKey,
		bodyDedupe:   opts.BodyDedupe,
		window:       opts.ReplayWindow,
		images:       opts.Images,
		ready:        opts.InterpreterReady,
		maxBody:      opts.MaxBodyBytes,
		timeout:      opts.RequestTimeout,
		elsewhere:    opts.Elsewhere,
		peerIDs:      opts.PeerSandboxes,
		placer:       opts.Placer,
	}
	f.pending = pendingBuilds{builds: map[string]*pendingBuild{}, now: time.Now}
	f.listening = newListening(func(ctx context.Context, id string, port int) error {
		c, err := f.svc.DialPort(ctx, id, port)
		if err == nil {
			c.Close()
		}
		return err
	})
	f.uploads = newUploads(time.Now)
	f.control = f.routes()
	return f
}

// Match reports whether r belongs to the facade: envd traffic (the
// E2b-Sandbox-Id header, or a Host <port>-<id>.<domain> with port 49983
// or 49999) and the control plane (/sandboxes…, /v2/sandboxes… and E2B's
// other top-level paths: controlPrefixes). A Host
// <port>-<id>.<domain> with any other port is never the facade's, whatever
// its path or headers: it is a sandbox's app, served by the ingress (an
// app's own /sandboxes route must reach the app).
func (f *Facade) Match(r *http.Request) bool {
	if _, _, ok := f.envdTarget(r); ok {
		return true
	}
	return !f.previewHost(r.Host) && (isControlPath(r.URL.Path) || unroutedSignedFile(r))
}

// Route is the facade's registration with the daemon's router (package
// router): envd traffic names the sandbox of its E2b-Sandbox-Id header
// (by id only: a value that is no id names none), whatever its path (its
// preview host <port>-<id>.<domain> is the router's own rule); POST
// /sandboxes and POST /v2/sandboxes are creates; /sandboxes/{id}[/…] and
// /v2/sandboxes/{id}[/…] name sandbox {id} (an id or a name, resolved
// like the service), and DELETE of it is its destroy; GET
// /sandboxes/metrics (every sandbox's metrics) names none.
func (f *Facade) Route(r *http.Request) router.Ref {
	if v := r.Header.Get(headerSandboxID); v != "" {
		if !strings.HasPrefix(v, "sb-") {
			return router.Ref{} // the router reads "sb-…" as an id only
		}
		return router.Ref{Sandbox: v}
	}
	seg, ok := router.Under(r, "v2", "sandboxes")
	if !ok {
		if seg, ok = router.Under(r, "sandboxes"); ok && len(seg) == 1 && seg[0] == "metrics" &&
			(r.Method == http.MethodGet || r.Method == http.MethodHead) {
			return router.Ref{}
		}
	}
	switch {
	case !ok:
		return router.Ref{}
	case len(seg) == 0:
		return router.Collection(r)
	}
	return router.Ref{Sandbox: seg[0], Destroy: len(seg) == 1 && r.Method == http.MethodDelete}
}

// Caller is who r's API key (X-API-KEY, or a Bearer token, in either
// form) stands for: the daemon's router asks it to resolve names.
func (f *Facade) Caller(r *http.Request) (service.Caller, error) { return f.authenticate(r) }

// unroutedSignedFile reports a signed /files URL that reached the daemon
// with no sandbox in its Host or headers: the SDK builds uploadUrl() and
// downloadUrl() on E2B_SANDBOX_URL, which names no sandbox. ServeHTTP
// routes it by its signature (serveSignedFile).
func unroutedSignedFile(r *http.Request) bool {
	return r.URL.Path == "/files" && r.URL.Query().Has("signature")
}

// MatchHost reports whether host is one of E2B's direct envd hosts,
// <49983|49999>-<id>.<domain>. They are the facade's even though they have
// the preview shape, so a daemon that sends preview hosts to its ingress
// asks this first.
func (f *Facade) MatchHost(host string) bool {
	_, _, ok := parseHost(host, f.domain)
	return f.domain != "" && ok
}

// previewHost reports whether host has the preview shape under the
// facade's domain, for any port.
func (f *Facade) previewHost(host string) bool {
	_, _, ok := naming.ParsePreviewHost(host, f.domain)
	return f.domain != "" && ok
}

// ServeHTTP serves a request Match accepted; anything else is 404 in the
// E2B error shape.
func (f *Facade) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id, port, ok := f.envdTarget(r); ok {
		f.serveEnvd(w, r, id, port)
		return
	}
	if unroutedSignedFile(r) {
		f.serveSignedFile(w, r)
		return
	}
	httplimit.Deadline(w, f.timeout)
	f.control.ServeHTTP(w, r)
}

// controlPrefixes are the top-level paths of E2B's control-plane API
// (the SDK's OpenAPI paths). All of them are the facade's, so that every
// answer under them is in E2B's shape, served or not (unsupportedAPIs);
// the native API lives under /v1 and shares none.
var controlPrefixes = []string{
	"/sandboxes", "/v2/sandboxes",
	"/templates", "/v2/templates", "/v3/templates",
	"/snapshots", "/teams", "/secrets", "/volumes",
}

func isControlPath(p string) bool {
	for _, prefix := range controlPrefixes {
		if rest, ok := strings.CutPrefix(p, prefix); ok && (rest == "" || rest[0] == '/') {
			return true
		}
	}
	return false
}

// Ports of the SDKs' direct traffic.
const (
	envdPort        = 49983
	interpreterPort = 49999
)

// Headers of E2B's single-host routing.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
)

// envdTarget returns the sandbox and port an envd request is for: from a
// Host <port>-<id>.<domain> whose port is 49983 or 49999; else, unless the
// Host is a preview host of another port (the ingress's), from the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers (port 49983 when absent or
// unparsable).
func (f *Facade) envdTarget(r *http.Request) (id string, port int, ok bool) {
	if f.domain != "" {
		if id, port, ok := parseHost(r.Host, f.domain); ok {
			return id, port, true
		}
		if f.previewHost(r.Host) {
			return "", 0, false
		}
	}
	if id := r.Header.Get(headerSandboxID); id != "" {
		port := envdPort
		if p, err := strconv.Atoi(r.Header.Get(headerSandboxPort)); err == nil && p > 0 && p < 65536 {
			port = p
		}
		return id, port, true
	}
	return "", 0, false
}

// parseHost parses host as <port>-<sandbox-id>.<domain>[:listen-port]
// (naming.ParsePreviewHost) and accepts it only for the ports the facade
// serves.
func parseHost(host, domain string) (id string, port int, ok bool) {
	id, port, ok = naming.ParsePreviewHost(host, domain)
	if !ok || (port != envdPort && port != interpreterPort) {
		return "", 0, false
	}
	return id, port, true
}

// decodeJSON reads r's JSON body into v. An empty body leaves v alone (the
// SDKs send no body, or `{}`, where every field is optional).
func (f *Facade) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return fmt.Errorf("read body: %w", err) // 413 (package apierr)
	}
	if err != nil {
		return badRequest("read body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	if err := jsonUnmarshal(body, v); err != nil {
		return badRequest("invalid JSON body: %v", err)
	}
	return nil
}
