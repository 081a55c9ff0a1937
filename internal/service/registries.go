package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/sandboxd/sandboxd/internal/imageref"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Registry credentials per owner (POST/GET/DELETE /v1/registries). The
// password or token is sealed with the daemon's keyring, bound to the
// owner and the host, as secret env is; it is never answered back, logged
// or put in an error. A pull for an owner uses that owner's credential for
// the image's host and no other owner's.
//
// The node's copy of an image is shared by every owner, so an image pulled
// with one owner's credential must not become another's for free: while
// any owner holds a credential for a host, every create of an image from
// that host checks the caller's own access first, even when the image is
// present, by asking the registry for the image's manifest with the
// caller's credential (or none): the engine's distribution inspect
// (Puller.CheckAccess), which always goes to the registry. Not a pull: the
// engine answers a pull of an image it holds by digest from its own store,
// without the registry ever seeing the credential. A refusal is the
// caller's 403 (or 404), and a registry that does not answer is a 503.
// Each owner's verdict on an image is kept for accessVerdictTTL; a pull
// that follows a check is joined across owners, each of whom was checked.

// Bounds of a registry credential.
const (
	maxRegistryUser   = 256
	maxRegistrySecret = 8192
	accessVerdictTTL  = time.Minute
	// accessCheckTimeout bounds one access check (a manifest request), so
	// that a registry that takes the connection and never answers holds a
	// create for this long, not for the whole PullTimeout.
	accessCheckTimeout = 2 * time.Minute
)

// RegistryCredential is an owner's credential for a registry, as answered:
// never with its secret.
type RegistryCredential struct {
	Host      string
	Username  string
	CreatedAt time.Time
}

// RegistryCredentialInput is a credential to store.
type RegistryCredentialInput struct {
	Host     string
	Username string
	// Password is the password or token.
	Password string
}

// registryHost names host as image references do (imageref.RegistryHost),
// or is the field error that says why it cannot.
func registryHost(host string) (string, error) {
	h, err := imageref.RegistryHost(host)
	if err != nil {
		return "", &FieldError{Field: "host", Reason: err.Error()}
	}
	return h, nil
}

func registryAD(owner, host string) []byte {
	return secrets.AssociatedData("registry", owner, host)
}

// PutRegistryCredential stores the caller's credential for a registry
// host, replacing the one it had (a retry stores the same).
func (s *Service) PutRegistryCredential(ctx context.Context, c Caller, in RegistryCredentialInput) (RegistryCredential, error) {
	host, err := registryHost(in.Host)
	if err != nil {
		return RegistryCredential{}, err
	}
	switch {
	case in.Username == "" || len(in.Username) > maxRegistryUser || strings.ContainsAny(in.Username, "\x00\r\n"):
		return RegistryCredential{}, invalid("username", "must be 1 to %d bytes on one line", maxRegistryUser)
	case in.Password == "" || len(in.Password) > maxRegistrySecret:
		return RegistryCredential{}, invalid("password", "must be 1 to %d bytes", maxRegistrySecret)
	}
	sealed, err := s.Keyring.Seal([]byte(in.Password), registryAD(c.Owner, host))
	if err != nil {
		return RegistryCredential{}, fmt.Errorf("seal the registry credential: %w", err)
	}
	row := store.RegistryCredential{Owner: c.Owner, Host: host, Username: in.Username, SealedSecret: sealed, CreatedAt: s.Clock().UTC()}
	if err := s.Store.PutRegistryCredential(ctx, row); err != nil {
		return RegistryCredential{}, err
	}
	s.registryHosts.Store(host, true)
	s.forgetAccess(c.Owner)
	return RegistryCredential{Host: host, Username: in.Username, CreatedAt: row.CreatedAt}, nil
}

// ListRegistryCredentials lists the caller's credentials, without secrets.
func (s *Service) ListRegistryCredentials(ctx context.Context, c Caller) ([]RegistryCredential, error) {
	rows, err := s.Store.ListRegistryCredentials(ctx, c.Owner)
	if err != nil {
		return nil, err
	}
	out := make([]RegistryCredential, len(rows))
	for i, r := range rows {
		out[i] = RegistryCredential{Host: r.Host, Username: r.Username, CreatedAt: r.CreatedAt}
	}
	return out, nil
}

// DeleteRegistryCredential removes the caller's credential for host;
// ErrNotFound when it has none.
func (s *Service) DeleteRegistryCredential(ctx context.Context, c Caller, host string) error {
	h, err := registryHost(host)
	if err != nil {
		return err
	}
	if err := s.Store.DeleteRegistryCredential(ctx, c.Owner, h); err != nil {
		return err
	}
	// The host stays private (store.RegistryHasCredentials): the node's
	// copies pulled with the credential are still there.
	s.forgetAccess(c.Owner)
	return nil
}

// registryAuth is owner's credential for host, opened; nil when it has
// none. One the keyring cannot open is an *UnavailableError (503) that
// names the host and says to store the credential again.
func (s *Service) registryAuth(ctx context.Context, owner, host string) (*runtime.RegistryAuth, error) {
	row, err := s.Store.GetRegistryCredential(ctx, owner, host)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	plain, err := s.Keyring.Open(row.SealedSecret, registryAD(owner, host))
	if err != nil {
		// The keyring lacks the key that sealed it (the data directory's
		// keys were replaced) or the row was altered: no retry opens it,
		// but storing the credential again does. A fault of the daemon's
		// state, not of the request: 503 with the cause, never a 500.
		s.Logger.Error("registry credential cannot be decrypted", "owner", owner, "host", host, "err", err)
		return nil, Unavailable(fmt.Sprintf("the stored credential for registry %s cannot be decrypted; store it again", host), err)
	}
	return &runtime.RegistryAuth{ServerAddress: host, Username: row.Username, Password: string(plain)}, nil
}

// privateRegistry reports whether any owner holds, or ever held, a
// credential for host. A yes is cached (it never turns back: the store
// keeps the host); a no is asked again each time, so a credential stored
// meanwhile is never missed, and a host a caller merely names adds
// nothing to the cache.
func (s *Service) privateRegistry(ctx context.Context, host string) (bool, error) {
	if _, ok := s.registryHosts.Load(host); ok {
		return true, nil
	}
	has, err := s.Store.RegistryHasCredentials(ctx, host)
	if err != nil {
		return false, err
	}
	if has {
		s.registryHosts.Store(host, true)
	}
	return has, nil
}

// byIDFromPrivate reports whether ref found img other than by one of its
// names (an image id, or the unique prefix of one, which the engine also
// takes) while img came from a registry some owner holds a credential
// for: such a create is refused, or naming a private image's id would
// skip the caller's access check.
func (s *Service) byIDFromPrivate(ctx context.Context, ref string, img runtime.Image) (bool, error) {
	want := ""
	if named, ok := normalizeRef(ref); ok {
		want = named.String()
	}
	for _, r := range img.Refs {
		n, err := reference.ParseNormalizedNamed(r)
		if err != nil {
			continue
		}
		if want != "" && (n.String() == want || reference.TagNameOnly(n).String() == want) {
			return false, nil // found by this name
		}
	}
	for _, r := range img.Refs {
		n, err := reference.ParseNormalizedNamed(r)
		if err != nil {
			continue
		}
		private, err := s.privateRegistry(ctx, reference.Domain(n))
		if err != nil || private {
			return private, err
		}
	}
	return false, nil
}

func accessKey(owner, ref string) string { return owner + "\x00" + ref }

// accessKnown reports whether owner was let pull ref within
// accessVerdictTTL.
func (s *Service) accessKnown(owner, ref string) bool {
	until, ok := s.accessVerdicts.Load(accessKey(owner, ref))
	return ok && s.Clock().Before(until.(time.Time))
}

func (s *Service) noteAccess(owner, ref string) {
	if s.accessVerdictCount.Add(1) > maxImageVerdicts {
		s.accessVerdicts.Clear()
		s.accessVerdictCount.Store(0)
	}
	s.accessVerdicts.Store(accessKey(owner, ref), s.Clock().Add(accessVerdictTTL))
}

// forgetAccess drops owner's verdicts (its credentials changed).
func (s *Service) forgetAccess(owner string) {
	s.accessVerdicts.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), owner+"\x00") {
			s.accessVerdicts.Delete(k)
		}
		return true
	})
}
