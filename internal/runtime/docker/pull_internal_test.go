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

// TestClassifyPull: the engine's answers to a failed pull or access
// check, as this engine (20.10) words them against Debian's
// docker-registry, each to its sentinel. The client types the engine's
// HTTP status (cerrdefs); where the engine answers 500 or a progress
// message without a code, only the text says more.
func TestClassifyPull(t *testing.T) {
	internal := func(msg string) error { return cerrdefs.ErrInternal.WithMessage(msg) }
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		// Typed by the engine's status.
		{"ManifestUnknown", cerrdefs.ErrNotFound.WithMessage("manifest for 127.0.0.1:5000/t/x:v1 not found: manifest unknown: manifest unknown"), runtime.ErrNotInRegistry},
		{"InvalidReference", cerrdefs.ErrInvalidArgument.WithMessage("invalid reference format"), runtime.ErrInvalidSpec},
		{"InspectUnauthorized", cerrdefs.ErrUnauthenticated.WithMessage("unauthorized: authentication required"), runtime.ErrRegistryAuth},
		{"InspectDenied", cerrdefs.ErrPermissionDenied.WithMessage("denied: requested access to the resource is denied"), runtime.ErrRegistryAuth},
		{"StreamCode401", &jsonstream.Error{Code: 401, Message: "whatever the words"}, runtime.ErrRegistryAuth},
		{"StreamCode404", &jsonstream.Error{Code: 404, Message: "whatever the words"}, runtime.ErrNotInRegistry},
		// The status decides, whatever the text says.
		{"NotFoundNamedUnauthorized", cerrdefs.ErrNotFound.WithMessage("manifest for 127.0.0.1:5000/unauthorized/x:v1 not found: manifest unknown: manifest unknown"), runtime.ErrNotInRegistry},
		{"ConflictWithAuthWords", cerrdefs.ErrConflict.WithMessage("no basic auth credentials"), runtime.ErrRegistryUnavailable},
		// Untyped (500, or no class): the text.
		{"HubPrivateOrMissing", errors.New("pull access denied for nope/nope, repository does not exist or may require 'docker login': denied: requested access to the resource is denied"), runtime.ErrRegistryAuth},
		{"NoCredentials", internal(`Head "http://127.0.0.1:5000/v2/t/p/manifests/v1": no basic auth credentials`), runtime.ErrRegistryAuth},
		{"WrongCredentials", internal("unauthorized: authentication required"), runtime.ErrRegistryAuth},
		{"WrongCredentialsUntyped", errors.New("unauthorized: authentication required"), runtime.ErrRegistryAuth},
		{"Refused", internal(`Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused`), runtime.ErrRegistryUnavailable},
		{"CutMidStream", &jsonstream.Error{Message: "unexpected EOF"}, runtime.ErrRegistryUnavailable},
		{"BadGateway", internal("received unexpected HTTP status: 502 Bad Gateway"), runtime.ErrRegistryUnavailable},
		// A repository's name is in the engine's text: no phrase matches
		// it (each holds a space, which no reference or URL path can).
		{"BrokeOffOnRepoNamedUnauthorized", internal(`Head "http://127.0.0.1:5000/v2/t/unauthorized/manifests/v1": EOF`), runtime.ErrRegistryUnavailable},
		{"BrokeOffOnTagNamedUnauthorized", &jsonstream.Error{Message: `Get "http://127.0.0.1:5000/v2/unauthorized/blobs/sha256:ab": unexpected EOF`}, runtime.ErrRegistryUnavailable},
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
