package daytona

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/api/router"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/httplimit"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/sessions"
	"github.com/sandboxd/sandboxd/internal/version"
)

// Service is what the facade needs of the domain layer; *service.Service
// implements it.
type Service interface {
	NetworkAllowed() bool
	SetNetworkPolicy(ctx context.Context, c service.Caller, idOrName string, p netpolicy.Policy) (service.Sandbox, error)
	CreateOnce(ctx context.Context, c service.Caller, r service.CreateOnceRequest) (*service.Created, error)
	Get(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	List(ctx context.Context, c service.Caller, f service.ListFilter) ([]service.Sandbox, string, error)
	Destroy(ctx context.Context, c service.Caller, idOrName string) error
	Start(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Stop(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Archive(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Touch(ctx context.Context, sb service.Sandbox) error
	UpdateSandbox(ctx context.Context, c service.Caller, idOrName string, u service.Update) (service.Sandbox, error)
	Exec(ctx context.Context, c service.Caller, idOrName string, req service.ExecRequest) (*service.ExecResult, error)
	Logs(ctx context.Context, c service.Caller, idOrName string, q service.LogQuery, emit func([]service.LogLine) error) error
	Upload(ctx context.Context, c service.Caller, idOrName, path, user string, r io.Reader) error
	Download(ctx context.Context, c service.Caller, idOrName, path, user string) (io.ReadCloser, int64, error)
	ExposePort(ctx context.Context, c service.Caller, idOrName string, port int, protocol string, public bool) (service.Exposure, error)
	Agent(ctx context.Context, sandboxID string) (*agent.Client, error)
	Subscribe(owner string) (*service.Subscription, error)

	// Volumes (volumes.go).
	CreateVolume(ctx context.Context, c service.Caller, name string) (service.Volume, error)
	GetVolume(ctx context.Context, c service.Caller, name string) (service.Volume, error)
	ListVolumes(ctx context.Context, c service.Caller) ([]service.Volume, error)
	DeleteVolume(ctx context.Context, c service.Caller, name string) error

	// Snapshots, forks and image builds (snapshots.go).
	Snapshot(ctx context.Context, c service.Caller, idOrName, name string, memory service.SnapshotMemory) (service.Template, error)
	Fork(ctx context.Context, c service.Caller, idOrName string, n int) ([]*service.Created, error)
	BuildTemplate(ctx context.Context, c service.Caller, r service.Recipe) (service.Template, bool, error)
	FollowBuildLog(ctx context.Context, c service.Caller, idOrName string, w func([]byte) error) error
	GetTemplate(ctx context.Context, c service.Caller, idOrName string) (service.Template, error)
	ListTemplates(ctx context.Context, c service.Caller) ([]service.Template, error)
	DeleteTemplate(ctx context.Context, c service.Caller, idOrName string) error
}

var _ Service = (*service.Service)(nil)

// Authenticator verifies a request's bearer token; *auth.Authenticator is
// one. Every credential failure matches auth.ErrUnauthenticated; any other
// error is a failed lookup (answered 500, not 401).
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request) (auth.Principal, error)
}

// Options configures New. Service and Auth are required.
type Options struct {
	Service Service
	Auth    Authenticator
	// Logger receives one line per failed request (server errors in full).
	// Default: discard.
	Logger *slog.Logger
	// Domain is the preview domain. Requests whose Host is under it belong
	// to the ingress, never to the facade, whatever their path.
	Domain string
	// Images maps Daytona snapshot names to images; a snapshot not in it
	// names a locally present image. Nil: DefaultImages.
	Images map[string]string
	// MaxBodyBytes caps JSON request bodies. Default 1 MiB.
	MaxBodyBytes int64
	// PreviewToken derives the token that opens one private preview port
	// (the ingress accepts it in X-Daytona-Preview-Token). Nil: preview
	// URLs come without a token.
	PreviewToken func(sandboxID string, port int) string
	// Sessions is the service's sessions part, which the session routes
	// translate onto. Nil: the facade makes one of its own (Service, the
	// part's Agents, and its lifecycle events when Service has them) and
	// closes it with itself.
	Sessions *sessions.Manager
	// RequestTimeout bounds a whole control-plane request (body, handling,
	// answer). The toolbox has none: its process runs, session logs and
	// file transfers last as long as their callers keep them. 0: no bound.
	RequestTimeout time.Duration
	// Placer places creates in a cluster (package router). Nil: every
	// create is this node's.
	Placer *router.Placer
}

// DefaultImages are the snapshots every daemon has. An empty image is the
// daemon's default image (config --default-image), so `base` and no
// snapshot at all both follow the operator's choice.
var DefaultImages = map[string]string{
	"base": "",
}

// Prefix is the path under which the facade serves; Match claims nothing
// else.
const Prefix = "/daytona/api"

// eventPattern is the event stream's route (Socket.IO's default path).
const eventPattern = "GET " + Prefix + "/socket.io/"

// buildLogsRoute streams a snapshot's build output for as long as the
// build runs; buildLogsPattern is its mux pattern, which has no request
// deadline.
const (
	buildLogsRoute   = "GET /snapshots/{sid}/build-logs"
	buildLogsPattern = "GET " + Prefix + "/snapshots/{sid}/build-logs"
)

// Facade is the Daytona edge. Mount it in front of the native API and send
// it every request Match accepts. Close it when the daemon stops.
type Facade struct {
	svc     Service
	auth    Authenticator
	log     *slog.Logger
	domain  string
	images  map[string]string
	maxBody int64
	timeout time.Duration
	version string
	// previewToken derives scoped preview tokens (Options.PreviewToken).
	previewToken func(sandboxID string, port int) string
	placer       *router.Placer

	mux *http.ServeMux

	// ctx bounds the event streams: the facade's lifetime.
	ctx    context.Context
	cancel context.CancelFunc

	// sess is the sessions part (shell sessions, terminals, interpreter
	// contexts); ownSess: made by New, closed by Close.
	sess    *sessions.Manager
	ownSess bool
}

// New returns the facade. It does no I/O.
func New(opts Options) *Facade {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Images == nil {
		opts.Images = DefaultImages
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Facade{
		svc:          opts.Service,
		auth:         opts.Auth,
		log:          opts.Logger,
		domain:       strings.ToLower(opts.Domain),
		images:       opts.Images,
		maxBody:      opts.MaxBodyBytes,
		timeout:      opts.RequestTimeout,
		version:      version.Version,
		previewToken: opts.PreviewToken,
		ctx:          ctx,
		cancel:       cancel,
		sess:         opts.Sessions,
		placer:       opts.Placer,
	}
	if f.sess == nil {
		so := sessions.Options{Agents: opts.Service, Logger: opts.Logger}
		if ev, ok := opts.Service.(sessions.Events); ok {
			so.Events = ev
		}
		f.sess, f.ownSess = sessions.New(so), true
	}
	f.mux = f.routes()
	return f
}

// Match reports whether r belongs to the facade: a path under /daytona/api
// on a host that is not a preview host.
func (f *Facade) Match(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok || (rest != "" && rest[0] != '/') {
		return false
	}
	return f.domain == "" || !isPreviewHost(r.Host, f.domain)
}

// Route is the facade's registration with the daemon's router (package
// router): POST /sandbox is a create; /sandbox/{id}[/…] and
// /toolbox/{id}[/…] under Prefix name sandbox {id} (an id or a name), and
// DELETE /sandbox/{id} is its destroy.
func (f *Facade) Route(r *http.Request) router.Ref {
	if seg, ok := router.Under(r, "daytona", "api", "sandbox"); ok {
		if len(seg) == 0 {
			return router.Collection(r)
		}
		return router.Ref{Sandbox: seg[0], Destroy: len(seg) == 1 && r.Method == http.MethodDelete}
	}
	if seg, ok := router.Under(r, "daytona", "api", "toolbox"); ok && len(seg) > 0 {
		return router.Ref{Sandbox: seg[0]}
	}
	return router.Ref{}
}

// ServeHTTP serves a request Match accepted. An unknown route is 404 in
// Daytona's error shape. Neither the toolbox nor the event stream has a
// request deadline: they are streams.
func (f *Facade) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pattern := f.mux.Handler(r)
	if !strings.Contains(pattern, " "+Prefix+"/toolbox/") && pattern != eventPattern && pattern != buildLogsPattern {
		httplimit.Deadline(w, f.timeout) // the control plane, or no route
	}
	if pattern == "" {
		f.writeError(w, r, errorf(http.StatusNotFound, "no route for %s %s", r.Method, r.URL.Path))
		return
	}
	f.mux.ServeHTTP(w, r)
}

// Close ends the event streams and, when New made the sessions part,
// closes it (its sessions run on in their sandboxes, for the next
// daemon). Requests in flight are not waited for.
func (f *Facade) Close() error {
	if f.ownSess {
		_ = f.sess.Close()
	}
	f.cancel()
	return nil
}

// isPreviewHost reports whether host is the preview domain or under it.
func isPreviewHost(host, domain string) bool {
	host = naming.NormalizeHost(host)
	return host == domain || strings.HasSuffix(host, "."+domain)
}

// handler is a facade handler: it gets the authenticated caller and returns
// an error for writeError.
type handler func(w http.ResponseWriter, r *http.Request, c service.Caller) error

// routes registers the control plane and the toolbox on one mux.
func (f *Facade) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for pattern, h := range map[string]handler{
		// Control plane.
		"POST /sandbox":                              f.create,
		"GET /sandbox":                               f.list,
		"GET /sandbox/{id}":                          f.get,
		"DELETE /sandbox/{id}":                       f.delete,
		"POST /sandbox/{id}/start":                   f.start,
		"POST /sandbox/{id}/stop":                    f.stop,
		"PUT /sandbox/{id}/labels":                   f.setLabels,
		"POST /sandbox/{id}/autostop/{minutes}":      f.setAutoStop,
		"POST /sandbox/{id}/autodelete/{minutes}":    f.setAutoDelete,
		"POST /sandbox/{id}/autoarchive/{minutes}":   f.setAutoArchive,
		"POST /sandbox/{id}/archive":                 f.archive,
		"POST /sandbox/{id}/recover":                 f.start,
		"GET /sandbox/{id}/toolbox-proxy-url":        f.toolboxProxyURL,
		"GET /sandbox/{id}/ports/{port}/preview-url": f.previewURL,
		"POST /sandbox/{id}/network-settings":        f.updateNetwork,

		// Control plane: volumes (volumes.go).
		"POST /volumes":              f.createVolume,
		"GET /volumes":               f.listVolumes,
		"GET /volumes/{vid}":         f.getVolume,
		"GET /volumes/by-name/{vid}": f.getVolume,
		"DELETE /volumes/{vid}":      f.deleteVolume,

		// Control plane: snapshots, forks and image builds (snapshots.go).
		"GET /snapshots":                      f.listSnapshots,
		"POST /snapshots":                     f.createSnapshot,
		"GET /snapshots/{sid}":                f.getSnapshot,
		"DELETE /snapshots/{sid}":             f.deleteSnapshot,
		"POST /snapshots/{sid}/activate":      f.getSnapshot,
		"GET /snapshots/{sid}/build-logs-url": f.snapshotLogsURL,
		buildLogsRoute:                        f.snapshotLogs,
		"POST /sandbox/{id}/snapshot":         f.sandboxSnapshot,
		"POST /sandbox/{id}/fork":             f.fork,

		// Toolbox: info and processes.
		"GET /toolbox/{id}/version":           f.toolbox(f.versionInfo),
		"GET /toolbox/{id}/user-home-dir":     f.toolbox(f.homeDir),
		"GET /toolbox/{id}/work-dir":          f.toolbox(f.workDir),
		"POST /toolbox/{id}/process/execute":  f.toolbox(f.execute),
		"POST /toolbox/{id}/process/code-run": f.toolbox(f.codeRun),

		// Toolbox: sessions.
		"POST /toolbox/{id}/process/session":                           f.toolbox(f.createSession),
		"GET /toolbox/{id}/process/session":                            f.toolbox(f.listSessions),
		"GET /toolbox/{id}/process/session/{sid}":                      f.toolbox(f.getSession),
		"DELETE /toolbox/{id}/process/session/{sid}":                   f.toolbox(f.deleteSession),
		"POST /toolbox/{id}/process/session/{sid}/exec":                f.toolbox(f.sessionExec),
		"GET /toolbox/{id}/process/session/{sid}/command/{cid}":        f.toolbox(f.sessionCommand),
		"GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs":   f.toolbox(f.sessionLogs),
		"POST /toolbox/{id}/process/session/{sid}/command/{cid}/input": f.toolbox(f.sessionInput),
		"GET /toolbox/{id}/process/session/entrypoint/logs":            f.toolbox(f.entrypointLogs),

		// Toolbox: PTY sessions (pty.go).
		"POST /toolbox/{id}/process/pty":               f.toolbox(f.createPTY),
		"GET /toolbox/{id}/process/pty":                f.toolbox(f.listPTYs),
		"GET /toolbox/{id}/process/pty/create-connect": f.toolbox(f.createConnectPTY),
		"GET /toolbox/{id}/process/pty/{sid}":          f.toolbox(f.getPTY),
		"DELETE /toolbox/{id}/process/pty/{sid}":       f.toolbox(f.deletePTY),
		"POST /toolbox/{id}/process/pty/{sid}/resize":  f.toolbox(f.resizePTY),
		"GET /toolbox/{id}/process/pty/{sid}/connect":  f.toolbox(f.connectPTY),

		// Toolbox: the code interpreter (interpreter.go).
		"GET /toolbox/{id}/process/interpreter/execute":          f.toolbox(f.interpreterExecute),
		"POST /toolbox/{id}/process/interpreter/context":         f.toolbox(f.createContext),
		"GET /toolbox/{id}/process/interpreter/context":          f.toolbox(f.listContexts),
		"DELETE /toolbox/{id}/process/interpreter/context/{cid}": f.toolbox(f.deleteContext),

		// Toolbox: files.
		"GET /toolbox/{id}/files":                f.toolbox(f.listFiles),
		"DELETE /toolbox/{id}/files":             f.toolbox(f.deleteFile),
		"GET /toolbox/{id}/files/info":           f.toolbox(f.fileInfo),
		"POST /toolbox/{id}/files/folder":        f.toolbox(f.createFolder),
		"POST /toolbox/{id}/files/move":          f.toolbox(f.moveFile),
		"GET /toolbox/{id}/files/find":           f.toolbox(f.findInFiles),
		"GET /toolbox/{id}/files/search":         f.toolbox(f.searchFiles),
		"POST /toolbox/{id}/files/replace":       f.toolbox(f.replaceInFiles),
		"POST /toolbox/{id}/files/permissions":   f.toolbox(f.setPermissions),
		"GET /toolbox/{id}/files/download":       f.toolbox(f.downloadFile),
		"POST /toolbox/{id}/files/bulk-upload":   f.toolbox(f.bulkUpload),
		"POST /toolbox/{id}/files/bulk-download": f.toolbox(f.bulkDownload),

		// Toolbox: git.
		"POST /toolbox/{id}/git/clone": f.toolbox(f.gitClone),
		"GET /toolbox/{id}/git/status": f.toolbox(f.gitStatus),
	} {
		method, path, _ := strings.Cut(pattern, " ")
		mux.Handle(method+" "+Prefix+path, f.wrap(h))
	}
	// Refused features (unsupported.go): 501 with why, never a 404.
	for pattern, msg := range unsupportedRoutes {
		method, path, _ := strings.Cut(pattern, " ")
		mux.Handle(method+" "+Prefix+path, f.wrap(unsupported(msg)))
	}
	// The event stream authenticates in its CONNECT packet (events.go).
	mux.HandleFunc(eventPattern, f.eventStream)
	return mux
}

// wrap authenticates the request (Authorization: Bearer <API token>) and
// writes a returned error.
func (f *Facade) wrap(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := f.auth.Authenticate(r.Context(), r)
		if err == nil {
			err = h(w, r, service.Caller{Owner: p.Owner, Admin: p.IsAdmin(), Quota: service.Quota(p.Quota)})
		}
		if err != nil {
			f.writeError(w, r, err)
		}
	})
}
