package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Custom domains need proof of control before they route.
//
// A hostname outside the preview domain (one inside it is refused, as are
// the daemon's own API hosts and IP literals) is bound pending: it routes
// nothing, takes no cluster key and holds nothing, so several sandboxes of
// several tenants may claim one hostname, and a tenant who claims
// example.com blocks nobody. It becomes verified, routes, and is then the
// hostname's only binding (cluster-wide: the hostnames/ key) when:
//
//   - the DNS TXT record ChallengeName(hostname) holds its challenge, a
//     random value per binding returned only to the sandbox's owner; looked
//     up on a verify call and by the background check (every
//     Config.DomainCheckEvery, for domainRetryWindow after the claim or the
//     last verify call, domainCheckBatch claims a pass); or
//   - an admin binds it: an admin token is the operator's, and what it
//     binds is granted (also onto a tenant's sandbox, which promotes the
//     tenant's pending claim).
//
// The first to verify wins; the others' claims stay pending and their
// verify calls answer ErrHostnameConflict. A verified binding stays until
// it is removed or its sandbox is destroyed.

// ChallengeLabel is the DNS label, under a custom hostname, of the TXT
// record that proves control of it.
const ChallengeLabel = "_sandboxd-challenge"

// ChallengeName is the name of hostname's TXT record.
func ChallengeName(hostname string) string { return ChallengeLabel + "." + hostname }

const (
	// domainRetryWindow is how long the background check looks a pending
	// claim up after its claim or its last verify call: DNS changes show
	// within minutes; past it, a verify call looks again and re-arms it.
	domainRetryWindow = time.Hour
	// maxPendingDomains bounds the pending claims of one sandbox, and so
	// the lookups one tenant makes the daemon do.
	maxPendingDomains = 16
	// domainCheckBatch bounds the claims one background pass looks up.
	domainCheckBatch = 32
	// domainLookupTimeout bounds one TXT lookup.
	domainLookupTimeout = 5 * time.Second
)

// TXTResolver looks up TXT records; *net.Resolver is one. The name is
// fully qualified (a trailing dot). A name without records is a
// *net.DNSError with IsNotFound.
type TXTResolver interface {
	LookupTXT(ctx context.Context, name string) ([]string, error)
}

// Domain is a custom hostname bound to a sandbox port.
type Domain struct {
	Hostname  string
	SandboxID string
	Port      int
	// Verified: the binding routes. Until then TXTName must hold TXTValue.
	Verified          bool
	TXTName, TXTValue string
	// CheckError says why the last look-up did not verify a pending
	// binding ("" before the first).
	CheckError string
}

func domainOf(d store.CustomDomain) Domain {
	return Domain{
		Hostname: d.Hostname, SandboxID: d.SandboxID, Port: d.Port, Verified: d.Verified(),
		TXTName: ChallengeName(strings.ToLower(d.Hostname)), TXTValue: d.Challenge, CheckError: d.LastError,
	}
}

// addDomain binds hostname to a sandbox port: pending for a user (nothing
// routes until it is verified), verified for an admin. The same binding
// again answers it as it is; this sandbox holding hostname on another
// port, or another sandbox holding it verified, is ErrHostnameConflict.
// Traffic needs the port to be exposed as http.
func (s *Service) addDomain(ctx context.Context, c Caller, idOrName, hostname string, port int) (Domain, error) {
	if err := s.requireReady(); err != nil {
		return Domain{}, err
	}
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return Domain{}, err
	}
	hostname, err = s.checkHostname(hostname)
	if err != nil {
		return Domain{}, err
	}
	if port < 1 || port > 65535 {
		return Domain{}, invalid("port", "must be between 1 and 65535")
	}
	if c.Admin {
		return s.bindVerified(ctx, row.ID, hostname, port)
	}
	d, _, err := s.Store.ClaimCustomDomain(ctx, store.DomainClaim{
		Hostname: hostname, SandboxID: row.ID, Port: port,
		RetryUntil: s.Clock().Add(domainRetryWindow), MaxPending: maxPendingDomains,
	})
	if err != nil {
		return Domain{}, s.domainErr(err, hostname, row.ID)
	}
	return domainOf(d), nil
}

// checkHostname normalizes hostname and refuses what no sandbox may bind:
// a name that is not a DNS name, an IP literal (it would capture the
// daemon's own API host), one of the daemon's API hosts, and names inside
// the preview domain.
func (s *Service) checkHostname(hostname string) (string, error) {
	hostname = strings.ToLower(strings.TrimSuffix(hostname, "."))
	switch {
	case !naming.ValidHostname(hostname) || net.ParseIP(hostname) != nil:
		return "", invalid("hostname", "%q is not a DNS name", hostname)
	case s.reservedHost(hostname):
		return "", invalid("hostname", "%q is the daemon's own host", hostname)
	case hostname == s.cfg.Domain || strings.HasSuffix(hostname, "."+s.cfg.Domain):
		return "", invalid("hostname", "%q is inside the preview domain %q", hostname, s.cfg.Domain)
	}
	return hostname, nil
}

// domainErr maps a store error of a domain call.
func (s *Service) domainErr(err error, hostname, id string) error {
	if errors.Is(err, store.ErrHostnameConflict) {
		return fmt.Errorf("hostname %q: %w", hostname, ErrHostnameConflict)
	}
	return s.mapStoreErr(err, id)
}

// bindVerified binds hostname to port of sandbox id, verified: an admin's
// binding, or a failover's replay of a verified one. Cluster key first,
// then the row, then the route; a failure undoes what this call did (a
// row it created is deleted, a claim it promoted is pending again, each
// only while it carries this call's token: an identical call may have
// reported success since).
func (s *Service) bindVerified(ctx context.Context, id, hostname string, port int) (Domain, error) {
	// Cluster mode: the hostname cluster-wide first, so that two nodes
	// binding it race in one place; a repeat by the same sandbox succeeds.
	if s.Cluster != nil {
		if err := s.Cluster.ClaimHostname(ctx, hostname, id); err != nil {
			return Domain{}, clusterErr(err, "")
		}
	}
	d, out, err := s.Store.ClaimCustomDomain(ctx, store.DomainClaim{Hostname: hostname, SandboxID: id, Port: port, Verified: true})
	if err != nil {
		s.releaseHostname(ctx, hostname, id)
		return Domain{}, s.domainErr(err, hostname, id)
	}
	if err := s.route(ctx, d, out.Created, out.Promoted, out.Token); err != nil {
		return Domain{}, err
	}
	return domainOf(d), nil
}

// route binds the verified binding d in the router. When that fails it
// undoes this call's store change (created: delete the row; promoted:
// pending again; both fenced by token) and the cluster key, and returns
// the router's error mapped.
func (s *Service) route(ctx context.Context, d store.CustomDomain, created, promoted bool, token int64) error {
	err := s.Router.BindDomain(ctx, d.Hostname, d.SandboxID, d.Port)
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, ingress.ErrHostnameConflict):
		err = fmt.Errorf("hostname %q: %w", d.Hostname, ErrHostnameConflict)
	case errors.Is(err, ingress.ErrNotInstalled):
		err = fmt.Errorf("sandbox %s is being destroyed: %w", d.SandboxID, ErrConflict)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	var rerr error
	switch {
	case created:
		_, rerr = s.Store.ReleaseCustomDomain(rctx, d.SandboxID, d.Hostname, token)
	case promoted:
		_, rerr = s.Store.UnverifyCustomDomain(rctx, d.SandboxID, d.Hostname, token)
	}
	if rerr != nil {
		err = errors.Join(err, fmt.Errorf("undo domain %s: %w", d.Hostname, rerr))
	}
	s.releaseHostname(ctx, d.Hostname, d.SandboxID)
	return err
}

// verifyDomain looks up the TXT record of sandbox's pending binding of
// hostname and, when it holds the binding's challenge, verifies it (then
// it routes). A binding that is verified already is answered as it is;
// one whose record is missing or holds something else is answered
// pending, with why in CheckError, and the background check looks again
// for domainRetryWindow. A failed look-up (a resolver that does not
// answer) is ErrUnavailable; another sandbox holding hostname verified is
// ErrHostnameConflict; no binding of hostname on this sandbox is
// ErrNotFound. It is safe to retry.
func (s *Service) verifyDomain(ctx context.Context, c Caller, idOrName, hostname string) (Domain, error) {
	if err := s.requireReady(); err != nil {
		return Domain{}, err
	}
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return Domain{}, err
	}
	hostname = strings.ToLower(strings.TrimSuffix(hostname, "."))
	d, err := s.Store.GetSandboxCustomDomain(ctx, row.ID, hostname)
	if errors.Is(err, store.ErrNotFound) {
		return Domain{}, fmt.Errorf("custom domain %q of sandbox %s: %w", hostname, row.ID, ErrNotFound)
	}
	if err != nil {
		return Domain{}, s.mapStoreErr(err, row.ID)
	}
	if d.Verified() {
		return domainOf(d), nil
	}
	ok, why, err := s.lookupChallenge(ctx, d)
	if err != nil {
		_ = s.Store.NoteCustomDomainCheck(ctx, d.SandboxID, d.Hostname, err.Error(), s.Clock().Add(domainRetryWindow))
		return Domain{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !ok {
		if err := s.Store.NoteCustomDomainCheck(ctx, d.SandboxID, d.Hostname, why, s.Clock().Add(domainRetryWindow)); err != nil {
			return Domain{}, s.mapStoreErr(err, row.ID)
		}
		d.LastError = why
		return domainOf(d), nil
	}
	return s.promote(ctx, d)
}

// promote verifies the pending binding d, whose challenge was found:
// cluster key, row, route, undone in reverse on failure.
func (s *Service) promote(ctx context.Context, d store.CustomDomain) (Domain, error) {
	if s.Cluster != nil {
		if err := s.Cluster.ClaimHostname(ctx, d.Hostname, d.SandboxID); err != nil {
			return Domain{}, clusterErr(err, "")
		}
	}
	promoted, token, err := s.Store.VerifyCustomDomain(ctx, d.SandboxID, d.Hostname)
	if err != nil {
		s.releaseHostname(ctx, d.Hostname, d.SandboxID)
		return Domain{}, s.domainErr(err, d.Hostname, d.SandboxID)
	}
	if err := s.route(ctx, d, false, promoted, token); err != nil {
		return Domain{}, err
	}
	s.recordIntents(ctx, d.SandboxID)
	d.VerifiedAt, d.LastError = s.Clock(), ""
	return domainOf(d), nil
}

// lookupChallenge looks up d's TXT record. ok when one of its records is
// d's challenge; else why says what was found. err is a look-up that
// failed (not a name without records).
func (s *Service) lookupChallenge(ctx context.Context, d store.CustomDomain) (ok bool, why string, err error) {
	name := ChallengeName(strings.ToLower(d.Hostname))
	ctx, cancel := context.WithTimeout(ctx, domainLookupTimeout)
	defer cancel()
	txts, err := s.Resolver.LookupTXT(ctx, name+".")
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return false, "no TXT record at " + name, nil
	case err != nil:
		return false, "", fmt.Errorf("look up TXT %s: %w", name, err)
	case slices.ContainsFunc(txts, func(t string) bool { return strings.TrimSpace(t) == d.Challenge }):
		return true, "", nil
	}
	return false, fmt.Sprintf("the TXT record at %s does not hold this binding's value", name), nil
}

// CheckPendingDomains looks up the TXT records of at most domainCheckBatch
// pending bindings still in their retry window, those checked longest ago
// first, and verifies those whose challenge is there. It returns how many
// it verified. RunBackground calls it every Config.DomainCheckEvery, on
// a goroutine of its own (runDomainChecks); errors of single bindings are
// recorded on them and logged, not returned.
func (s *Service) CheckPendingDomains(ctx context.Context) (int, error) {
	ds, err := s.Store.ListPendingCustomDomains(ctx, domainCheckBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range ds {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		ok, why, err := s.lookupChallenge(ctx, d)
		if err != nil {
			why = err.Error()
		}
		if ok {
			_, err := s.promote(ctx, d)
			if err == nil {
				n++
				continue
			}
			s.Logger.Warn("custom domain: verify", "hostname", d.Hostname, "sandbox", d.SandboxID, "err", err)
			why = "verify: " + err.Error()
			if errors.Is(err, ErrHostnameConflict) {
				// Another sandbox holds it: looking again changes nothing.
				_ = s.Store.NoteCustomDomainCheck(ctx, d.SandboxID, d.Hostname, why, s.Clock())
				continue
			}
		}
		if err := s.Store.NoteCustomDomainCheck(ctx, d.SandboxID, d.Hostname, why, time.Time{}); err != nil {
			return n, err
		}
	}
	return n, nil
}

// domainPassTimeout bounds one background pass of CheckPendingDomains
// (domainCheckBatch look-ups of domainLookupTimeout each could otherwise
// take minutes against DNS servers that do not answer).
const domainPassTimeout = time.Minute

// runDomainChecks runs CheckPendingDomains every Config.DomainCheckEvery
// (default 30 s) until ctx ends, each pass bounded by domainPassTimeout.
func (s *Service) runDomainChecks(ctx context.Context) {
	every := s.cfg.DomainCheckEvery
	if every <= 0 {
		every = 30 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, domainPassTimeout)
		if _, err := s.CheckPendingDomains(pctx); err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			s.Logger.Error("check pending custom domains", "err", err)
		}
		cancel()
	}
}

// ReplayDomain binds hostname to port of sandbox id, verified, with no
// check: a cluster failover's replay of a binding its placement recorded
// verified (only verified ones are recorded).
func (s *Service) ReplayDomain(ctx context.Context, id, hostname string, port int) error {
	hostname, err := s.checkHostname(hostname)
	if err != nil {
		return err
	}
	_, err = s.bindVerified(ctx, id, hostname, port)
	if err == nil {
		s.recordIntents(ctx, id)
	}
	return err
}

// reservedHost reports whether hostname (normalized) is one of the
// daemon's own API hosts, which no sandbox may take as a custom domain.
func (s *Service) reservedHost(hostname string) bool {
	return slices.Contains(s.cfg.ReservedHosts, naming.NormalizeHost(hostname))
}

// removeDomain unbinds a hostname from a sandbox, pending or verified.
// Removing a binding that does not exist succeeds.
func (s *Service) removeDomain(ctx context.Context, c Caller, idOrName, hostname string) error {
	if err := s.requireReady(); err != nil {
		return err
	}
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return err
	}
	hostname = strings.ToLower(strings.TrimSuffix(hostname, "."))
	if err := s.Router.UnbindDomain(ctx, row.ID, hostname); err != nil {
		return err
	}
	if _, err := s.Store.RemoveCustomDomain(ctx, row.ID, hostname); err != nil {
		return s.mapStoreErr(err, row.ID)
	}
	if s.Cluster != nil {
		if err := s.Cluster.ReleaseHostname(ctx, hostname, row.ID); err != nil {
			return clusterErr(err, "")
		}
	}
	return nil
}

// releaseHostname gives back a hostname claimed cluster-wide for id by a
// bind that failed, unless the sandbox still holds it verified locally (a
// repeat of a binding that exists, read again from the store).
func (s *Service) releaseHostname(ctx context.Context, hostname, id string) {
	if s.Cluster == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if ds, err := s.Store.ListCustomDomains(rctx, id); err != nil || slices.ContainsFunc(ds, func(d store.CustomDomain) bool {
		return strings.EqualFold(d.Hostname, hostname) && d.Verified()
	}) {
		return // bound (or unknown): keep the cluster's key
	}
	if err := s.Cluster.ReleaseHostname(rctx, hostname, id); err != nil {
		s.Logger.Warn("release a cluster hostname after a failed bind", "hostname", hostname, "sandbox", id, "err", err)
	}
}

// ListDomains lists a sandbox's custom hostnames, pending and verified.
func (s *Service) ListDomains(ctx context.Context, c Caller, idOrName string) ([]Domain, error) {
	row, err := s.lookup(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	ds, err := s.Store.ListCustomDomains(ctx, row.ID)
	if err != nil {
		return nil, s.mapStoreErr(err, row.ID)
	}
	out := make([]Domain, len(ds))
	for i, d := range ds {
		out[i] = domainOf(d)
	}
	return out, nil
}
