package sandboxd

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Image is what a node has of an image reference.
type Image struct {
	// Ref is the normalized reference (docker.io/library/python:3.12).
	Ref     string `json:"ref"`
	Present bool   `json:"present"`
	Pulling bool   `json:"pulling"`
	// BytesDone and BytesTotal are the progress of a pull under way
	// (BytesTotal grows as the engine announces layers).
	BytesDone  int64 `json:"bytes_done,omitempty"`
	BytesTotal int64 `json:"bytes_total,omitempty"`
	// SizeBytes is the size of a present image.
	SizeBytes int64 `json:"size_bytes,omitempty"`
}

// GetImage reports whether the node has the image ref, or how far its
// pull is.
func (c *Client) GetImage(ctx context.Context, ref string) (*Image, error) {
	var img Image
	segs := append([]string{"v1", "images"}, strings.Split(ref, "/")...)
	if err := c.do(ctx, &request{method: http.MethodGet, segs: segs, retry: retrySafe}, nil, &img); err != nil {
		return nil, fmt.Errorf("get image %q: %w", ref, err)
	}
	return &img, nil
}

// PullImage makes the image ref present on the node, pulling it with the
// caller's registry credential (or joining the pull under way), and
// returns once it is there. It is safe to retry.
func (c *Client) PullImage(ctx context.Context, ref string) (*Image, error) {
	var img Image
	r := &request{method: http.MethodPost, segs: []string{"v1", "images", "pull"}, retry: retrySafe}
	if err := c.do(ctx, r, map[string]string{"ref": ref}, &img); err != nil {
		return nil, fmt.Errorf("pull image %q: %w", ref, err)
	}
	return &img, nil
}

// RegistryCredential is a stored registry credential; its secret is never
// answered.
type RegistryCredential struct {
	Host      string    `json:"host"`
	Username  string    `json:"username"`
	CreatedAt time.Time `json:"created_at"`
}

// PutRegistryCredential stores the caller's credential for a registry
// host (docker.io for Docker Hub; host:port for others), replacing its
// previous one. password is the password or a token. Safe to retry.
func (c *Client) PutRegistryCredential(ctx context.Context, host, username, password string) (*RegistryCredential, error) {
	var out RegistryCredential
	body := map[string]string{"host": host, "username": username, "password": password}
	r := &request{method: http.MethodPost, segs: []string{"v1", "registries"}, retry: retrySafe}
	if err := c.do(ctx, r, body, &out); err != nil {
		return nil, fmt.Errorf("put registry credential %s: %w", host, err)
	}
	return &out, nil
}

// ListRegistryCredentials lists the caller's registry credentials.
func (c *Client) ListRegistryCredentials(ctx context.Context) ([]RegistryCredential, error) {
	var out struct {
		Items []RegistryCredential `json:"items"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, segs: []string{"v1", "registries"}, retry: retrySafe}, nil, &out); err != nil {
		return nil, fmt.Errorf("list registry credentials: %w", err)
	}
	return out.Items, nil
}

// DeleteRegistryCredential removes the caller's credential for host.
func (c *Client) DeleteRegistryCredential(ctx context.Context, host string) error {
	r := &request{method: http.MethodDelete, segs: []string{"v1", "registries", host}, retry: retryDelete}
	if err := c.do(ctx, r, nil, nil); err != nil {
		return fmt.Errorf("delete registry credential %s: %w", host, err)
	}
	return nil
}
