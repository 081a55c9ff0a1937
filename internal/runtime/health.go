package runtime

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ProbeHealth sends one GET HealthPath to an agent through hc, bounded by
// timeout; nil means 204 No Content. At most 4 KiB of the body is read.
func ProbeHealth(ctx context.Context, hc *http.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+HealthPath, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("GET %s: status %s, want 204", HealthPath, resp.Status)
	}
	return nil
}
