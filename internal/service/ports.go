package service

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent/tunnel"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// DialPort opens a TCP stream to port inside a sandbox, through its agent
// (sandboxes have no network path from the host). It does not check that
// the port is exposed: that is the ingress's and the facades' decision.
// A paused sandbox is ErrPaused at once (one read of its row): its frozen
// agent would take the connection and never answer it.
func (s *Service) DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, invalid("port", "must be between 1 and 65535")
	}
	if row, err := s.Store.GetSandbox(ctx, sandboxID); err == nil && row.State == store.StatePaused {
		return nil, fmt.Errorf("sandbox %s: %w", sandboxID, ErrPaused)
	}
	ac, err := s.Agent(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	conn, err := s.Runtime.DialAgent(ctx, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("dial agent of %s: %w", sandboxID, err)
	}
	return tunnel.Dial(ctx, conn, ac.Token(), port)
}

// Stats samples a running sandbox's resource usage.
func (s *Service) Stats(ctx context.Context, c Caller, idOrName string) (runtime.Stats, error) {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return runtime.Stats{}, err
	}
	return s.Runtime.Stats(ctx, row.ID)
}

// Exposure is an exposed sandbox port as the API shows it.
type Exposure struct {
	Port     int
	Protocol string // http, tcp or tls
	Public   bool
	URL      string
	HostPort int // tcp only
}

// ExposePort makes a sandbox port reachable: over HTTP through its preview
// URL, over TCP on a host port from the pool, or over TLS by SNI. Only an
// http port may be private (public false): tcp and tls must be asked for
// public, else the call is ErrInvalidArgument on field "public" and
// nothing is reserved (see checkPublic).
//
// It is safe to retry and to race: exposing an exposed port returns the
// existing exposure (same URL, same host port) and never takes a second
// host port; another protocol for an exposed port is ErrConflict. The row
// is reserved first, then the route or listener installed; when the
// install fails, the row is deleted only if this call inserted it — an
// exposure another call made stays, with its listener. A host port some
// other process holds is skipped and the walk goes on.
//
// Exposes and unexposes of one (sandbox, port) are serialised from the
// store write to the router update (portLocks), so the router always holds
// what the last of them left in the row.
func (s *Service) exposePort(ctx context.Context, c Caller, idOrName string, port int, protocol string, public bool) (Exposure, error) {
	if err := s.requireReady(); err != nil {
		return Exposure{}, err
	}
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return Exposure{}, err
	}
	if row.State == store.StateCreating {
		return Exposure{}, beingCreated(row.ID)
	}
	if port < 1 || port > 65535 {
		return Exposure{}, invalid("port", "must be between 1 and 65535")
	}
	proto := store.Protocol(protocol)
	if protocol == "" {
		proto = store.ProtocolHTTP
	}
	if !proto.Valid() {
		return Exposure{}, invalid("protocol", "must be http, tcp or tls")
	}
	if err := checkPublic(proto, public); err != nil {
		return Exposure{}, err
	}
	req := store.PortRequest{SandboxID: row.ID, Port: port, Protocol: proto, Public: public}
	route := ingress.Port{Number: port, Protocol: ingress.Protocol(proto), Public: public}
	unlock, err := portLocks.lock(ctx, row.ID, port)
	if err != nil {
		return Exposure{}, err
	}
	defer unlock()

	var ep store.ExposedPort
	if proto == store.ProtocolTCP {
		// The bind callback installs the route and the listener for each
		// host port the walk reserves; a port held outside sandboxd is
		// released and skipped.
		var reused bool
		ep, reused, err = s.Store.ReserveHostPort(ctx, req, store.PortRange{Lo: s.cfg.HostPortLo, Hi: s.cfg.HostPortHi}, func(hostPort int) error {
			if err := s.Router.ExposePort(ctx, row.ID, route); err != nil {
				return err
			}
			err := s.Router.ListenTCP(ctx, hostPort, row.ID, port)
			if err == nil {
				return nil
			}
			// This call holds the row, so the route is its own to take
			// back; the store then releases the row.
			if uerr := s.Router.UnexposePort(context.WithoutCancel(ctx), row.ID, port); uerr != nil {
				err = errors.Join(err, fmt.Errorf("remove route: %w", uerr))
			}
			if errors.Is(err, ingress.ErrHostPortInUse) {
				return fmt.Errorf("%w: %w", store.ErrHostPortUnavailable, err)
			}
			return err
		})
		if err != nil {
			return Exposure{}, s.portErr(err, row.ID, port)
		}
		if reused {
			// Another call made this exposure; make sure its route and
			// listener are in place, and never undo them.
			if err := s.installExposure(ctx, ep); err != nil {
				return Exposure{}, s.portErr(err, row.ID, port)
			}
		}
		return s.exposure(ep), nil
	}

	outcome, ep, err := s.Store.TryReserveHostPort(ctx, req, 0)
	if err != nil {
		return Exposure{}, s.portErr(err, row.ID, port)
	}
	if err := s.installExposure(ctx, ep); err != nil {
		if outcome == store.Reserved {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			if _, rerr := s.Store.ReleaseReservation(rctx, ep); rerr != nil {
				err = errors.Join(err, fmt.Errorf("release exposure: %w", rerr))
			}
			cancel()
		}
		return Exposure{}, s.portErr(err, row.ID, port)
	}
	return s.exposure(ep), nil
}

// checkPublic refuses a private tcp or tls exposure. Only http carries a
// credential the ingress can check (a token header or cookie): a raw TCP
// stream on a host port, or a TLS stream passed through by SNI to the
// sandbox, reaches the sandbox's server from anyone who can reach the
// daemon's host, so "private" could only be a lie. Every API calls this
// one rule through ExposePort; the caller must ask for public explicitly.
func checkPublic(proto store.Protocol, public bool) error {
	if proto == store.ProtocolHTTP || public {
		return nil
	}
	return invalid("public", "a %s port cannot be private: raw %s carries no credential, so anyone who can reach the host reaches it; "+
		"expose it with public: true, or expose the port as http to keep it private", proto, strings.ToUpper(string(proto)))
}

// portLocks serialises the exposes and unexposes of one (sandbox, port):
// each holds its stripe from the store write through the router update, so
// two of them never interleave and leave a route the row does not back (or
// a row without its route). The stripes are shared by every Service in the
// process; unrelated ports that hash to one stripe only wait for each other
// briefly, and a call holds one stripe at a time, so none deadlock.
var portLocks = newStripedLocks(64)

// stripedLocks is a fixed set of mutexes that honour a context while
// waiting, picked by hashing a key.
type stripedLocks []chan struct{}

func newStripedLocks(n int) stripedLocks {
	l := make(stripedLocks, n)
	for i := range l {
		l[i] = make(chan struct{}, 1)
	}
	return l
}

// lock takes the stripe of (sandboxID, port) and returns its unlock, or
// ctx's error if ctx ends first.
func (l stripedLocks) lock(ctx context.Context, sandboxID string, port int) (unlock func(), err error) {
	h := fnv.New32a()
	h.Write([]byte(sandboxID))
	h.Write([]byte{0, byte(port >> 8), byte(port)})
	m := l[h.Sum32()%uint32(len(l))]
	select {
	case m <- struct{}{}:
		return func() { <-m }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// installExposure puts an exposure's route (and TCP listener) in the
// ingress. It is idempotent.
func (s *Service) installExposure(ctx context.Context, ep store.ExposedPort) error {
	route := ingress.Port{Number: ep.Port, Protocol: ingress.Protocol(ep.Protocol), Public: ep.Public}
	if err := s.Router.ExposePort(ctx, ep.SandboxID, route); err != nil {
		return err
	}
	if ep.Protocol == store.ProtocolTCP && ep.HostPort > 0 {
		return s.Router.ListenTCP(ctx, ep.HostPort, ep.SandboxID, ep.Port)
	}
	return nil
}

func (s *Service) exposure(ep store.ExposedPort) Exposure {
	// A tcp or tls port is public whatever its row says: rows from before
	// checkPublic may say private, but nothing ever enforced it.
	public := ep.Public || ep.Protocol != store.ProtocolHTTP
	e := Exposure{Port: ep.Port, Protocol: string(ep.Protocol), Public: public, HostPort: ep.HostPort}
	host := fmt.Sprintf("%d-%s.%s", ep.Port, ep.SandboxID, s.cfg.Domain)
	switch ep.Protocol {
	case store.ProtocolHTTP:
		if s.cfg.PublicURL != nil {
			e.URL = s.cfg.PublicURL(host)
		} else {
			e.URL = "http://" + host
		}
	case store.ProtocolTCP:
		tcpHost := s.cfg.TCPHost
		if tcpHost == "" {
			tcpHost = "127.0.0.1"
		}
		e.URL = "tcp://" + net.JoinHostPort(tcpHost, strconv.Itoa(ep.HostPort))
	case store.ProtocolTLS:
		e.URL = "tls://" + host
		if s.cfg.TLSPort > 0 {
			e.URL = fmt.Sprintf("tls://%s:%d", host, s.cfg.TLSPort)
		}
	}
	return e
}

func (s *Service) portErr(err error, sandboxID string, port int) error {
	switch {
	case errors.Is(err, store.ErrPortProtocolConflict), errors.Is(err, ingress.ErrProtocolConflict):
		return fmt.Errorf("port %d of %s is exposed with another protocol: %w", port, sandboxID, ErrConflict)
	case errors.Is(err, store.ErrPoolExhausted):
		return &RetryAfterError{Err: fmt.Errorf("%w: no free host port: %w", ErrCapacityExhausted, err), After: 5 * time.Second}
	case errors.Is(err, ingress.ErrL4Unavailable):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, ingress.ErrInvalidRoute):
		return refuse(ErrInvalidArgument, err, "%v", err)
	}
	return s.mapStoreErr(err, sandboxID)
}

// UnexposePort removes an exposure: its route, its listener, its row.
// Unexposing a port that is not exposed succeeds, so it is safe to repeat.
// It is serialised with the exposes of the same port, like ExposePort.
func (s *Service) unexposePort(ctx context.Context, c Caller, idOrName string, port int) error {
	if err := s.requireReady(); err != nil {
		return err
	}
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return err
	}
	unlock, err := portLocks.lock(ctx, row.ID, port)
	if err != nil {
		return err
	}
	defer unlock()
	eps, err := s.Store.ListExposedPorts(ctx, row.ID)
	if err != nil {
		return s.mapStoreErr(err, row.ID)
	}
	// The route goes even without a row: nothing but a row may keep it.
	if err := s.Router.UnexposePort(ctx, row.ID, port); err != nil {
		return err
	}
	for _, ep := range eps {
		if ep.Port == port && ep.HostPort > 0 {
			if err := s.Router.CloseTCP(ep.HostPort); err != nil {
				return err
			}
		}
	}
	if _, err := s.Store.DeleteExposedPort(ctx, row.ID, port); err != nil {
		return s.mapStoreErr(err, row.ID)
	}
	return nil
}

// ListPorts lists a sandbox's exposures, ordered by port.
func (s *Service) ListPorts(ctx context.Context, c Caller, idOrName string) ([]Exposure, error) {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	eps, err := s.Store.ListExposedPorts(ctx, row.ID)
	if err != nil {
		return nil, s.mapStoreErr(err, row.ID)
	}
	out := make([]Exposure, len(eps))
	for i, ep := range eps {
		out[i] = s.exposure(ep)
	}
	return out, nil
}

// restoreRoutes re-installs every exposure and custom domain after a
// restart (the ingress is in memory; the rows are the truth).
func (s *Service) restoreRoutes(ctx context.Context, live map[string]bool) error {
	var errs []error
	eps, err := s.Store.ListAllExposedPorts(ctx)
	if err != nil {
		return err
	}
	for _, ep := range eps {
		if !live[ep.SandboxID] {
			continue
		}
		if err := s.installExposure(ctx, ep); err != nil {
			errs = append(errs, fmt.Errorf("restore port %d of %s: %w", ep.Port, ep.SandboxID, err))
		}
	}
	ds, err := s.Store.ListAllCustomDomains(ctx)
	if err != nil {
		return err
	}
	for _, d := range ds {
		if !live[d.SandboxID] {
			continue
		}
		if s.reservedHost(d.Hostname) {
			// Bound before the host was reserved (--api-host added since):
			// routing it would hand the API's own traffic to the sandbox.
			s.Logger.Warn("custom domain not restored: it is one of the daemon's API hosts",
				"hostname", d.Hostname, "sandbox", d.SandboxID)
			continue
		}
		if !d.Verified() {
			continue // ListAllCustomDomains answers verified ones; pending ones never route
		}
		if err := s.Router.BindDomain(ctx, d.Hostname, d.SandboxID, d.Port); err != nil {
			errs = append(errs, fmt.Errorf("restore domain %s: %w", d.Hostname, err))
		}
	}
	return errors.Join(errs...)
}
