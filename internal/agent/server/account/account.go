package account

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

var (
	// ErrUnknownUser means the requested user does not exist in the sandbox.
	ErrUnknownUser = errors.New("unknown user")
	// ErrInvalid means the request named a user or a path that cannot be
	// used: a NUL byte in a path, a malformed Authorization header.
	ErrInvalid = errors.New("invalid argument")
)

// DefaultPasswd is the passwd file of the sandbox the agent runs in.
const DefaultPasswd = "/etc/passwd"

// Root is the user a request acts as when it names none.
const Root = "root"

// User is a Unix account as the agent uses it: who owns what it creates and
// where relative paths start.
type User struct {
	Name string
	UID  uint32
	GID  uint32
	Home string
}

// Lookup finds name in /etc/passwd. See [Directory.Lookup].
func Lookup(name string) (User, error) { return NewDirectory(DefaultPasswd).Lookup(name) }

// FromRequest resolves the user of r against /etc/passwd. See
// [Directory.FromRequest].
func FromRequest(r *http.Request) (User, error) {
	return NewDirectory(DefaultPasswd).FromRequest(r)
}

// FromHeader resolves the user named by h against /etc/passwd. See
// [Directory.FromHeader].
func FromHeader(h http.Header) (User, error) { return NewDirectory(DefaultPasswd).FromHeader(h) }

// Directory looks users up in one passwd(5) file. The zero value is not
// usable; create one with [NewDirectory]. A Directory is safe for concurrent
// use.
type Directory struct {
	path string
}

// NewDirectory returns a Directory backed by the passwd file at path. The
// file is not read until the first lookup.
func NewDirectory(path string) *Directory { return &Directory{path: path} }

// Lookup returns the account called name. An empty name means [Root]. A name
// that is not in the file is [ErrUnknownUser]; root is always known (uid 0,
// home /root) even when the file lacks it or cannot be read, so a sandbox
// with a broken passwd file still has a working default user.
func (d *Directory) Lookup(name string) (User, error) {
	if name == "" {
		name = Root
	}
	u, err := lookupPasswd(d.path, name)
	switch {
	case err == nil:
		return u, nil
	case name == Root:
		return User{Name: Root, Home: "/root"}, nil
	default:
		return User{}, err
	}
}

// FromRequest returns the user an HTTP request acts as: the `username` query
// parameter if set (the /files convention), otherwise the user of the
// Authorization header as in [Directory.FromHeader].
func (d *Directory) FromRequest(r *http.Request) (User, error) {
	if name := r.URL.Query().Get("username"); name != "" {
		return d.Lookup(name)
	}
	return d.FromHeader(r.Header)
}

// FromHeader returns the user named by `Authorization: Basic
// base64("<user>:")` (the password is ignored; the agent token is checked
// elsewhere), or root when there is no Basic credential. A Basic credential
// that does not decode is [ErrInvalid].
func (d *Directory) FromHeader(h http.Header) (User, error) {
	name, err := basicUser(h.Get("Authorization"))
	if err != nil {
		return User{}, err
	}
	return d.Lookup(name)
}

// basicUser returns the user part of a Basic Authorization header value, or
// "" when the header is absent or uses another scheme.
func basicUser(auth string) (string, error) {
	const prefix = "Basic "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return "", nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(auth[len(prefix):]))
	if err != nil {
		return "", fmt.Errorf("%w: authorization header: %v", ErrInvalid, err)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}
