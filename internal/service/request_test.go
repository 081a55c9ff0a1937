package service

import (
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// normalizer is a Service with only what normalize reads.
func normalizer(allowNetwork bool) *Service {
	return &Service{cfg: Config{DefaultImage: "sandboxd/base:bookworm", AllowNetwork: allowNetwork}}
}

// nVars returns n distinct valid variables (or tag keys) K0..K<n-1>.
func nVars(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("K%d", i)] = "v"
	}
	return m
}

func nMounts(n int) []Mount {
	ms := make([]Mount, n)
	for i := range ms {
		ms[i] = Mount{Volume: fmt.Sprintf("v%d", i), Path: fmt.Sprintf("/mnt/%d", i)}
	}
	return ms
}

func TestNormalize_Defaults(t *testing.T) {
	got, err := normalizer(false).normalize(CreateRequest{Owner: "alice"})
	if err != nil {
		t.Fatalf("normalize(empty) = %v", err)
	}
	want := CreateRequest{
		Owner: "alice", Image: "sandboxd/base:bookworm",
		MilliCPU: defaultMilliCPU, MemoryMB: defaultMemoryMB, DiskMB: DefaultDiskMB, Runtime: "docker",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("normalize(empty) (-want +got):\n%s", diff)
	}
	if want.MilliCPU != 1000 || want.MemoryMB != 512 {
		t.Errorf("defaults are %d mCPU, %d MiB; the API documents 1 core and 512 MiB", want.MilliCPU, want.MemoryMB)
	}
}

// TestNormalize_Accepts: requests at the edges of every limit pass
// through unchanged but for the defaults.
func TestNormalize_Accepts(t *testing.T) {
	base := func() CreateRequest {
		return CreateRequest{Image: "img", MilliCPU: 1000, MemoryMB: 512, DiskMB: 1024, Runtime: "docker"}
	}
	for _, tc := range []struct {
		name         string
		allowNetwork bool
		mutate       func(*CreateRequest)
	}{
		{"ExplicitEverything", false, func(r *CreateRequest) {
			r.Name, r.Env, r.SecretEnv = "web-1", map[string]string{"A": "1"}, map[string]string{"TOKEN": "s"}
			r.Tags, r.Timeout = map[string]string{"team/x.y_z-1": "v"}, time.Hour
			r.Mounts = []Mount{{Volume: "data", Path: "/data", ReadOnly: true}}
			r.Annotations = map[string]string{"e2b.template": "base"}
		}},
		{"NameOneChar", false, func(r *CreateRequest) { r.Name = "a" }},
		{"Name63", false, func(r *CreateRequest) { r.Name = strings.Repeat("a", 63) }},
		{"NameDigitsAndHyphens", false, func(r *CreateRequest) { r.Name = "0-9-x" }},
		{"NameSbWithoutHyphen", false, func(r *CreateRequest) { r.Name = "sbx" }},
		{"ImageMaxLen", false, func(r *CreateRequest) { r.Image = "registry.local/" + strings.Repeat("i", maxImageLen-15) }},
		{"ImageID", false, func(r *CreateRequest) { r.Image = strings.Repeat("ab", 32) }},
		{"ImageDigestOnly", false, func(r *CreateRequest) { r.Image = "sha256:" + strings.Repeat("0", 64) }},
		{"MountBesideReserved", false, func(r *CreateRequest) {
			r.Mounts = []Mount{{Volume: "a", Path: "/opt/app"}, {Volume: "b", Path: "/run2"}, {Volume: "c", Path: "/proceeds"}}
		}},
		{"ImageWithRegistryAndDigest", false, func(r *CreateRequest) { r.Image = "registry.local:5000/a/b@sha256:" + strings.Repeat("0", 64) }},
		{"CPUMin", false, func(r *CreateRequest) { r.MilliCPU = 100 }},
		{"CPUMax", false, func(r *CreateRequest) { r.MilliCPU = 16_000 }},
		{"MemoryMin", false, func(r *CreateRequest) { r.MemoryMB = 64 }},
		{"MemoryMax", false, func(r *CreateRequest) { r.MemoryMB = 64 * 1024 }},
		{"DiskMin", false, func(r *CreateRequest) { r.DiskMB = MinDiskMB }},
		{"DiskMax", false, func(r *CreateRequest) { r.DiskMB = DefaultDiskMaxMB }},
		{"TimeoutZero", false, func(r *CreateRequest) { r.Timeout = 0 }},
		{"TimeoutMax", false, func(r *CreateRequest) { r.Timeout = 7 * 24 * time.Hour }},
		{"EnvMaxCount", false, func(r *CreateRequest) { r.Env = nVars(256) }},
		{"EnvMaxValue", false, func(r *CreateRequest) { r.Env = map[string]string{"A": strings.Repeat("x", 4096)} }},
		{"EnvEmptyValue", false, func(r *CreateRequest) { r.Env = map[string]string{"_": ""} }},
		{"EnvLowercaseSandboxdPrefix", false, func(r *CreateRequest) { r.Env = map[string]string{"sandboxd_x": "1"} }},
		{"TagsMaxCount", false, func(r *CreateRequest) { r.Tags = nVars(64) }},
		{"TagKey63", false, func(r *CreateRequest) { r.Tags = map[string]string{strings.Repeat("k", 63): ""} }},
		{"MountsMax", false, func(r *CreateRequest) { r.Mounts = nMounts(8) }},
		{"SameVolumeTwoPaths", false, func(r *CreateRequest) {
			r.Mounts = []Mount{{Volume: "v", Path: "/a"}, {Volume: "v", Path: "/b"}}
		}},
		{"NetworkAllowed", true, func(r *CreateRequest) { r.Network, r.NetworkPolicy = true, netpolicy.Policy{Mode: netpolicy.ModeOpen} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := base()
			tc.mutate(&want)
			got, err := normalizer(tc.allowNetwork).normalize(want)
			if err != nil {
				t.Fatalf("normalize = %v, want it accepted", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("normalize changed an explicit request (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNormalize_Rejects: each bad field is refused with a FieldError
// naming that field (the API returns it as the error's field).
func TestNormalize_Rejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*CreateRequest)
		field  string
	}{
		{"ImageSpace", func(r *CreateRequest) { r.Image = "busybox latest" }, "image"},
		{"ImageTab", func(r *CreateRequest) { r.Image = "busybox\tx" }, "image"},
		{"ImageNewline", func(r *CreateRequest) { r.Image = "busybox\n" }, "image"},
		{"ImageNUL", func(r *CreateRequest) { r.Image = "busybox\x00" }, "image"},
		{"ImageTooLong", func(r *CreateRequest) { r.Image = strings.Repeat("i", maxImageLen+1) }, "image"},
		{"ImagePathTraversal", func(r *CreateRequest) { r.Image = "../../etc/passwd" }, "image"},
		{"ImageUppercase", func(r *CreateRequest) { r.Image = "Busybox" }, "image"},
		{"ImageEmptyTag", func(r *CreateRequest) { r.Image = "busybox:" }, "image"},

		{"NameUppercase", func(r *CreateRequest) { r.Name = "Web" }, "name"},
		{"NameUnderscore", func(r *CreateRequest) { r.Name = "my_box" }, "name"},
		{"NameDot", func(r *CreateRequest) { r.Name = "a.b" }, "name"},
		{"NameLeadingHyphen", func(r *CreateRequest) { r.Name = "-a" }, "name"},
		{"NameTrailingHyphen", func(r *CreateRequest) { r.Name = "a-" }, "name"},
		{"NameTooLong", func(r *CreateRequest) { r.Name = strings.Repeat("a", 64) }, "name"},
		{"NameSpace", func(r *CreateRequest) { r.Name = "a b" }, "name"},
		{"NameReservedPrefix", func(r *CreateRequest) { r.Name = "sb-0123456789abcdef" }, "name"},
		{"NameReservedPrefixShort", func(r *CreateRequest) { r.Name = "sb-x" }, "name"},

		{"CPUBelowMin", func(r *CreateRequest) { r.MilliCPU = 99 }, "cpu"},
		{"CPUAboveMax", func(r *CreateRequest) { r.MilliCPU = 16_001 }, "cpu"},
		{"CPUNegative", func(r *CreateRequest) { r.MilliCPU = -1000 }, "cpu"},
		{"MemoryBelowMin", func(r *CreateRequest) { r.MemoryMB = 63 }, "memory_mb"},
		{"MemoryAboveMax", func(r *CreateRequest) { r.MemoryMB = 64*1024 + 1 }, "memory_mb"},
		{"MemoryNegative", func(r *CreateRequest) { r.MemoryMB = -512 }, "memory_mb"},
		{"DiskBelowMin", func(r *CreateRequest) { r.DiskMB = MinDiskMB - 1 }, "disk_mb"},
		{"DiskAboveMax", func(r *CreateRequest) { r.DiskMB = DefaultDiskMaxMB + 1 }, "disk_mb"},
		{"DiskNegative", func(r *CreateRequest) { r.DiskMB = -1 }, "disk_mb"},

		{"TimeoutNegative", func(r *CreateRequest) { r.Timeout = -time.Second }, "timeout_s"},
		{"TimeoutAboveMax", func(r *CreateRequest) { r.Timeout = 7*24*time.Hour + time.Second }, "timeout_s"},

		{"EnvKeyEmpty", func(r *CreateRequest) { r.Env = map[string]string{"": "x"} }, "env"},
		{"EnvKeyLeadingDigit", func(r *CreateRequest) { r.Env = map[string]string{"1A": "x"} }, "env"},
		{"EnvKeyHyphen", func(r *CreateRequest) { r.Env = map[string]string{"A-B": "x"} }, "env"},
		{"EnvKeyEquals", func(r *CreateRequest) { r.Env = map[string]string{"A=B": "x"} }, "env"},
		{"EnvKeyReservedPrefix", func(r *CreateRequest) { r.Env = map[string]string{"SANDBOXD_AGENT_TOKEN": "x"} }, "env"},
		{"EnvValueNUL", func(r *CreateRequest) { r.Env = map[string]string{"A": "x\x00y"} }, "env"},
		{"EnvValueTooLong", func(r *CreateRequest) { r.Env = map[string]string{"A": strings.Repeat("x", 4097)} }, "env"},
		{"EnvTooMany", func(r *CreateRequest) { r.Env = nVars(257) }, "env"},
		{"SecretEnvBadKey", func(r *CreateRequest) { r.SecretEnv = map[string]string{"A B": "x"} }, "secret_env"},
		{"SecretEnvReservedPrefix", func(r *CreateRequest) { r.SecretEnv = map[string]string{"SANDBOXD_X": "x"} }, "secret_env"},
		{"SecretEnvAlsoInEnv", func(r *CreateRequest) {
			r.Env, r.SecretEnv = map[string]string{"TOKEN": "a"}, map[string]string{"TOKEN": "b"}
		}, "secret_env"},

		{"TagsTooMany", func(r *CreateRequest) { r.Tags = nVars(65) }, "tags"},
		{"TagKeyEmpty", func(r *CreateRequest) { r.Tags = map[string]string{"": "v"} }, "tags"},
		{"TagKeyLeadingDot", func(r *CreateRequest) { r.Tags = map[string]string{".a": "v"} }, "tags"},
		{"TagKeySpace", func(r *CreateRequest) { r.Tags = map[string]string{"a b": "v"} }, "tags"},
		{"TagKeyTooLong", func(r *CreateRequest) { r.Tags = map[string]string{strings.Repeat("k", 64): "v"} }, "tags"},
		{"TagValueTooLong", func(r *CreateRequest) { r.Tags = map[string]string{"k": strings.Repeat("v", 4097)} }, "tags"},
		{"TagValueNUL", func(r *CreateRequest) { r.Tags = map[string]string{"k": "\x00"} }, "tags"},

		{"NetworkNotAllowed", func(r *CreateRequest) { r.Network = true }, "network"},
		{"RuntimeUnknown", func(r *CreateRequest) { r.Runtime = "firecracker" }, "runtime"},
		{"RuntimeWrongCase", func(r *CreateRequest) { r.Runtime = "Docker" }, "runtime"},
		{"RuntimeGVisorUnavailable", func(r *CreateRequest) { r.Runtime = "gvisor" }, "runtime"},

		{"MountsTooMany", func(r *CreateRequest) { r.Mounts = nMounts(9) }, "mounts"},
		{"MountVolumeEmpty", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "", Path: "/data"}} }, "mounts"},
		{"MountVolumeUppercase", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "Data", Path: "/data"}} }, "mounts"},
		{"MountVolumePath", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "../etc", Path: "/data"}} }, "mounts"},
		{"MountPathRelative", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "data"}} }, "mounts"},
		{"MountPathRoot", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/"}} }, "mounts"},
		{"MountPathEmpty", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: ""}} }, "mounts"},
		{"MountPathDotDot", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/a/../etc"}} }, "mounts"},
		{"MountPathTrailingSlash", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/data/"}} }, "mounts"},
		{"MountPathNUL", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/da\x00ta"}} }, "mounts"},
		{"MountAgentSocketDir", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/run/sandboxd"}} }, "mounts"},
		{"MountUnderAgentSocketDir", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/run/sandboxd/x"}} }, "mounts"},
		{"MountAboveAgentSocketDir", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/run"}} }, "mounts"},
		{"MountAgentBinary", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/opt/sandboxd/toolboxd"}} }, "mounts"},
		{"MountAboveAgentBinary", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/opt"}} }, "mounts"},
		{"MountProc", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/proc"}} }, "mounts"},
		{"MountProcSys", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/proc/sys"}} }, "mounts"},
		{"MountSysFsCgroup", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/sys/fs/cgroup"}} }, "mounts"},
		{"MountDevShm", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/dev/shm"}} }, "mounts"},
		{"MountEtcHosts", func(r *CreateRequest) { r.Mounts = []Mount{{Volume: "v", Path: "/etc/hosts"}} }, "mounts"},
		{"MountPathTwice", func(r *CreateRequest) {
			r.Mounts = []Mount{{Volume: "a", Path: "/data"}, {Volume: "b", Path: "/data"}}
		}, "mounts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := CreateRequest{Image: "img"}
			tc.mutate(&req)
			_, err := normalizer(false).normalize(req)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("normalize = %v, want a *FieldError for %q", err, tc.field)
			}
			if fe.Field != tc.field || fe.Reason == "" {
				t.Errorf("FieldError = {Field: %q, Reason: %q}, want field %q with a reason", fe.Field, fe.Reason, tc.field)
			}
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("errors.Is(%v, ErrInvalidArgument) = false", err)
			}
		})
	}
}

// TestNormalize_ReasonsNameTheLimit: the reason tells the caller the
// bound it crossed, so a user can fix the request without reading code.
func TestNormalize_ReasonsNameTheLimit(t *testing.T) {
	for _, tc := range []struct {
		req  CreateRequest
		want string
	}{
		{CreateRequest{MilliCPU: 50}, "cpu: must be between 0.1 and 16 cores"},
		{CreateRequest{MemoryMB: 1}, "memory_mb: must be between 64 and 65536"},
		{CreateRequest{Timeout: -1}, "timeout_s: must be between 0 and 604800 seconds"},
		{CreateRequest{Runtime: "oci"}, `runtime: unknown runtime "oci" (available: docker)`},
		{CreateRequest{Env: map[string]string{"SANDBOXD_X": ""}}, `env: "SANDBOXD_X": the SANDBOXD_ prefix is reserved`},
		{CreateRequest{Name: "Bad"}, `name: "Bad" is not a DNS label (lowercase letters, digits and '-', at most 63)`},
	} {
		_, err := normalizer(false).normalize(tc.req)
		if err == nil || err.Error() != tc.want {
			t.Errorf("normalize(%+v) = %v, want %q", tc.req, err, tc.want)
		}
	}
}

// TestNormalize_DoesNotAliasCaller: the caller's request is not changed
// (normalize takes a copy; defaults land in the result only).
func TestNormalize_DoesNotAliasCaller(t *testing.T) {
	req := CreateRequest{Env: map[string]string{"A": "1"}}
	if _, err := normalizer(false).normalize(req); err != nil {
		t.Fatal(err)
	}
	if req.Image != "" || req.MilliCPU != 0 || req.Runtime != "" || len(req.Env) != 1 {
		t.Errorf("caller's request changed: %+v", req)
	}
}

// TestNormalize_CPUAtMostTheHosts: the engine refuses a CPU limit above
// the host's CPU count, so normalize does first, naming the bound.
func TestNormalize_CPUAtMostTheHosts(t *testing.T) {
	s := normalizer(false)
	s.cfg.HostMilliCPU = 2000
	if _, err := s.normalize(CreateRequest{MilliCPU: 2000}); err != nil {
		t.Errorf("cpu 2 on a 2-core host: %v", err)
	}
	_, err := s.normalize(CreateRequest{MilliCPU: 2001})
	if want := "cpu: at most 2 cores on this host"; err == nil || err.Error() != want {
		t.Errorf("cpu 2.001 on a 2-core host: %v, want %q", err, want)
	}
}
