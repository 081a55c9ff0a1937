package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeConfig writes text to a fresh file with mode perm and returns its
// path.
func writeConfig(t *testing.T, perm os.FileMode, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandboxd.conf")
	if err := os.WriteFile(path, []byte(text), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

// TestParse_ConfigFile: every kind of flag from the file; precedence flag >
// env > file > default; comments, blank lines, quotes, repeats of
// api-host; SANDBOXD_CONFIG names the file as --config does.
func TestParse_ConfigFile(t *testing.T) {
	text := `# sandboxd settings
listen = 127.0.0.1:7171
data-dir = /var/lib/sandboxd

   # indented comment
sandbox-network = true
default-timeout = 30m
host-ports = 41000-41009
pool = img:1=3
default-quota = sandboxes=4,cpu=2
api-host = api.example.com
api-host = API.example.org.
e2b-body-dedupe = off
cpu-budget = 8000
node-id = "node a "
log-level = ""
`
	path := writeConfig(t, 0o600, text)
	fromFile := func(d *Daemon) {
		d.Listen, d.DataDir, d.SandboxNetwork, d.DefaultTimeout = "127.0.0.1:7171", "/var/lib/sandboxd", true, 30*time.Minute
		d.HostPortLo, d.HostPortHi = 41000, 41009
		d.Pool = []PoolSize{{Image: "img:1", Size: 3}}
		d.DefaultQuota = Quota{Sandboxes: 4, MilliCPU: 2000}
		d.APIHosts = []string{"api.example.com", "api.example.org"}
		d.E2BBodyDedupe, d.MilliCPU, d.NodeID, d.LogLevel = "off", 8000, "node a ", ""
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want func(*Daemon)
	}{
		{"FileOverDefaults", nil, []string{"--config", path}, fromFile},
		{"ConfigFromEnv", map[string]string{"SANDBOXD_CONFIG": path}, nil, fromFile},
		{"EnvOverFile", map[string]string{"SANDBOXD_LISTEN": "127.0.0.2:1", "SANDBOXD_SANDBOX_NETWORK": "false", "SANDBOXD_API_HOSTS": "x.example.com", "SANDBOXD_DEFAULT_TIMEOUT": "0"},
			[]string{"--config", path}, func(d *Daemon) {
				fromFile(d)
				d.Listen, d.SandboxNetwork, d.APIHosts, d.DefaultTimeout = "127.0.0.2:1", false, []string{"x.example.com"}, 0
				d.TCPHost = "127.0.0.3" // DefaultTCPHost: apart from the API's address
			}},
		{"EmptyEnvIsUnset", map[string]string{"SANDBOXD_LISTEN": ""}, []string{"--config", path}, fromFile},
		{"FlagOverEnvAndFile", map[string]string{"SANDBOXD_LISTEN": "127.0.0.2:1"},
			[]string{"--config", path, "--listen", "127.0.0.3:2", "--sandbox-network=false", "--cpu-budget", "1000", "--api-host", "y.example.com", "--host-ports", "42000-42000"}, func(d *Daemon) {
				fromFile(d)
				d.Listen, d.SandboxNetwork, d.MilliCPU, d.APIHosts = "127.0.0.3:2", false, 1000, []string{"y.example.com"}
				d.HostPortLo, d.HostPortHi = 42000, 42000
			}},
		{"FlagBeforeConfigStillWins", nil, []string{"--listen", "127.0.0.3:2", "--config", path}, func(d *Daemon) { fromFile(d); d.Listen = "127.0.0.3:2" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := wantDefaults(t)
			tc.want(&want)
			got, err := Parse(tc.args, envOf(tc.env))
			if err != nil {
				t.Fatalf("Parse(%q, %v) = %v", tc.args, tc.env, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Parse(%q, %v) (-want +got):\n%s", tc.args, tc.env, diff)
			}
		})
	}
}

// TestParse_ConfigFileRejects: an unknown key, a bad value, a bad line, an
// unreadable or unsafe file: each is refused with the file (and the line
// when it is about one).
func TestParse_ConfigFileRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		perm os.FileMode
		text string
		want string // with FILE for the path
	}{
		{"UnknownKey", 0o600, "listen = 127.0.0.1:1\nno-such-flag = 1\n", `FILE:2: unknown key "no-such-flag"`},
		{"DashedKey", 0o600, "--listen = 127.0.0.1:1\n", `FILE:1: unknown key "--listen"`},
		{"NoEquals", 0o600, "# x\nsandbox-network\n", "FILE:2: want key = value"},
		{"EmptyKey", 0o600, "= 1\n", "FILE:1: want key = value"},
		{"BadDuration", 0o600, "\n\ndefault-timeout = soon\n", `FILE:3: default-timeout: invalid value "soon": parse error`},
		{"BadBool", 0o600, "sandbox-network = yes please\n", `FILE:1: sandbox-network: invalid value "yes please": parse error`},
		{"BadInt", 0o600, "cpu-budget = lots\n", `FILE:1: cpu-budget: invalid value "lots": parse error`},
		{"BadRange", 0o600, "host-ports = 80-90\n", `FILE:1: host-ports: range "80-90": want 1024 <= lo <= hi <= 65535`},
		{"BadPool", 0o600, "pool = img\n", `FILE:1: pool: "img": want IMAGE=N with N from 0 to 64`},
		{"BadQuota", 0o600, "default-quota = gpus=1\n", `FILE:1: default-quota: quota "gpus=1": keys are sandboxes, cpu, memory_mb and disk_mb`},
		{"BadAPIHost", 0o600, "api-host = not a host\n", `FILE:1: api-host: "not a host" is not a host name`},
		{"BadQuote", 0o600, "node-id = \"a\\q\"\n", `FILE:1: node-id: bad quoted value: invalid syntax`},
		{"Duplicate", 0o600, "listen = 127.0.0.1:1\n\nlisten = 127.0.0.1:2\n", "FILE:3: listen is set again (first on line 1)"},
		{"ConfigInConfig", 0o600, "config = /etc/other.conf\n", "FILE:1: config: a config file cannot name another"},
		{"PublicListen", 0o600, "# the API\nlisten = 0.0.0.0:7070\n", `--listen "0.0.0.0:7070": only loopback addresses are allowed without --allow-public (set in the config file: listen at FILE:2)`},
		{"CrossField", 0o600, "disk-max-mb = 1024\ndisk-default-mb = 2048\n", "--disk-default-mb 2048, --disk-max-mb 1024: each at least 16, the default at most the maximum (set in the config file: disk-default-mb at FILE:2, disk-max-mb at FILE:1)"},
		{"DefaultTimeoutTooLong", 0o600, "default-timeout = 200h\n", "--default-timeout 200h0m0s: from 0 (none) to 168h0m0s (set in the config file: default-timeout at FILE:1)"},
		{"GroupWritable", 0o620, "listen = 127.0.0.1:1\n", "config file FILE: writable by group or others (mode 0620): whoever can write it chooses what the daemon runs; chmod 600 FILE"},
		{"WorldWritable", 0o602, "", "config file FILE: writable by group or others (mode 0602): whoever can write it chooses what the daemon runs; chmod 600 FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.perm, tc.text)
			want := strings.ReplaceAll(tc.want, "FILE", path)
			_, err := Parse([]string{"--config", path}, envOf(nil))
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Parse(--config) = %v,\nwant %q", err, want)
			}
		})
	}
}

func TestParse_ConfigFileUnreadable(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.conf")
	if _, err := Parse([]string{"--config", missing}, envOf(nil)); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: Parse = %v, want a not-exist error naming %s", err, missing)
	}
	if _, err := Parse([]string{"--config", dir}, envOf(nil)); err == nil || err.Error() != fmt.Sprintf("config file %s: not a regular file", dir) {
		t.Errorf("directory: Parse = %v", err)
	}
	fifo := filepath.Join(dir, "fifo.conf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse([]string{"--config", fifo}, envOf(nil)); err == nil || err.Error() != fmt.Sprintf("config file %s: not a regular file", fifo) {
		t.Errorf("a FIFO (its open must not wait for a writer): Parse = %v", err)
	}
	big := writeConfig(t, 0o600, "# "+strings.Repeat("x", maxFileBytes)+"\n")
	if _, err := Parse([]string{"--config", big}, envOf(nil)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("huge file: Parse = %v", err)
	}
}

// TestParse_ConfigFileSecrets: a file that sets a secret key is refused
// when group or others may read it, and read when only its owner may.
func TestParse_ConfigFileSecrets(t *testing.T) {
	secretKeys["node-id"] = true // stands for a flag that takes a secret
	t.Cleanup(func() { delete(secretKeys, "node-id") })
	text := "listen = 127.0.0.1:1\nnode-id = s3cret\n"
	for _, perm := range []os.FileMode{0o640, 0o604, 0o644} {
		path := writeConfig(t, perm, text)
		want := fmt.Sprintf("%s:2: node-id is a secret, and the file is readable by group or others (mode %04o); chmod 600 %s", path, perm, path)
		if _, err := Parse([]string{"--config", path}, envOf(nil)); err == nil || err.Error() != want {
			t.Errorf("mode %04o: Parse = %v, want %q", perm, err, want)
		}
	}
	got, err := Parse([]string{"--config", writeConfig(t, 0o600, text)}, envOf(nil))
	if err != nil || got.NodeID != "s3cret" {
		t.Errorf("mode 0600: Parse = %+v, %v; want node-id read", got.NodeID, err)
	}
	// Without a secret, a file others may read is fine.
	delete(secretKeys, "node-id")
	if _, err := Parse([]string{"--config", writeConfig(t, 0o644, text)}, envOf(nil)); err != nil {
		t.Errorf("no secret, mode 0644: Parse = %v", err)
	}
}

// TestFlagEnv_Complete: flagEnv names exactly the variables Parse reads
// (but SANDBOXD_CONFIG), each for a flag that exists and whose help names
// it; so a file's setting never wins over a variable that is set.
func TestFlagEnv_Complete(t *testing.T) {
	read := map[string]bool{}
	if _, err := Parse(nil, func(k string) (string, bool) { read[k] = true; return "", false }); err != nil {
		t.Fatal(err)
	}
	delete(read, "SANDBOXD_CONFIG")
	inMap := map[string]bool{}
	for _, v := range flagEnv {
		inMap[v] = true
	}
	if diff := cmp.Diff(sorted(inMap), sorted(read)); diff != "" {
		t.Errorf("variables in flagEnv (-) vs read by Parse (+):\n%s", diff)
	}
	help := helpText(t)
	for name, env := range flagEnv {
		m := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `\b.*\n\s+(.*)$`).FindStringSubmatch(help)
		if m == nil {
			t.Errorf("flagEnv names flag %q, which does not exist", name)
			continue
		}
		if mentioned := regexp.MustCompile(`SANDBOXD_[A-Z0-9_]+`).FindString(m[1]); mentioned != "" && mentioned != env {
			t.Errorf("flag %s: help names %s, flagEnv %s", name, mentioned, env)
		}
	}
}

// helpText is the daemon's --help output.
func helpText(t *testing.T) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	_, perr := Parse([]string{"--help"}, envOf(nil))
	os.Stderr = old
	if !errors.Is(perr, flag.ErrHelp) {
		t.Fatalf("--help: %v", perr)
	}
	w.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
