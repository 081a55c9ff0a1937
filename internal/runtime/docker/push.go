package docker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

var _ runtime.Pusher = (*Runtime)(nil)

// PushImage implements runtime.Pusher: the local image src is tagged dst
// (a registry reference with a tag), pushed, and the tag dst removed
// again, whatever the push's outcome; the digest is the one the engine
// reports at the end of the push stream.
func (r *Runtime) PushImage(ctx context.Context, src, dst string, auth *runtime.RegistryAuth) (string, error) {
	if err := r.TagImage(ctx, src, dst); err != nil {
		return "", fmt.Errorf("push %s: %w", src, err)
	}
	defer func() {
		// The tag was only the push's: the engine keeps src.
		_, _ = r.cli.ImageRemove(context.WithoutCancel(ctx), dst, client.ImageRemoveOptions{})
	}()
	opts := client.ImagePushOptions{RegistryAuth: base64.URLEncoding.EncodeToString([]byte("{}"))}
	if auth != nil {
		b, err := json.Marshal(registry.AuthConfig{Username: auth.Username, Password: auth.Password, ServerAddress: auth.ServerAddress})
		if err != nil {
			return "", err
		}
		opts.RegistryAuth = base64.URLEncoding.EncodeToString(b)
	}
	resp, err := r.cli.ImagePush(ctx, dst, opts)
	if err != nil {
		return "", pushErr(ctx, dst, err)
	}
	digest := ""
	for m, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return "", pushErr(ctx, dst, err)
		}
		if m.Error != nil {
			return "", pushErr(ctx, dst, m.Error)
		}
		if m.Aux != nil {
			var aux struct {
				Digest string `json:"Digest"`
			}
			if json.Unmarshal(*m.Aux, &aux) == nil && strings.HasPrefix(aux.Digest, "sha256:") {
				digest = aux.Digest
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("push %s: %w", dst, err)
	}
	if digest == "" {
		return "", fmt.Errorf("push %s: %w: the engine reported no digest", dst, runtime.ErrRegistryUnavailable)
	}
	return digest, nil
}

// pushErr is pullErr's counterpart: the same registry failures, named as
// a push's.
func pushErr(ctx context.Context, ref string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("push %s: %w", ref, ctx.Err())
	}
	if e := engineErr(err); errors.Is(e, runtime.ErrUnavailable) || errors.Is(e, runtime.ErrNoSpace) {
		return fmt.Errorf("push %s: %w", ref, e)
	}
	return fmt.Errorf("push %s: %w: %w", ref, classifyPull(err), err)
}
