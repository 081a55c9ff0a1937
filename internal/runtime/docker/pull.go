package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/containerd/errdefs/pkg/errhttp"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

var _ runtime.Puller = (*Runtime)(nil)

// PullImage implements runtime.Puller: one ImagePull, its JSON progress
// stream drained to the end (the pull is done when the stream ends
// without an error message). Ending ctx closes the stream, which makes
// the engine abandon the pull.
func (r *Runtime) PullImage(ctx context.Context, ref string, auth *runtime.RegistryAuth, progress func(runtime.PullProgress)) error {
	encoded, err := encodeAuth(auth)
	if err != nil {
		return err
	}
	resp, err := r.cli.ImagePull(ctx, ref, client.ImagePullOptions{RegistryAuth: encoded})
	if err != nil {
		return pullErr(ctx, ref, err)
	}
	var layers pullLayers
	for m, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return pullErr(ctx, ref, err)
		}
		if m.Error != nil {
			return pullErr(ctx, ref, m.Error)
		}
		if layers.add(m) && progress != nil {
			progress(layers.sum())
		}
	}
	return ctx.Err()
}

// CheckAccess implements runtime.Puller: one DistributionInspect, which
// the engine answers by asking the registry for ref's manifest with auth
// (a tag is resolved by the registry, a digest fetched from it), never
// from its own store. Nothing is pulled.
func (r *Runtime) CheckAccess(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	encoded, err := encodeAuth(auth)
	if err != nil {
		return err
	}
	if _, err := r.cli.DistributionInspect(ctx, ref, client.DistributionInspectOptions{EncodedRegistryAuth: encoded}); err != nil {
		return pullErr(ctx, ref, err)
	}
	return nil
}

// encodeAuth is auth as the engine's X-Registry-Auth header takes it; ""
// for none (anonymous).
func encodeAuth(auth *runtime.RegistryAuth) (string, error) {
	if auth == nil {
		return "", nil
	}
	b, err := json.Marshal(registry.AuthConfig{Username: auth.Username, Password: auth.Password, ServerAddress: auth.ServerAddress})
	if err != nil {
		return "", err
	}
	return base64.URLEncoding.EncodeToString(b), nil
}

// pullLayers adds up the engine's per-layer download progress.
type pullLayers struct {
	ids         []string
	done, total map[string]int64
}

// add takes one progress message; it reports whether the sum changed.
func (l *pullLayers) add(m jsonstream.Message) bool {
	if m.ID == "" {
		return false
	}
	if l.done == nil {
		l.done, l.total = map[string]int64{}, map[string]int64{}
	}
	if _, ok := l.total[m.ID]; !ok {
		l.ids = append(l.ids, m.ID)
		l.total[m.ID] = 0
	}
	switch {
	case m.Status == "Downloading" && m.Progress != nil:
		l.done[m.ID], l.total[m.ID] = m.Progress.Current, max(l.total[m.ID], m.Progress.Total)
	case m.Status == "Download complete", m.Status == "Pull complete", m.Status == "Already exists":
		l.done[m.ID] = l.total[m.ID]
	default:
		return false
	}
	return true
}

func (l *pullLayers) sum() runtime.PullProgress {
	var p runtime.PullProgress
	for _, id := range l.ids {
		p.Done += l.done[id]
		p.Total += l.total[id]
	}
	return p
}

// pullErr classifies a failed pull (or registry access check: CheckAccess)
// into the runtime's sentinels, keeping err's text for the log.
func pullErr(ctx context.Context, ref string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("pull %s: %w", ref, ctx.Err())
	}
	if e := engineErr(err); errors.Is(e, runtime.ErrUnavailable) || errors.Is(e, runtime.ErrNoSpace) {
		return fmt.Errorf("pull %s: %w", ref, e)
	}
	return fmt.Errorf("pull %s: %w: %w", ref, classifyPull(err), err)
}

// classifyPull maps a registry's refusal or failure, as the engine reports
// it, to ErrNotInRegistry, ErrRegistryAuth, ErrInvalidSpec or (anything
// else) ErrRegistryUnavailable.
//
// Typed first: the HTTP status of the engine's answer, which the client
// turns into an errdefs class (errhttp.ToHTTP turns it back), or the code
// of a progress message that carries one (jsonstream.Error.Code). The
// engine (20.10) types a missing manifest on a pull (404) and a malformed
// reference (400); on a distribution inspect (CheckAccess) it passes the
// registry's own status on, so a refused credential is a 401 there.
//
// Text only where the engine gives no type: an HTTP 500 (the engine wraps
// every other pull error, refused credentials included, as "unknown"), a
// progress message without a code (an error after the pull's stream
// began), and no class at all. Every phrase matched holds a space, which
// no image reference or URL path can: the engine's messages embed the
// reference and the registry's URLs, so a repository named
// "unauthorized" never makes a registry that broke off look like a
// refusal. pull_internal_test.go holds the engine's phrasings.
func classifyPull(err error) error {
	status := errhttp.ToHTTP(err)
	var je *jsonstream.Error
	if errors.As(err, &je) && je.Code != 0 {
		status = je.Code
	}
	switch status {
	case http.StatusNotFound:
		return runtime.ErrNotInRegistry
	case http.StatusUnauthorized, http.StatusForbidden:
		return runtime.ErrRegistryAuth
	case http.StatusBadRequest:
		return runtime.ErrInvalidSpec
	case http.StatusInternalServerError:
		// untyped: the text below
	default:
		return runtime.ErrRegistryUnavailable
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"unauthorized: ", "no basic auth credentials", "authentication required", "incorrect username or password", "denied: requested access"} {
		if strings.Contains(msg, s) {
			return runtime.ErrRegistryAuth
		}
	}
	for _, s := range []string{"manifest unknown", "not found: manifest", "repository does not exist", "name unknown"} {
		if strings.Contains(msg, s) {
			return runtime.ErrNotInRegistry
		}
	}
	return runtime.ErrRegistryUnavailable
}
