// Package imageref holds the rules for naming the registry of an image as
// the engine names it. The operator's --registry-allow list (package
// config) and an owner's registry credentials (package service) both key
// on a registry host; both normalize it here, with the same parser the
// engine uses for image references, so that the host a list or a
// credential names is the host an image reference resolves to.
//
// It is its own package rather than part of package naming because it
// depends on github.com/distribution/reference, and naming is kept
// stdlib-only (internal/cluster/forward's dependency test).
package imageref

import (
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// DockerHub is Docker Hub's registry host as image references name it
// (also its name in --registry-allow).
const DockerHub = "docker.io"

// maxHost bounds a registry host's text: a DNS name is at most 253 bytes,
// and a port adds at most 6.
const maxHost = 255

// ErrNotRegistryHost is a string that names no registry host.
var ErrNotRegistryHost = errors.New("not a registry host")

// RegistryHost normalizes s, a registry host ("registry.example.com",
// "127.0.0.1:5000", "localhost", "[::1]:5000", "docker.io"), to the name
// image references give it: lowercase (registry hosts are DNS names, any
// case is the same host), Docker Hub's legacy "index.docker.io" as
// "docker.io", a port kept. Surrounding space is ignored. What names no
// host is an error that wraps ErrNotRegistryHost and says why: a path or
// a digest ("/", "@"), a bare word ("team", which the engine reads as a
// namespace on Docker Hub: a host has a dot or a port, or is localhost),
// or more than 255 bytes.
func RegistryHost(s string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(s))
	if h == "" || len(h) > maxHost || strings.ContainsAny(h, "/@") {
		return "", fmt.Errorf("%q is %w (docker.io, registry.example.com, 127.0.0.1:5000)", s, ErrNotRegistryHost)
	}
	named, err := reference.ParseNormalizedNamed(h + "/x")
	if err != nil {
		return "", fmt.Errorf("%q is %w (docker.io, registry.example.com, 127.0.0.1:5000)", s, ErrNotRegistryHost)
	}
	d := reference.Domain(named)
	if d == DockerHub && h != DockerHub && h != "index.docker.io" {
		return "", fmt.Errorf("%q is %w (a host has a dot or a port, or is localhost)", s, ErrNotRegistryHost)
	}
	return d, nil
}
