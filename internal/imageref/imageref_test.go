package imageref

import (
	"errors"
	"strings"
	"testing"

	"github.com/distribution/reference"
)

func TestRegistryHost(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io":                "docker.io",
		"index.docker.io":          "docker.io",
		"Docker.IO":                "docker.io",
		"registry-1.docker.io":     "registry-1.docker.io",
		"registry.example.com":     "registry.example.com",
		" Registry.Example.COM ":   "registry.example.com",
		"127.0.0.1:5000":           "127.0.0.1:5000",
		"localhost":                "localhost",
		"localhost:5000":           "localhost:5000",
		"[::1]:5000":               "[::1]:5000",
		"ghcr.io":                  "ghcr.io",
		"registry.example.com:443": "registry.example.com:443",
	} {
		got, err := RegistryHost(in)
		if err != nil || got != want {
			t.Errorf("RegistryHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestRegistryHost_NotAHost(t *testing.T) {
	for _, in := range []string{
		"", "  ", "team", "Team", "registry.example.com/team", "host@sha256:abc",
		"a b.com", "-bad.com", "bad-.com", "host:port", "*", strings.Repeat("a", 250) + ".com:5000",
	} {
		got, err := RegistryHost(in)
		if err == nil || !errors.Is(err, ErrNotRegistryHost) {
			t.Errorf("RegistryHost(%q) = %q, %v; want ErrNotRegistryHost", in, got, err)
		}
	}
}

// TestRegistryHost_AsReferencesName: a host normalized here is the domain
// the engine's parser gives an image reference on it, whatever the case
// the reference was written in, so an allow list entry or a credential
// keyed on it matches the reference's registry.
func TestRegistryHost_AsReferencesName(t *testing.T) {
	for _, ref := range []string{
		"python:3.12", "docker.io/library/python:3.12", "index.docker.io/team/app:v1",
		"127.0.0.1:5000/team/app:v1", "localhost:5000/app", "registry.example.com/a/b/c@sha256:" + strings.Repeat("a", 64),
	} {
		named, err := reference.ParseNormalizedNamed(ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RegistryHost(reference.Domain(named))
		if err != nil || got != reference.Domain(named) {
			t.Errorf("RegistryHost(domain of %q = %q) = %q, %v", ref, reference.Domain(named), got, err)
		}
	}
}
