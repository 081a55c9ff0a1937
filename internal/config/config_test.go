package config

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// envOf is an environment lookup over m only (never the process's).
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// wantDefaults is the configuration of a bare `sandboxd` with no
// environment.
func wantDefaults(t *testing.T) Daemon {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Daemon{
		Listen:             "127.0.0.1:7070",
		DataDir:            ".sandboxd",
		AgentBinary:        filepath.Join(filepath.Dir(exe), "toolboxd"),
		Domain:             "localhost",
		TLSListen:          "127.0.0.1:7443",
		TCPHost:            "127.0.0.2",
		DefaultImage:       "sandboxd/base:bookworm",
		DefaultRuntime:     "docker",
		Engine:             "oci",
		DefaultTimeout:     time.Hour,
		HostPortLo:         40000,
		HostPortHi:         40999,
		MilliCPU:           int64(runtime.NumCPU()) * 4000,
		MemoryMB:           16 * 1024,
		E2BBodyDedupe:      "undelivered",
		E2BReplayWindow:    10 * time.Second,
		PauseMax:           10 * time.Minute,
		TemplateStorageMB:  10240,
		DiskDefaultMB:      10240,
		SandboxIOMBps:      100,
		SandboxIOIOPS:      2000,
		DiskMaxMB:          102400,
		VolumeSizeMB:       10240,
		RegistryAllow:      []string{"docker.io"},
		ImageMaxMB:         10240,
		PausedMemoryFloor:  10,
		SandboxNetworkName: "sandboxd0",
		Pool:               []PoolSize{{Image: "sandboxd/base:bookworm", Size: 2}},
		IdleTimeout:        60 * time.Second,
		RequestTimeout:     5 * time.Minute,
		ReconcileEvery:     30 * time.Second,
		DomainCheckEvery:   30 * time.Second,
		LogLevel:           "info",
	}
}

func TestParse_Defaults(t *testing.T) {
	got, err := Parse(nil, envOf(nil))
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	if diff := cmp.Diff(wantDefaults(t), got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// TestParse_Sources: each setting from the environment and from its flag;
// a flag wins over the environment, an empty variable means unset.
func TestParse_Sources(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want func(*Daemon)
	}{
		{"ListenEnv", map[string]string{"SANDBOXD_LISTEN": "127.0.0.2:8080"}, nil, func(d *Daemon) { d.Listen, d.TCPHost = "127.0.0.2:8080", "127.0.0.3" }},
		{"ListenFlagWins", map[string]string{"SANDBOXD_LISTEN": "127.0.0.2:8080"}, []string{"--listen", "localhost:9000"}, func(d *Daemon) { d.Listen = "localhost:9000" }},
		{"ListenIPv6Loopback", nil, []string{"--listen=[::1]:7070"}, func(d *Daemon) { d.Listen = "[::1]:7070" }},
		{"ListenPublicAllowed", nil, []string{"--allow-public", "--listen", "10.0.0.1:7070", "--https-listen", "api.example.com:443"}, func(d *Daemon) {
			d.AllowPublic, d.Listen, d.HTTPSListen = true, "10.0.0.1:7070", "api.example.com:443"
		}},
		{"TCPHostPublic", nil, []string{"--allow-public", "--tcp-host", "sbx1.example.net"}, func(d *Daemon) { d.AllowPublic, d.TCPHost = true, "sbx1.example.net" }},
		{"HTTPSCertFlags", nil, []string{"--https-listen", "127.0.0.1:7443", "--https-cert", "/etc/sandboxd/api.crt", "--https-key", "/etc/sandboxd/api.key"}, func(d *Daemon) {
			d.HTTPSListen, d.HTTPSCert, d.HTTPSKey = "127.0.0.1:7443", "/etc/sandboxd/api.crt", "/etc/sandboxd/api.key"
		}},
		{"ListenPublicAllowedEnv", map[string]string{"SANDBOXD_ALLOW_PUBLIC": "true", "SANDBOXD_LISTEN": "node1.example.com:7070"}, nil, func(d *Daemon) {
			d.AllowPublic, d.Listen = true, "node1.example.com:7070"
		}},
		{"EmptyEnvIsUnset", map[string]string{"SANDBOXD_LISTEN": "", "SANDBOXD_DATA_DIR": ""}, nil, func(*Daemon) {}},
		{"DataDirEnv", map[string]string{"SANDBOXD_DATA_DIR": "/var/lib/sandboxd"}, nil, func(d *Daemon) { d.DataDir = "/var/lib/sandboxd" }},
		{"DataDirFlag", nil, []string{"-data-dir", "/srv/sbx"}, func(d *Daemon) { d.DataDir = "/srv/sbx" }},
		{"AgentBinaryEnv", map[string]string{"SANDBOXD_AGENT_BINARY": "/opt/toolboxd"}, nil, func(d *Daemon) { d.AgentBinary = "/opt/toolboxd" }},
		{"AgentBinaryFlag", nil, []string{"--agent-binary", "/x/toolboxd"}, func(d *Daemon) { d.AgentBinary = "/x/toolboxd" }},
		{"NodeIDEnv", map[string]string{"SANDBOXD_NODE_ID": "node-a"}, nil, func(d *Daemon) { d.NodeID = "node-a" }},
		{"NodeIDFlag", map[string]string{"SANDBOXD_NODE_ID": "node-a"}, []string{"--node-id", "node-b"}, func(d *Daemon) { d.NodeID = "node-b" }},
		{"DomainEnv", map[string]string{"SANDBOXD_DOMAIN": "sbx.example.com"}, nil, func(d *Daemon) { d.Domain = "sbx.example.com" }},
		{"TLSListenEnv", map[string]string{"SANDBOXD_TLS_LISTEN": "127.0.0.1:9443"}, nil, func(d *Daemon) { d.TLSListen = "127.0.0.1:9443" }},
		{"HTTPSListenEnv", map[string]string{"SANDBOXD_HTTPS_LISTEN": "127.0.0.1:7443"}, nil, func(d *Daemon) { d.HTTPSListen = "127.0.0.1:7443" }},
		{"HTTPSListenFlagWithACME", nil, []string{"--https-listen", "localhost:443", "--acme-email", "ops@example.com"}, func(d *Daemon) {
			d.HTTPSListen, d.ACMEEmail = "localhost:443", "ops@example.com"
		}},
		{"DefaultImageEnv", map[string]string{"SANDBOXD_DEFAULT_IMAGE": "sandboxd/busybox:latest"}, nil, func(d *Daemon) {
			d.DefaultImage, d.Pool = "sandboxd/busybox:latest", []PoolSize{{Image: "sandboxd/busybox:latest", Size: 2}}
		}},
		{"DefaultImageFlag", nil, []string{"--default-image", "img:1"}, func(d *Daemon) { d.DefaultImage, d.Pool = "img:1", []PoolSize{{Image: "img:1", Size: 2}} }},
		{"PoolNone", nil, []string{"--pool", "none"}, func(d *Daemon) { d.Pool = nil }},
		{"PoolEnv", map[string]string{"SANDBOXD_POOL": "a:1=3, b=0"}, nil, func(d *Daemon) { d.Pool = []PoolSize{{Image: "a:1", Size: 3}, {Image: "b", Size: 0}} }},
		{"PoolFlagWins", map[string]string{"SANDBOXD_POOL": "a=3"}, []string{"--pool", "b=1"}, func(d *Daemon) { d.Pool = []PoolSize{{Image: "b", Size: 1}} }},
		{"PoolFollowsDemand", nil, []string{"--pool", "a=2-16,b=3"}, func(d *Daemon) { d.Pool = []PoolSize{{Image: "a", Size: 2, Max: 16}, {Image: "b", Size: 3}} }},
		{"DefaultRuntimeEnv", map[string]string{"SANDBOXD_DEFAULT_RUNTIME": "gvisor"}, nil, func(d *Daemon) { d.DefaultRuntime = "gvisor" }},
		{"HostPortsEnv", map[string]string{"SANDBOXD_HOST_PORTS": "50000-50010"}, nil, func(d *Daemon) { d.HostPortLo, d.HostPortHi = 50000, 50010 }},
		{"HostPortsFlagWins", map[string]string{"SANDBOXD_HOST_PORTS": "50000-50010"}, []string{"--host-ports", "1024-65535"}, func(d *Daemon) {
			d.HostPortLo, d.HostPortHi = 1024, 65535
		}},
		{"HostPortsSinglePort", nil, []string{"--host-ports", "40000-40000"}, func(d *Daemon) { d.HostPortLo, d.HostPortHi = 40000, 40000 }},
		{"Budgets", nil, []string{"--cpu-budget", "2000", "--memory-budget", "1024"}, func(d *Daemon) { d.MilliCPU, d.MemoryMB = 2000, 1024 }},
		{"DefaultQuotaFlag", nil, []string{"--default-quota", "sandboxes=3,cpu=1.5,memory_mb=2048"}, func(d *Daemon) {
			d.DefaultQuota = Quota{Sandboxes: 3, MilliCPU: 1500, MemoryMB: 2048}
		}},
		{"DefaultQuotaEnvPartial", map[string]string{"SANDBOXD_DEFAULT_QUOTA": "sandboxes=2"}, nil, func(d *Daemon) { d.DefaultQuota = Quota{Sandboxes: 2} }},
		{"SandboxNetworkEnv", map[string]string{"SANDBOXD_SANDBOX_NETWORK": "true"}, nil, func(d *Daemon) { d.SandboxNetwork = true }},
		{"SandboxNetworkFlag", nil, []string{"--sandbox-network"}, func(d *Daemon) { d.SandboxNetwork = true }},
		{"SandboxNetworkFlagOffWins", map[string]string{"SANDBOXD_SANDBOX_NETWORK": "true"}, []string{"--sandbox-network=false"}, func(d *Daemon) { d.SandboxNetwork = false }},
		{"DedupeEnvOff", map[string]string{"SANDBOXD_E2B_BODY_DEDUPE": "false"}, nil, func(d *Daemon) { d.E2BBodyDedupe = "off" }},
		{"DedupeFlagOff", nil, []string{"--e2b-body-dedupe=false"}, func(d *Daemon) { d.E2BBodyDedupe = "off" }},
		{"DedupeFlagBareIsTheOldBodyRule", nil, []string{"--e2b-body-dedupe"}, func(d *Daemon) { d.E2BBodyDedupe = "body" }},
		{"DedupeFlagTrueIsTheOldBodyRule", map[string]string{"SANDBOXD_E2B_BODY_DEDUPE": "off"}, []string{"--e2b-body-dedupe=true"}, func(d *Daemon) { d.E2BBodyDedupe = "body" }},
		{"DedupeEnvBody", map[string]string{"SANDBOXD_E2B_BODY_DEDUPE": "body"}, nil, func(d *Daemon) { d.E2BBodyDedupe = "body" }},
		{"DedupeFlagUndelivered", map[string]string{"SANDBOXD_E2B_BODY_DEDUPE": "true"}, []string{"--e2b-body-dedupe=undelivered"}, func(d *Daemon) { d.E2BBodyDedupe = "undelivered" }},
		{"ReplayWindowEnv", map[string]string{"SANDBOXD_E2B_REPLAY_WINDOW": "3s"}, nil, func(d *Daemon) { d.E2BReplayWindow = 3 * time.Second }},
		{"PauseMaxEnv", map[string]string{"SANDBOXD_PAUSE_MAX": "0"}, nil, func(d *Daemon) { d.PauseMax = 0 }},
		{"PauseMaxFlagWins", map[string]string{"SANDBOXD_PAUSE_MAX": "0"}, []string{"--pause-max", "1h"}, func(d *Daemon) { d.PauseMax = time.Hour }},
		{"ReplayWindowFlagWins", map[string]string{"SANDBOXD_E2B_REPLAY_WINDOW": "3s"}, []string{"--e2b-replay-window", "1m"}, func(d *Daemon) { d.E2BReplayWindow = time.Minute }},
		{"ReconcileEvery", nil, []string{"--reconcile-every", "1m30s"}, func(d *Daemon) { d.ReconcileEvery = 90 * time.Second }},
		{"APIHostsEnv", map[string]string{"SANDBOXD_API_HOSTS": "api.example.com, API.Example.Org.:443"}, nil, func(d *Daemon) {
			d.APIHosts = []string{"api.example.com", "api.example.org"}
		}},
		{"APIHostFlagsReplaceEnv", map[string]string{"SANDBOXD_API_HOSTS": "api.example.com"}, []string{"--api-host", "sbx.example.net", "--api-host", "10.0.0.5"}, func(d *Daemon) {
			d.APIHosts = []string{"sbx.example.net", "10.0.0.5"}
		}},
		{"HTTPLimitsEnv", map[string]string{"SANDBOXD_IDLE_TIMEOUT": "2m", "SANDBOXD_REQUEST_TIMEOUT": "30s", "SANDBOXD_MAX_CONNS": "512"}, nil, func(d *Daemon) {
			d.IdleTimeout, d.RequestTimeout, d.MaxConns = 2*time.Minute, 30*time.Second, 512
		}},
		{"HTTPLimitsFlagsWin", map[string]string{"SANDBOXD_MAX_CONNS": "512"}, []string{"--idle-timeout", "1s", "--request-timeout", "1m", "--max-conns", "8"}, func(d *Daemon) {
			d.IdleTimeout, d.RequestTimeout, d.MaxConns = time.Second, time.Minute, 8
		}},
		{"LogLevelEnv", map[string]string{"SANDBOXD_LOG_LEVEL": "debug"}, nil, func(d *Daemon) { d.LogLevel = "debug" }},
		{"LogLevelFlag", map[string]string{"SANDBOXD_LOG_LEVEL": "debug"}, []string{"--log-level", "warn"}, func(d *Daemon) { d.LogLevel = "warn" }},
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

// TestParse_Rejects: a configuration that cannot run is refused at start
// with an error naming the flag.
func TestParse_Rejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"ListenPublic", nil, []string{"--listen", "0.0.0.0:7070"}, `--listen "0.0.0.0:7070": only loopback addresses are allowed without --allow-public`},
		{"ListenAllInterfaces", nil, []string{"--listen", ":7070"}, `--listen ":7070": only loopback addresses are allowed without --allow-public`},
		{"ListenHostName", nil, []string{"--listen", "example.com:7070"}, `--listen "example.com:7070": only loopback addresses are allowed without --allow-public`},
		{"ListenPublicEnv", map[string]string{"SANDBOXD_LISTEN": "10.0.0.1:7070"}, nil, `--listen "10.0.0.1:7070": only loopback addresses are allowed without --allow-public`},
		{"ListenNoPort", nil, []string{"--listen", "127.0.0.1"}, `--listen "127.0.0.1": address 127.0.0.1: missing port in address`},
		{"HTTPSListenPublic", nil, []string{"--https-listen", "0.0.0.0:443"}, `--https-listen "0.0.0.0:443": only loopback addresses are allowed without --allow-public`},
		{"HTTPSListenNoPort", nil, []string{"--https-listen", "localhost"}, `--https-listen "localhost": address localhost: missing port in address`},
		{"PprofListenPublic", nil, []string{"--pprof-listen", "0.0.0.0:6060"}, `--pprof-listen "0.0.0.0:6060": only loopback addresses are allowed (profiles show memory and command lines)`},
		{"PprofListenAllInterfaces", nil, []string{"--pprof-listen", ":6060"}, `--pprof-listen ":6060": only loopback addresses are allowed (profiles show memory and command lines)`},
		// --allow-public opens the API's listeners only: profiles show
		// memory and command lines.
		{"PprofListenPublicAllowed", nil, []string{"--allow-public", "--pprof-listen", "10.0.0.1:6060"}, `--pprof-listen "10.0.0.1:6060": only loopback addresses are allowed (profiles show memory and command lines)`},
		{"TCPHostPublic", nil, []string{"--tcp-host", "10.0.0.1"}, `--tcp-host "10.0.0.1": only loopback addresses are allowed without --allow-public`},
		{"TCPHostWithPort", nil, []string{"--tcp-host", "127.0.0.1:80"}, `--tcp-host "127.0.0.1:80": want an address or a host name, no port`},
		{"TCPHostEvery", nil, []string{"--allow-public", "--tcp-host", "0.0.0.0"}, `--tcp-host "0.0.0.0": TCP exposures' URLs name this host, so it must be one clients reach (an address of this host or its name), not every address`},
		{"HTTPSCertWithoutKey", nil, []string{"--https-listen", "127.0.0.1:7443", "--https-cert", "c.pem"}, "--https-cert and --https-key go together, with --https-listen"},
		{"HTTPSCertWithoutListen", nil, []string{"--https-cert", "c.pem", "--https-key", "k.pem"}, "--https-cert and --https-key go together, with --https-listen"},
		{"ListenPublicAllowedNoPort", nil, []string{"--allow-public", "--listen", "10.0.0.1"}, `--listen "10.0.0.1": address 10.0.0.1: missing port in address`},
		{"DataDirEmpty", nil, []string{"--data-dir", ""}, "--data-dir is required"},
		{"CPUBudgetZero", nil, []string{"--cpu-budget", "0"}, "--cpu-budget and --memory-budget must be positive"},
		{"MemoryBudgetNegative", nil, []string{"--memory-budget", "-1"}, "--cpu-budget and --memory-budget must be positive"},
		{"PoolNoSize", nil, []string{"--pool", "img"}, `--pool: "img": want IMAGE=N with N from 0 to 64`},
		{"PoolTooBig", nil, []string{"--pool", "img=65"}, `--pool: "img=65": want IMAGE=N with N from 0 to 64`},
		{"PoolRangeUpsideDown", nil, []string{"--pool", "img=4-2"}, `--pool: "img=4-2": want IMAGE=MIN-MAX with MIN below MAX, both from 0 to 64`},
		{"PoolRangeTooBig", nil, []string{"--pool", "img=1-65"}, `--pool: "img=1-65": want IMAGE=MIN-MAX with MIN below MAX, both from 0 to 64`},
		{"DefaultRuntimeUnknown", nil, []string{"--default-runtime", "kata"}, `--default-runtime "kata": want docker or gvisor`},
		{"HostPortsEnvBad", map[string]string{"SANDBOXD_HOST_PORTS": "80-90"}, nil, `--host-ports: range "80-90": want 1024 <= lo <= hi <= 65535`},
		{"HostPortsNoDash", nil, []string{"--host-ports", "40000"}, `--host-ports: range "40000": want lo-hi`},
		{"HostPortsReversed", nil, []string{"--host-ports", "41000-40000"}, `--host-ports: range "41000-40000": want 1024 <= lo <= hi <= 65535`},
		{"HostPortsPrivileged", nil, []string{"--host-ports", "80-90"}, `--host-ports: range "80-90": want 1024 <= lo <= hi <= 65535`},
		{"HostPortsTooHigh", nil, []string{"--host-ports", "60000-70000"}, `--host-ports: range "60000-70000": want 1024 <= lo <= hi <= 65535`},
		{"HostPortsNotNumbers", nil, []string{"--host-ports", "a-b"}, `--host-ports: range "a-b": strconv.Atoi: parsing "a": invalid syntax`},
		{"DiskDefaultAboveMax", nil, []string{"--disk-default-mb", "2048", "--disk-max-mb", "1024"}, "--disk-default-mb 2048, --disk-max-mb 1024: each at least 16, the default at most the maximum"},
		{"DiskDefaultTooSmall", nil, []string{"--disk-default-mb", "1"}, "--disk-default-mb 1, --disk-max-mb 102400: each at least 16, the default at most the maximum"},
		{"DefaultQuotaUnknownKey", nil, []string{"--default-quota", "gpus=1"}, `--default-quota: quota "gpus=1": keys are sandboxes, cpu, memory_mb and disk_mb`},
		{"DefaultQuotaNegative", nil, []string{"--default-quota", "cpu=-1"}, `--default-quota: quota "cpu=-1": want a number from 0 (unlimited)`},
		{"DefaultQuotaNoValue", map[string]string{"SANDBOXD_DEFAULT_QUOTA": "sandboxes"}, nil, `--default-quota: quota "sandboxes": want key=value`},
		{"APIHostNotAHost", nil, []string{"--api-host", "not a host"}, `--api-host: "not a host" is not a host name`},
		{"APIHostsEnvBad", map[string]string{"SANDBOXD_API_HOSTS": "ok.example.com,bad_host"}, nil, `--api-host: "bad_host" is not a host name`},
		{"IdleTimeoutZero", nil, []string{"--idle-timeout", "0s"}, "--idle-timeout and --request-timeout must be positive"},
		{"RequestTimeoutEnvBad", map[string]string{"SANDBOXD_REQUEST_TIMEOUT": "soon"}, nil, `SANDBOXD_REQUEST_TIMEOUT: time: invalid duration "soon"`},
		{"MaxConnsNegative", nil, []string{"--max-conns", "-1"}, "--max-conns must be 0 (automatic) or positive"},
		{"MaxConnsEnvBad", map[string]string{"SANDBOXD_MAX_CONNS": "many"}, nil, `SANDBOXD_MAX_CONNS: strconv.Atoi: parsing "many": invalid syntax`},
		{"DedupeUnknown", nil, []string{"--e2b-body-dedupe=maybe"}, `invalid boolean value "maybe" for -e2b-body-dedupe: "maybe": want undelivered, body (or true) or off (or false)`},
		{"DedupeEnvUnknown", map[string]string{"SANDBOXD_E2B_BODY_DEDUPE": "yes"}, nil, `SANDBOXD_E2B_BODY_DEDUPE: "yes": want undelivered, body (or true) or off (or false)`},
		{"ReplayWindowZero", nil, []string{"--e2b-replay-window", "0s"}, "--e2b-replay-window 0s: must be positive"},
		{"UnknownFlag", nil, []string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{"BadDuration", nil, []string{"--reconcile-every", "often"}, `invalid value "often" for flag -reconcile-every: parse error`},
		{"BadInt", nil, []string{"--cpu-budget", "lots"}, `invalid value "lots" for flag -cpu-budget: parse error`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.args, envOf(tc.env))
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse(%q, %v) = %v, want %q", tc.args, tc.env, err, tc.want)
			}
		})
	}
}
