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
// serves every port by name (65,535 names), so issuance is bounded too.
// Signing a leaf costs ~0.8 ms of CPU here (a P-256 key and a signature,
// 2,000 signatures timed on this 2-core machine).
const (
	// localLeafCacheCap bounds the leaves kept in memory; past it the
	// least recently used one goes (one, not all: a name in use keeps its
	// certificate).
	localLeafCacheCap = 4096
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
	// localGroupCap bounds the groups whose budget is remembered; full
	// buckets are forgotten first (a fresh one is the same).
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
// rate for the CA and one per sandbox, into a least-recently-used cache.
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

	mu     sync.Mutex
	leaves map[string]*list.Element // of *cachedLeaf, in lru
	lru    *list.List               // front: most recently used
	cap    int
	groups map[string]*rate.Limiter

	issued, refusedName, refusedBudget atomic.Int64
}

type cachedLeaf struct {
	host string
	cert *tls.Certificate
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
		leaves: map[string]*list.Element{}, lru: list.New(), cap: localLeafCacheCap,
		groups: map[string]*rate.Limiter{},
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
func (ca *LocalCA) TLSConfig(allow func(host string) bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			host := naming.NormalizeHost(hello.ServerName)
			if host == "" || !allow(host) {
				ca.refusedName.Add(1)
				return nil, errNoRoute
			}
			return ca.leaf(hello.Context(), host)
		},
	}
}

// leaf returns the cached certificate for host, or one signed now: by one
// caller at a time per host (the others wait for its result), within the
// budget.
func (ca *LocalCA) leaf(ctx context.Context, host string) (*tls.Certificate, error) {
	if c := ca.cached(host); c != nil {
		return c, nil
	}
	ch := ca.flight.DoChan(host, func() (any, error) {
		if c := ca.cached(host); c != nil {
			return c, nil // signed by a flight that just ended
		}
		if !ca.spend(host) {
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
		ca.store(host, c)
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
	c := e.Value.(*cachedLeaf).cert
	if !ca.now().Before(c.Leaf.NotAfter.Add(-time.Hour)) {
		return nil
	}
	ca.lru.MoveToFront(e)
	return c
}

// store caches host's leaf, evicting the least recently used one past
// the cap.
func (ca *LocalCA) store(host string, c *tls.Certificate) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if e := ca.leaves[host]; e != nil {
		e.Value.(*cachedLeaf).cert = c
		ca.lru.MoveToFront(e)
		return
	}
	ca.leaves[host] = ca.lru.PushFront(&cachedLeaf{host: host, cert: c})
	for ca.lru.Len() > ca.cap {
		old := ca.lru.Back()
		ca.lru.Remove(old)
		delete(ca.leaves, old.Value.(*cachedLeaf).host)
	}
}

// spend takes one fresh leaf from host's group's budget and the CA's,
// reporting false (nothing taken from the CA's) when either is empty.
func (ca *LocalCA) spend(host string) bool {
	now := ca.now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	g := issueGroup(host)
	lim := ca.groups[g]
	if lim == nil {
		if len(ca.groups) >= localGroupCap {
			for k, l := range ca.groups { // a full bucket is a fresh one
				if l.TokensAt(now) >= float64(ca.groupMax) {
					delete(ca.groups, k)
				}
			}
			if len(ca.groups) >= localGroupCap {
				return false
			}
		}
		lim = rate.NewLimiter(ca.groupLim, ca.groupMax)
		ca.groups[g] = lim
	}
	if lim.TokensAt(now) < 1 || !ca.global.AllowN(now, 1) {
		return false
	}
	return lim.AllowN(now, 1)
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
