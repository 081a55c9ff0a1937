package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The config file (--config FILE, env SANDBOXD_CONFIG) sets any flag of
// the daemon: one "name = value" a line, the flag's name without dashes,
// the value as on the command line (a duration "1h", a boolean "true"; a
// value in double quotes is unquoted as a Go string, so it may be empty
// or carry spaces at its ends). A line whose first non-blank character is
// # is a comment; a # after a value is part of the value. A key may appear
// once, but for api-host, which repeats as the flag does.
//
// Precedence: a flag on the command line wins over its environment
// variable, which wins over the file, which wins over the default; an
// empty variable counts as unset, as everywhere else.
//
// The file says what the daemon, which runs as root, executes (the agent
// binary) and where it keeps its keys, so it is refused when someone else
// could have written it: owned by a user other than root and the daemon's,
// or writable by group or others. A file that holds a secret (a key in
// secretKeys) is refused when group or others may read it.

// maxFileBytes bounds the config file: a few kB in practice.
const maxFileBytes = 1 << 20

// flagEnv names the environment variable of each flag that has one: a
// file's value for the flag applies only when that variable is unset.
// TestFlagEnv_Complete holds it equal to the variables Parse reads.
var flagEnv = map[string]string{
	"listen":               "SANDBOXD_LISTEN",
	"data-dir":             "SANDBOXD_DATA_DIR",
	"agent-binary":         "SANDBOXD_AGENT_BINARY",
	"node-id":              "SANDBOXD_NODE_ID",
	"domain":               "SANDBOXD_DOMAIN",
	"api-host":             "SANDBOXD_API_HOSTS",
	"https-listen":         "SANDBOXD_HTTPS_LISTEN",
	"https-cert":           "SANDBOXD_HTTPS_CERT",
	"https-key":            "SANDBOXD_HTTPS_KEY",
	"allow-public":         "SANDBOXD_ALLOW_PUBLIC",
	"tcp-host":             "SANDBOXD_TCP_HOST",
	"tls-listen":           "SANDBOXD_TLS_LISTEN",
	"default-image":        "SANDBOXD_DEFAULT_IMAGE",
	"default-runtime":      "SANDBOXD_DEFAULT_RUNTIME",
	"engine":               "SANDBOXD_ENGINE",
	"oci-dir":              "SANDBOXD_OCI_DIR",
	"sandbox-io-mbps":      "SANDBOXD_SANDBOX_IO_MBPS",
	"sandbox-io-iops":      "SANDBOXD_SANDBOX_IO_IOPS",
	"default-timeout":      "SANDBOXD_DEFAULT_TIMEOUT",
	"host-ports":           "SANDBOXD_HOST_PORTS",
	"sandbox-network":      "SANDBOXD_SANDBOX_NETWORK",
	"sandbox-network-name": "SANDBOXD_SANDBOX_NETWORK_NAME",
	"e2b-body-dedupe":      "SANDBOXD_E2B_BODY_DEDUPE",
	"e2b-replay-window":    "SANDBOXD_E2B_REPLAY_WINDOW",
	"pause-max":            "SANDBOXD_PAUSE_MAX",
	"pause-memory-floor":   "SANDBOXD_PAUSE_MEMORY_FLOOR",

	"hibernate-storage-max": "SANDBOXD_HIBERNATE_STORAGE_MAX",

	"template-storage-max": "SANDBOXD_TEMPLATE_STORAGE_MAX",
	"disk-default-mb":      "SANDBOXD_DISK_DEFAULT_MB",
	"disk-max-mb":          "SANDBOXD_DISK_MAX_MB",
	"volume-size-mb":       "SANDBOXD_VOLUME_SIZE_MB",
	"volume-storage-max":   "SANDBOXD_VOLUME_STORAGE_MAX",
	"registry-allow":       "SANDBOXD_REGISTRY_ALLOW",
	"image-max-mb":         "SANDBOXD_IMAGE_MAX_MB",
	"registry":             "SANDBOXD_REGISTRY",
	"registry-auth-file":   "SANDBOXD_REGISTRY_AUTH_FILE",
	"pool":                 "SANDBOXD_POOL",
	"idle-timeout":         "SANDBOXD_IDLE_TIMEOUT",
	"request-timeout":      "SANDBOXD_REQUEST_TIMEOUT",
	"max-conns":            "SANDBOXD_MAX_CONNS",
	"dns-resolver":         "SANDBOXD_DNS_RESOLVER",
	"domain-check-every":   "SANDBOXD_DOMAIN_CHECK_EVERY",
	"log-level":            "SANDBOXD_LOG_LEVEL",
	"advertise-url":        "SANDBOXD_ADVERTISE_URL",
	"advertise-tls":        "SANDBOXD_ADVERTISE_TLS",
	"default-quota":        "SANDBOXD_DEFAULT_QUOTA",
}

// secretKeys are the flags whose values are secrets: a file holding one
// must be readable by its owner only. None of today's flags is one (tokens
// and credentials live sealed in the data directory); a flag that takes a
// secret adds its name here.
var secretKeys = map[string]bool{}

// repeatable are the flags that may appear on several lines.
var repeatable = map[string]bool{"api-host": true}

// lineChecks check, line by line, the values that Parse only parses after
// every source is read, so that a bad one names its file and line.
var lineChecks = map[string]func(v string) error{
	"host-ports":    func(v string) error { _, _, err := parseRange(v); return err },
	"pool":          func(v string) error { _, err := ParsePool(v, "image"); return err },
	"default-quota": func(v string) error { _, err := ParseQuota(v); return err },
	"api-host":      func(v string) error { _, err := normalizeHosts([]string{v}); return err },
}

// fileLine is one setting of the config file.
type fileLine struct {
	n          int
	key, value string
}

// applyFile sets on fs every setting of the config file at path whose flag
// is not overridden (set on the command line or by its environment
// variable). It returns where each applied flag was set ("FILE:LINE"), for
// validation errors. Every error names the file, and the line when it is
// about one.
func applyFile(fs *flag.FlagSet, path string, overridden func(name string) bool) (map[string]string, error) {
	lines, err := readFile(path)
	if err != nil {
		return nil, err
	}
	origin := make(map[string]string)
	seen := make(map[string]int)
	for _, l := range lines {
		at := fmt.Sprintf("%s:%d", path, l.n)
		if l.key == "config" {
			return nil, fmt.Errorf("%s: config: a config file cannot name another", at)
		}
		if fs.Lookup(l.key) == nil {
			return nil, fmt.Errorf("%s: unknown key %q (keys are the daemon's flag names, as `sandboxd --help` lists them, without dashes)", at, l.key)
		}
		if first, dup := seen[l.key]; dup && !repeatable[l.key] {
			return nil, fmt.Errorf("%s: %s is set again (first on line %d)", at, l.key, first)
		}
		seen[l.key] = l.n
		if check := lineChecks[l.key]; check != nil {
			if err := check(l.value); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", at, l.key, err)
			}
		}
		if overridden(l.key) {
			continue
		}
		if err := fs.Set(l.key, l.value); err != nil {
			return nil, fmt.Errorf("%s: %s: invalid value %q: %w", at, l.key, l.value, err)
		}
		origin[l.key] = at
	}
	return origin, nil
}

// readFile reads and parses the config file, refusing one that someone
// other than root and this process's user could have written, and one
// that holds a secret and is readable by group or others.
func readFile(path string) ([]fileLine, error) {
	// O_NONBLOCK: a FIFO in its place would block the open until a writer
	// came; it is refused below as not a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("config file %s: not a regular file", path)
	}
	mode := fi.Mode().Perm()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("config file %s: owned by uid %d, neither root nor this process's user: whoever owns it chooses what the daemon runs", path, st.Uid)
	}
	if mode&0o022 != 0 {
		return nil, fmt.Errorf("config file %s: writable by group or others (mode %04o): whoever can write it chooses what the daemon runs; chmod 600 %s", path, mode, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("config file %s: larger than %d bytes", path, maxFileBytes)
	}
	lines, err := parseFile(path, b)
	if err != nil {
		return nil, err
	}
	if mode&0o044 != 0 {
		for _, l := range lines {
			if secretKeys[l.key] {
				return nil, fmt.Errorf("%s:%d: %s is a secret, and the file is readable by group or others (mode %04o); chmod 600 %s", path, l.n, l.key, mode, path)
			}
		}
	}
	return lines, nil
}

// parseFile splits the file's text into settings.
func parseFile(path string, b []byte) ([]fileLine, error) {
	var out []fileLine
	for i, raw := range bytes.Split(b, []byte("\n")) {
		n := i + 1
		line := strings.TrimSpace(string(raw))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("%s:%d: want key = value", path, n)
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			u, err := strconv.Unquote(v)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %s: bad quoted value: %w", path, n, k, err)
			}
			v = u
		}
		out = append(out, fileLine{n: n, key: k, value: v})
	}
	return out, nil
}

// invalid is a validation failure and the flags it is about.
type invalid struct {
	flags []string
	err   error
}

func (e *invalid) Error() string { return e.err.Error() }
func (e *invalid) Unwrap() error { return e.err }

// bad is an invalid configuration about flags.
func bad(flags []string, format string, a ...any) error {
	return &invalid{flags: flags, err: fmt.Errorf(format, a...)}
}

// withOrigin adds to a validation error where the config file set the
// flags it is about.
func withOrigin(err error, origin map[string]string) error {
	var inv *invalid
	if !errors.As(err, &inv) {
		return err
	}
	var at []string
	for _, f := range inv.flags {
		if o, ok := origin[f]; ok {
			at = append(at, f+" at "+o)
		}
	}
	if len(at) == 0 {
		return err
	}
	return fmt.Errorf("%w (set in the config file: %s)", err, strings.Join(at, ", "))
}
