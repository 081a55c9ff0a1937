package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse_RegistryAllowAndImageCap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       map[string]string
		args      []string
		wantAllow []string
		wantMB    int64
	}{
		{"Defaults", nil, nil, []string{"docker.io"}, 10240},
		{"Any", nil, []string{"--registry-allow", "*"}, nil, 10240},
		{"Flags", nil, []string{"--registry-allow", " Docker.io, index.docker.io,127.0.0.1:5000,registry.example.com,", "--image-max-mb", "512"},
			[]string{"docker.io", "127.0.0.1:5000", "registry.example.com"}, 512},
		{"Env", map[string]string{"SANDBOXD_REGISTRY_ALLOW": "localhost:5000", "SANDBOXD_IMAGE_MAX_MB": "64"}, nil, []string{"localhost:5000"}, 64},
		{"FlagOverEnv", map[string]string{"SANDBOXD_REGISTRY_ALLOW": "localhost:5000"}, []string{"--registry-allow", "127.0.0.1"}, []string{"127.0.0.1"}, 10240},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse(tc.args, envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantAllow, d.RegistryAllow); diff != "" {
				t.Errorf("RegistryAllow (-want +got):\n%s", diff)
			}
			if d.ImageMaxMB != tc.wantMB {
				t.Errorf("ImageMaxMB = %d, want %d", d.ImageMaxMB, tc.wantMB)
			}
		})
	}
}

func TestParse_RegistryAllowRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		// "team" alone parses as a Docker Hub namespace, not a host.
		{"NotAHost", []string{"--registry-allow", "team"}, `--registry-allow: "team" is not a registry host`},
		{"WithPath", []string{"--registry-allow", "registry.example.com/team"}, `--registry-allow: "registry.example.com/team" is not a registry host`},
		{"NegativeCap", []string{"--image-max-mb", "-1"}, "--image-max-mb -1: must be zero (no cap) or positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.args, envOf(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
