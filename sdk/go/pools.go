package sandboxd

import (
	"context"
	"fmt"
	"net/http"
)

// Pool is one class of the daemon's warm pool: creates whose image,
// runtime, CPU, memory and network match it (and that mount nothing) are
// served from its idle sandboxes in milliseconds. Size is how many idle
// sandboxes it keeps; Ready and Filling, in answers, what it holds now.
type Pool struct {
	Image    string  `json:"image"`
	Runtime  string  `json:"runtime,omitempty"`
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
	DiskMB   int64   `json:"disk_mb,omitempty"`
	Network  bool    `json:"network,omitempty"`
	Size     int     `json:"size"`
	Ready    int     `json:"ready,omitempty"`
	Filling  int     `json:"filling,omitempty"`
	// SandboxIDs, in answers, are the idle sandboxes.
	SandboxIDs []string `json:"sandbox_ids,omitempty"`
}

type poolList struct {
	Pools []Pool `json:"pools"`
}

// ListPools returns the warm pool's classes (admin only).
func (c *Client) ListPools(ctx context.Context) ([]Pool, error) {
	var out poolList
	r := &request{method: http.MethodGet, segs: []string{"v1", "pools"}, retry: retrySafe}
	if err := c.do(ctx, r, nil, &out); err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out.Pools, nil
}

// SetPools replaces the warm pool's targets (admin only): classes left
// out are emptied. Only Image, Runtime, CPU, MemoryMB, Network and Size
// are read; zero fields take a create's defaults. It is idempotent.
func (c *Client) SetPools(ctx context.Context, pools []Pool) ([]Pool, error) {
	in := poolList{Pools: make([]Pool, len(pools))}
	for i, p := range pools {
		p.Ready, p.Filling, p.SandboxIDs = 0, 0, nil
		in.Pools[i] = p
	}
	var out poolList
	r := &request{method: http.MethodPut, segs: []string{"v1", "pools"}, retry: retrySafe}
	if err := c.do(ctx, r, in, &out); err != nil {
		return nil, fmt.Errorf("set pools: %w", err)
	}
	return out.Pools, nil
}
