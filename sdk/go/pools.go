package sandboxd

import (
	"context"
	"fmt"
	"net/http"
)

// Pool is one class of the daemon's warm pool: creates whose image,
// runtime, CPU, memory and network match it (and that mount nothing) are
// served from its idle sandboxes in milliseconds. Size is how many idle
// sandboxes it keeps; with MaxSize above it, the least it keeps while its
// number follows demand (it grows toward MaxSize while creates find it
// empty within WindowS seconds, and gives back idle sandboxes that waited
// a whole window; WindowS 0 is the daemon's default, 60). Target, Ready
// and Filling, in answers, are what it keeps, holds and makes now.
type Pool struct {
	Image    string  `json:"image"`
	Runtime  string  `json:"runtime,omitempty"`
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
	DiskMB   int64   `json:"disk_mb,omitempty"`
	Network  bool    `json:"network,omitempty"`
	Size     int     `json:"size"`
	MaxSize  int     `json:"max_size,omitempty"`
	WindowS  int     `json:"window_s,omitempty"`
	Target   int     `json:"target,omitempty"`
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
// out are emptied. Only Image, Runtime, CPU, MemoryMB, DiskMB, Network,
// Size, MaxSize and WindowS are read; zero fields take a create's
// defaults. It is idempotent: setting an adaptive class's configuration
// again keeps where demand moved its target.
func (c *Client) SetPools(ctx context.Context, pools []Pool) ([]Pool, error) {
	in := poolList{Pools: make([]Pool, len(pools))}
	for i, p := range pools {
		p.Target, p.Ready, p.Filling, p.SandboxIDs = 0, 0, 0, nil
		in.Pools[i] = p
	}
	var out poolList
	r := &request{method: http.MethodPut, segs: []string{"v1", "pools"}, retry: retrySafe}
	if err := c.do(ctx, r, in, &out); err != nil {
		return nil, fmt.Errorf("set pools: %w", err)
	}
	return out.Pools, nil
}
