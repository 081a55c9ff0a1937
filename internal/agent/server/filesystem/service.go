package filesystem

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	"github.com/sandboxd/sandboxd/internal/gen/envd/filesystem/filesystemconnect"
)

// Defaults of [Options].
const (
	// DefaultKeepalive is the WatchDir keepalive interval when the request
	// names none (envd's default).
	DefaultKeepalive = 90 * time.Second
	// DefaultMaxWatchers bounds polling watchers: each holds an inotify
	// instance, and the kernel allows 128 per user by default.
	DefaultMaxWatchers = 64
	// DefaultWatcherIdle: a polling watcher nobody polled for this long is
	// closed, so a client that vanished does not hold it forever.
	DefaultWatcherIdle = 10 * time.Minute
	// DefaultMaxWatcherEvents bounds the events a polling watcher buffers
	// between polls.
	DefaultMaxWatcherEvents = 10_000
)

// Options configure a [Service]. The zero value is usable.
type Options struct {
	// Users resolves the user a request acts as and names file owners;
	// default /etc/passwd.
	Users *account.Directory
	// Keepalive: see DefaultKeepalive.
	Keepalive time.Duration
	// MaxWatchers: see DefaultMaxWatchers.
	MaxWatchers int
	// WatcherIdle: see DefaultWatcherIdle.
	WatcherIdle time.Duration
	// MaxWatcherEvents: see DefaultMaxWatcherEvents.
	MaxWatcherEvents int
	// Protected are the agent's own paths (its socket directory, its
	// binary): Remove and Move refuse a path that is, is under or is above
	// one, so that no file call cuts the daemon off from the agent.
	Protected []string
	// Log receives unexpected failures; default discards.
	Log *slog.Logger
}

// Service is the filesystem.Filesystem Connect service. Create it with
// [New] and release it with [Service.Close]; it is safe for concurrent use.
type Service struct {
	users     *account.Directory
	keepalive time.Duration
	protected []string
	log       *slog.Logger

	// ctx ends every watch when the service closes.
	ctx    context.Context
	cancel context.CancelFunc

	pollers *pollers
	wg      sync.WaitGroup // watch goroutines of polling watchers
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// New returns a Service.
func New(o Options) *Service {
	if o.Users == nil {
		o.Users = account.NewDirectory(account.DefaultPasswd)
	}
	if o.Keepalive <= 0 {
		o.Keepalive = DefaultKeepalive
	}
	if o.MaxWatchers <= 0 {
		o.MaxWatchers = DefaultMaxWatchers
	}
	if o.WatcherIdle <= 0 {
		o.WatcherIdle = DefaultWatcherIdle
	}
	if o.MaxWatcherEvents <= 0 {
		o.MaxWatcherEvents = DefaultMaxWatcherEvents
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		users:     o.Users,
		keepalive: o.Keepalive,
		protected: cleanAll(o.Protected),
		log:       o.Log,
		ctx:       ctx,
		cancel:    cancel,
		pollers:   newPollers(o.MaxWatchers, o.WatcherIdle, o.MaxWatcherEvents),
	}
}

// Handle registers the service's Connect handlers on mux.
func (s *Service) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	mux.Handle(filesystemconnect.NewFilesystemHandler(s, opts...))
}

// Close ends every WatchDir stream and polling watcher and waits for their
// goroutines. Calls after Close that watch fail with [ErrClosed]; the other
// RPCs keep working. Close is idempotent and always returns nil.
func (s *Service) Close() error {
	s.cancel()
	s.pollers.closeAll()
	s.wg.Wait()
	return nil
}

// target resolves the user of h and the absolute path p names for them.
func (s *Service) target(h http.Header, p string) (account.User, string, error) {
	u, err := s.users.FromHeader(h)
	if err != nil {
		return account.User{}, "", err
	}
	p, err = account.Resolve(u, p)
	return u, p, err
}
