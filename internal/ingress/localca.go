package ingress

import (
	"container/list"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/sandboxd/sandboxd/internal/naming"
)

// Local CA lifetimes: the CA lives as long as the process that made it;
// leaves are short so a stale one never matters.
const (
	localCALifetime   = 10 * 365 * 24 * time.Hour
	localLeafLifetime = 7 * 24 * time.Hour
)

// The bounds of on-demand issuance. A TLS handshake comes before any
// credential, so whoever reaches the listener chooses the server names:
// allow admits only names the daemon could serve, but one E2B sandbox
// serves every port something listens on by name (up to 65,535 names, and
// its owner may listen on them all), so issuance is bounded too, and
// shared out among owners.
// Signing a leaf costs ~0.8 ms of CPU here (a P-256 key and a signature,
// 2,000 signatures timed on this 2-core machine).
const (
	// localLeafCacheCap bounds the leaves kept in memory; past it the
	// least recently used one goes (one, not all: a name in use keeps its
	// certificate).
	localLeafCacheCap = 4096
	// localOwnerCacheShare: one owner holds at most 1/4 of the cache's
	// cap; past it that owner's least recently used leaf goes, so one
	// tenant's flood of names evicts only its own leaves.
	localOwnerCacheShare = 4
	// localSignSlots is how many leaves are signed at once, whatever the
	// number of handshakes waiting.
	localSignSlots = 2
	// localIssueRate and localIssueBurst bound fresh leaves per second for
	// the whole CA: 20/s is under 2% of a core, and a cache's worth of
	// names takes over 3 minutes to cycle (over 2 hours through one
	// sandbox's names, at its group's rate).
	localIssueRate  = 20
	localIssueBurst = 100
	// localGroupRate and localGroupBurst bound fresh leaves per sandbox
	// (the group of <port>-<id>.<domain> is <id>.<domain>; any other name
	// is its own group): a page opening a handful of ports gets them at
	// once, a caller walking one sandbox's ports gets one every 2 s, and
	// it cannot spend the whole CA's budget on one sandbox.
	localGroupRate  = 0.5
	localGroupBurst = 32
	// localOwnerRate and localOwnerBurst bound fresh leaves per owner
	// (the tenant the admission check names, else the name's group): a
	// quarter of the CA's rate and half its burst, so one tenant walking
	// the ports of all its sandboxes (each a fresh group of 32) leaves
	// the CA three quarters of its rate for everyone else's.
	localOwnerRate  = localIssueRate / 4
	localOwnerBurst = localIssueBurst / 2
	// localGroupCap bounds the groups and owners whose budget is
	// remembered (each); full buckets are forgotten first (a fresh one
	// is the same).
	localGroupCap = 4096
)

// errNoRoute fails a handshake for a server name the daemon does not
// serve; errIssueBudget one whose certificate would exceed the budget.
var (
	errNoRoute     = errors.New("ingress: no route for this server name")
	errIssueBudget = errors.New("ingress: too many new certificates for this name's sandbox; retry in a few seconds")
)

// LocalCA issues certificates for preview hosts from a CA that exists only
// in memory: HTTPS in local mode and in tests, with no ACME server. Trust
// it by adding Pool (or CertPEM) to a client's roots.
//
// Issuance is on demand and bounded (see the constants above): only names
// allow admits, one signature per name however many handshakes wait for
// it (single flight), at most localSignSlots signatures at once, within a
// rate for the CA, one per owner (tenant) and one per sandbox, into a
// least-recently-used cache where each owner holds at most a quarter.
// A handshake over a bound fails; nothing waits for the budget.
type LocalCA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
	pool *x509.CertPool

	now      func() time.Time
	flight   singleflight.Group
	slots    chan struct{}
	global   *rate.Limiter
	groupLim rate.Limit
	groupMax int
	ownerLim rate.Limit
	ownerMax int

	mu      sync.Mutex
	leaves  map[string]*list.Element // of *cachedLeaf, in lru
	lru     *list.List               // front: most recently used
	cap     int
	byOwner map[string]*list.List // of *list.Element of lru, front: most recently used
	groups  map[string]*rate.Limiter
	owners  map[string]*rate.Limiter

	issued, refusedName, refusedBudget atomic.Int64
}

type cachedLeaf struct {
	host, owner string
	cert        *tls.Certificate
	inOwner     *list.Element // this leaf's place in byOwner[owner]
}

// LocalCACounts are a LocalCA's issuance counters since it was made.
type LocalCACounts struct {
	Issued        int64 // leaves signed
	RefusedName   int64 // handshakes for a name allow refused
	RefusedBudget int64 // handshakes refused by the issuance budget
	Cached        int   // leaves in the cache now
}

// NewLocalCA generates a self-signed CA.
func NewLocalCA() (*LocalCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("local CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "sandboxd local CA", Organization: []string{"sandboxd"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(localCALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("local CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("local CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &LocalCA{
		cert: cert, der: der, key: key, pool: pool,
		now:      time.Now,
		slots:    make(chan struct{}, localSignSlots),
		global:   rate.NewLimiter(localIssueRate, localIssueBurst),
		groupLim: localGroupRate, groupMax: localGroupBurst,
		ownerLim: localOwnerRate, ownerMax: localOwnerBurst,
		leaves: map[string]*list.Element{}, lru: list.New(), cap: localLeafCacheCap,
		byOwner: map[string]*list.List{},
		groups:  map[string]*rate.Limiter{}, owners: map[string]*rate.Limiter{},
	}, nil
}

// Pool is a certificate pool holding the CA, for clients' RootCAs.
func (ca *LocalCA) Pool() *x509.CertPool { return ca.pool }

// CertPEM is the CA certificate in PEM, for browsers and curl --cacert.
func (ca *LocalCA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// Counts returns the issuance counters (for /metrics).
func (ca *LocalCA) Counts() LocalCACounts {
	ca.mu.Lock()
	cached := ca.lru.Len()
	ca.mu.Unlock()
	return LocalCACounts{
		Issued: ca.issued.Load(), RefusedName: ca.refusedName.Load(),
		RefusedBudget: ca.refusedBudget.Load(), Cached: cached,
	}
}

// TLSConfig returns a server configuration that issues a leaf on demand
// for every server name allow accepts (pass Router.Routable, or a check
// that the name's sandbox exists: it runs on every handshake, before any
// credential, so it must be cheap) and fails the handshake for any other
// and for any past the issuance bounds. Serve the router's handler over
// it:
//
//	srv.Serve(tls.NewListener(ln, ca.TLSConfig(router.Routable)))
//
// Every admitted name counts against its sandbox's group; with TLSConfig
// the group is also the owner. TLSConfigByOwner is the same with an
// admission check that names the tenant a name counts against.
func (ca *LocalCA) TLSConfig(allow func(host string) bool) *tls.Config {
	return ca.TLSConfigByOwner(func(host string) (string, bool) { return "", allow(host) })
}

// TLSConfigByOwner is TLSConfig whose admission check also names the
// owner (the tenant) of each name it admits, "" for none known (the
// name's group then stands for its owner). Each owner has its own share
// of the CA's issuance rate and of its cache (localOwnerRate,
// localOwnerCacheShare), so one tenant's flood of names neither empties
// the CA's budget for the others nor evicts their leaves.
func (ca *LocalCA) TLSConfigByOwner(admit func(host string) (owner string, ok bool)) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			host := naming.NormalizeHost(hello.ServerName)
			if host == "" {
				ca.refusedName.Add(1)
				return nil, errNoRoute
			}
			owner, ok := admit(host)
			if !ok {
				ca.refusedName.Add(1)
				return nil, errNoRoute
			}
			if owner == "" {
				owner = "group:" + issueGroup(host)
			} else {
				owner = "owner:" + owner
			}
			return ca.leaf(hello.Context(), host, owner)
		},
	}
}

// leaf returns the cached certificate for host, or one signed now: by one
// caller at a time per host (the others wait for its result), within the
// budgets of host's group and of owner (a key of TLSConfigByOwner's).
func (ca *LocalCA) leaf(ctx context.Context, host, owner string) (*tls.Certificate, error) {
	if c := ca.cached(host); c != nil {
		return c, nil
	}
	ch := ca.flight.DoChan(host, func() (any, error) {
		if c := ca.cached(host); c != nil {
			return c, nil // signed by a flight that just ended
		}
		if !ca.spend(host, owner) {
			ca.refusedBudget.Add(1)
			return nil, errIssueBudget
		}
		// The flight outlives the handshake that started it (others
		// wait on it), so it waits for a slot without that one's
		// context; the slots are held for a signature only.
		ca.slots <- struct{}{}
		c, err := ca.sign(host)
		<-ca.slots
		if err != nil {
			return nil, err
		}
		ca.issued.Add(1)
		ca.store(host, owner, c)
		return c, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*tls.Certificate), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// cached returns host's leaf while it has more than an hour to live,
// marking it recently used.
func (ca *LocalCA) cached(host string) *tls.Certificate {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	e := ca.leaves[host]
	if e == nil {
		return nil
	}
	l := e.Value.(*cachedLeaf)
	if !ca.now().Before(l.cert.Leaf.NotAfter.Add(-time.Hour)) {
		return nil
	}
	ca.lru.MoveToFront(e)
	ca.byOwner[l.owner].MoveToFront(l.inOwner)
	return l.cert
}

// store caches host's leaf as owner's, evicting owner's least recently
// used one past the owner's cap, then the least recently used one past
// the cap.
func (ca *LocalCA) store(host, owner string, c *tls.Certificate) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if e := ca.leaves[host]; e != nil {
		ca.evict(e) // cached again, perhaps as another owner's
	}
	l := &cachedLeaf{host: host, owner: owner, cert: c}
	e := ca.lru.PushFront(l)
	ca.leaves[host] = e
	mine := ca.byOwner[owner]
	if mine == nil {
		mine = list.New()
		ca.byOwner[owner] = mine
	}
	l.inOwner = mine.PushFront(e)
	for mine.Len() > max(1, ca.cap/localOwnerCacheShare) {
		ca.evict(mine.Back().Value.(*list.Element))
	}
	for ca.lru.Len() > ca.cap {
		ca.evict(ca.lru.Back())
	}
}

// evict drops the cached leaf at e; the caller holds ca.mu.
func (ca *LocalCA) evict(e *list.Element) {
	l := e.Value.(*cachedLeaf)
	ca.lru.Remove(e)
	delete(ca.leaves, l.host)
	mine := ca.byOwner[l.owner]
	mine.Remove(l.inOwner)
	if mine.Len() == 0 {
		delete(ca.byOwner, l.owner)
	}
}

// spend takes one fresh leaf from the budgets of host's group, of owner
// and of the CA, reporting false (nothing taken) when any is empty.
func (ca *LocalCA) spend(host, owner string) bool {
	now := ca.now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	group := bucket(ca.groups, issueGroup(host), ca.groupLim, ca.groupMax, now)
	mine := bucket(ca.owners, owner, ca.ownerLim, ca.ownerMax, now)
	if group == nil || mine == nil || group.TokensAt(now) < 1 || mine.TokensAt(now) < 1 || !ca.global.AllowN(now, 1) {
		return false
	}
	return group.AllowN(now, 1) && mine.AllowN(now, 1)
}

// bucket returns key's limiter in m, making a full one (of rate r and
// burst b) if it has none; nil when m is at localGroupCap with no full
// bucket to forget.
func bucket(m map[string]*rate.Limiter, key string, r rate.Limit, b int, now time.Time) *rate.Limiter {
	if lim := m[key]; lim != nil {
		return lim
	}
	if len(m) >= localGroupCap {
		for k, l := range m { // a full bucket is a fresh one
			if l.TokensAt(now) >= float64(b) {
				delete(m, k)
			}
		}
		if len(m) >= localGroupCap {
			return nil
		}
	}
	lim := rate.NewLimiter(r, b)
	m[key] = lim
	return lim
}

// issueGroup is the budget a name's leaves count against: the sandbox of
// a preview host <port>-<id>.<domain> (every port of one sandbox is one
// group), else the name itself.
func issueGroup(host string) string {
	label, rest, ok := strings.Cut(host, ".")
	if !ok {
		return host
	}
	port, id, ok := strings.Cut(label, "-")
	if !ok || port == "" || id == "" || strings.Trim(port, "0123456789") != "" {
		return host
	}
	return id + "." + rest
}

// sign makes a leaf for host.
func (ca *LocalCA) sign(host string) (*tls.Certificate, error) {
	now := ca.now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(localLeafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.der}, PrivateKey: key, Leaf: leaf}, nil
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	return n
}
