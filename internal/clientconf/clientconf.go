// Package clientconf finds the daemon a client of sandboxd talks to and
// the API token it sends, with one set of rules for every client on the
// user's machine: sbx and `sandboxd mcp` call Resolve, so the two can
// never disagree about which token they use.
//
// The daemon's URL is the --url flag, else SBX_API_URL, else
// sandboxd.DefaultBaseURL. The token is read from the --token-file flag's
// file (which must exist and hold a token), else SBX_TOKEN, else
// $SBX_DATA_DIR/admin.token, else .sandboxd/admin.token in the working
// directory or the nearest parent that has one (a checkout where `make
// run` started a daemon). Files are trimmed of surrounding white space;
// a data-dir or checkout file that does not exist means no token (the
// daemon then answers 401, which the client explains), any other read
// error is an error. There is no token flag: a command line is readable
// by every user of the host.
//
// The checkout's file is found by walking up from the working directory,
// which may be anyone's checkout (a repository just cloned, a sandbox's
// files copied out), so it is trusted only as far as `make run`'s own
// file would be: it is used only for a loopback URL (the daemon `make
// run` started); the walk stops at $HOME when it starts inside it; and a
// file found is skipped unless it is a regular file (not a symlink to
// another secret, which would go out as the Bearer token, nor a FIFO or
// device that would hang or fill the client: opened with O_NOFOLLOW and
// O_NONBLOCK) owned by the user, of at most maxWalkedToken bytes, that
// holds one of our tokens (auth.Parse). A skipped file is as none: the
// walk goes on to the parent.
package clientconf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/auth"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// maxWalkedToken bounds what is read of a checkout's token file: a token
// is 77 bytes, and a file of more is not one of ours.
const maxWalkedToken = 4 << 10

// Env is what Resolve reads of the process: its environment and working
// directory.
type Env struct {
	Getenv func(string) string
	Getwd  func() (string, error)
}

// OS is the process's own environment and working directory.
func OS() Env { return Env{Getenv: os.Getenv, Getwd: os.Getwd} }

// Flags are what the command line said; "" is not given.
type Flags struct {
	URL       string // --url
	TokenFile string // --token-file
}

// Config is where a client sends its calls, and with which token ("" when
// none was found).
type Config struct {
	URL   string
	Token string
}

// The flags' names and help, for every client to declare alike.
const (
	URLFlag       = "url"
	URLHelp       = "the daemon's API URL (default $SBX_API_URL, else " + sandboxd.DefaultBaseURL + ")"
	TokenFileFlag = "token-file"
	TokenFileHelp = "a file holding the API token (default $SBX_TOKEN, else $SBX_DATA_DIR/admin.token, else, for a loopback URL, .sandboxd/admin.token here or in the nearest parent up to $HOME)"
	// NoTokenHint says how to give a token, for a client's 401.
	NoTokenHint = "set SBX_TOKEN or --token-file, or run inside a checkout with .sandboxd/admin.token"
)

// Resolve applies the package's rules to f and env.
func Resolve(f Flags, env Env) (Config, error) {
	c := Config{URL: f.URL}
	if c.URL == "" {
		c.URL = env.Getenv("SBX_API_URL")
	}
	if c.URL == "" {
		c.URL = sandboxd.DefaultBaseURL
	}
	var err error
	c.Token, err = token(f.TokenFile, env, loopbackURL(c.URL))
	return c, err
}

// loopbackURL reports whether u names a daemon on this machine's loopback:
// localhost or a loopback address.
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	h := p.Hostname()
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// token finds the API token by the package's rules; walk says whether a
// checkout's file may be used (the URL is loopback).
func token(file string, env Env, walk bool) (string, error) {
	if file != "" {
		t, err := readToken(file)
		if err == nil && t == "" {
			err = fmt.Errorf("token file %s is missing or empty", file)
		}
		return t, err
	}
	if t := strings.TrimSpace(env.Getenv("SBX_TOKEN")); t != "" {
		return t, nil
	}
	if dir := env.Getenv("SBX_DATA_DIR"); dir != "" {
		return readToken(filepath.Join(dir, "admin.token"))
	}
	if !walk || env.Getwd == nil {
		return "", nil
	}
	wd, err := env.Getwd()
	if err != nil {
		return "", nil
	}
	wd = filepath.Clean(wd)
	home := env.Getenv("HOME")
	if home != "" {
		home = filepath.Clean(home)
		if wd != home && !strings.HasPrefix(wd, home+string(filepath.Separator)) {
			home = "" // outside $HOME: up to the root
		}
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if t := walkedToken(filepath.Join(dir, ".sandboxd", "admin.token")); t != "" {
			return t, nil
		}
		if dir == home || filepath.Dir(dir) == dir {
			return "", nil
		}
	}
}

// walkedToken returns the token in a checkout's token file, or "" when
// the file is missing or not one to trust (see the package doc): a
// symlink, not a regular file, not the user's, too long, or not a token.
func walkedToken(path string) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "" // missing, or a symlink (ELOOP)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(f, maxWalkedToken+1))
	if err != nil || len(b) > maxWalkedToken {
		return ""
	}
	t := strings.TrimSpace(string(b))
	if _, err := auth.Parse(t); err != nil {
		return ""
	}
	return t
}

// readToken returns the token in a file, or "" when there is no file.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
