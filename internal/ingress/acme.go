package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/caddyserver/certmagic"
	"github.com/sandboxd/sandboxd/internal/naming"
	"go.uber.org/zap"
)

// ACMEOptions configure production certificates for preview hosts and
// custom domains.
type ACMEOptions struct {
	// Email is the ACME account contact. Required.
	Email string
	// StorageDir holds accounts, keys and certificates (0700). Required.
	StorageDir string
	// CA is the ACME directory URL. Default: Let's Encrypt production.
	CA string
	// Routable decides on-demand issuance: a certificate is requested only
	// for a server name it accepts (pass Router.Routable). Required.
	Routable func(host string) bool
}

// ACME obtains and renews certificates with certmagic, on demand at the
// first handshake for a routable host: preview hosts are too many and too
// short-lived to list in advance, and the decision function keeps
// strangers from making the daemon request certificates for names it
// does not serve.
type ACME struct {
	cache  *certmagic.Cache
	cfg    *certmagic.Config
	issuer *certmagic.ACMEIssuer
}

// NewACME sets up the certificate manager. It contacts nothing: the first
// handshake for a routable host does. Close stops its maintenance.
func NewACME(o ACMEOptions) (*ACME, error) {
	if o.Email == "" || o.StorageDir == "" || o.Routable == nil {
		return nil, errors.New("ingress.NewACME: Email, StorageDir and Routable are required")
	}
	if o.CA == "" {
		o.CA = certmagic.LetsEncryptProductionCA
	}
	nop := zap.NewNop()
	var cfg *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return cfg, nil },
		Logger:           nop,
	})
	cfg = certmagic.New(cache, certmagic.Config{
		Storage: &certmagic.FileStorage{Path: o.StorageDir},
		Logger:  nop,
		OnDemand: &certmagic.OnDemandConfig{
			DecisionFunc: func(_ context.Context, name string) error {
				if !o.Routable(naming.NormalizeHost(name)) {
					return fmt.Errorf("ingress: %q is not routable", name)
				}
				return nil
			},
		},
	})
	issuer := certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{CA: o.CA, Email: o.Email, Agreed: true, Logger: nop})
	cfg.Issuers = []certmagic.Issuer{issuer}
	return &ACME{cache: cache, cfg: cfg, issuer: issuer}, nil
}

// TLSConfig is the server configuration for the daemon's HTTPS listener:
// certificates on demand, HTTP/1.1 and the TLS-ALPN challenge.
func (a *ACME) TLSConfig() *tls.Config {
	c := a.cfg.TLSConfig()
	c.MinVersion = tls.VersionTLS12
	c.NextProtos = slices.Insert(c.NextProtos, 0, "http/1.1")
	return c
}

// HTTPChallengeHandler answers ACME HTTP-01 challenges on the port-80
// listener and passes every other request to next.
func (a *ACME) HTTPChallengeHandler(next http.Handler) http.Handler {
	return a.issuer.HTTPChallengeHandler(next)
}

// Close stops certificate maintenance.
func (a *ACME) Close() { a.cache.Stop() }
