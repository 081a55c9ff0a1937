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
package clientconf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

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
	TokenFileHelp = "a file holding the API token (default $SBX_TOKEN, else $SBX_DATA_DIR/admin.token, else .sandboxd/admin.token here or in the nearest parent)"
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
	c.Token, err = token(f.TokenFile, env)
	return c, err
}

// token finds the API token by the package's rules.
func token(file string, env Env) (string, error) {
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
	if env.Getwd == nil {
		return "", nil
	}
	wd, err := env.Getwd()
	if err != nil {
		return "", nil
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		t, err := readToken(filepath.Join(dir, ".sandboxd", "admin.token"))
		if t != "" || err != nil {
			return t, err
		}
		if filepath.Dir(dir) == dir {
			return "", nil
		}
	}
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
