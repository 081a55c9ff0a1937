package docker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// TestClassifyPull: the engine's answers to a failed pull, as this
// engine (20.10) words them against Debian's docker-registry, each to
// its sentinel. Only a missing manifest is typed by the engine; the
// rest is text.
func TestClassifyPull(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"ManifestUnknown", cerrdefs.ErrNotFound.WithMessage("manifest for 127.0.0.1:5000/t/x:v1 not found: manifest unknown: manifest unknown"), runtime.ErrNotInRegistry},
		{"HubPrivateOrMissing", errors.New("pull access denied for nope/nope, repository does not exist or may require 'docker login': denied: requested access to the resource is denied"), runtime.ErrRegistryAuth},
		{"NoCredentials", errors.New(`Head "http://127.0.0.1:5000/v2/t/p/manifests/v1": no basic auth credentials`), runtime.ErrRegistryAuth},
		{"WrongCredentials", errors.New("unauthorized: authentication required"), runtime.ErrRegistryAuth},
		{"Refused", errors.New(`Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused`), runtime.ErrRegistryUnavailable},
		{"CutMidStream", &jsonstream.Error{Message: "unexpected EOF"}, runtime.ErrRegistryUnavailable},
		{"BadGateway", errors.New("received unexpected HTTP status: 502 Bad Gateway"), runtime.ErrRegistryUnavailable},
		{"InvalidReference", cerrdefs.ErrInvalidArgument.WithMessage("invalid reference format"), runtime.ErrInvalidSpec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classifyPull(tc.err); got != tc.want {
				t.Errorf("classifyPull(%q) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestPullErr_ContextAndEngine: a pull whose context ended is the
// context's error, not the registry's; an engine that is gone is
// runtime.ErrUnavailable.
func TestPullErr_ContextAndEngine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := pullErr(ctx, "r", errors.New("unexpected EOF")); !errors.Is(err, context.Canceled) || errors.Is(err, runtime.ErrRegistryUnavailable) {
		t.Errorf("cancelled: %v", err)
	}
	gone := fmt.Errorf("wrapped: %w", cerrdefs.ErrUnavailable)
	if err := pullErr(context.Background(), "r", gone); !errors.Is(err, runtime.ErrUnavailable) {
		t.Errorf("engine gone: %v", err)
	}
}

// TestPullLayers_Sum: the progress is the sum over the layers announced
// so far; a layer that is done counts whole.
func TestPullLayers_Sum(t *testing.T) {
	var l pullLayers
	msgs := []jsonstream.Message{
		{ID: "a", Status: "Pulling fs layer"},
		{ID: "b", Status: "Already exists"},
		{ID: "a", Status: "Downloading", Progress: &jsonstream.Progress{Current: 10, Total: 100}},
		{ID: "c", Status: "Downloading", Progress: &jsonstream.Progress{Current: 5, Total: 50}},
		{ID: "a", Status: "Download complete"},
	}
	for _, m := range msgs {
		l.add(m)
	}
	if got, want := l.sum(), (runtime.PullProgress{Done: 105, Total: 150}); got != want {
		t.Errorf("sum = %+v, want %+v", got, want)
	}
}
