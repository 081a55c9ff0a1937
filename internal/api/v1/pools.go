package v1

import (
	"math"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// poolJSON is one class of the warm pool: what makes its sandboxes
// interchangeable, how many idle ones it keeps (size; with max_size, the
// least it keeps while its number follows demand over window_s), and, in
// answers, how many it keeps now (target), holds (ready) and is making
// (filling).
type poolJSON struct {
	Image    string  `json:"image"`
	Runtime  string  `json:"runtime,omitempty"`
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int64   `json:"memory_mb,omitempty"`
	DiskMB   int64   `json:"disk_mb,omitempty"`
	Network  bool    `json:"network,omitempty"`
	Size     int     `json:"size"`
	MaxSize  int     `json:"max_size,omitempty"`
	WindowS  int64   `json:"window_s,omitempty"`
	Target   int     `json:"target"`
	Ready    int     `json:"ready"`
	Filling  int     `json:"filling"`
	// SandboxIDs are the idle sandboxes (no API call reaches them: they
	// are nobody's until a create claims one).
	SandboxIDs []string `json:"sandbox_ids"`
}

type poolsRequest struct {
	Pools []struct {
		Image    string  `json:"image"`
		Runtime  string  `json:"runtime"`
		CPU      float64 `json:"cpu"`
		MemoryMB int64   `json:"memory_mb"`
		DiskMB   int64   `json:"disk_mb"`
		Network  bool    `json:"network"`
		Size     int     `json:"size"`
		MaxSize  int     `json:"max_size"`
		WindowS  int64   `json:"window_s"`
	} `json:"pools"`
}

type poolsJSON struct {
	Pools []poolJSON `json:"pools"`
	// Nodes, in cluster mode, are the other nodes' pools (each node keeps
	// its own, and a PUT sets the pool of the node it reaches).
	Nodes []nodePoolsJSON `json:"nodes,omitempty"`
}

type nodePoolsJSON struct {
	Node  string     `json:"node"`
	Pools []poolJSON `json:"pools"`
}

func toPoolsJSON(st []service.PoolStatus) poolsJSON {
	out := poolsJSON{Pools: make([]poolJSON, len(st))}
	for i, p := range st {
		out.Pools[i] = poolJSON{
			Image: p.Image, Runtime: p.Runtime, CPU: float64(p.MilliCPU) / 1000, MemoryMB: p.MemoryMB, DiskMB: p.DiskMB,
			Network: p.Network, Size: p.Size, MaxSize: p.Max, WindowS: int64(p.Window / time.Second),
			Target: p.Target, Ready: p.Ready, Filling: p.Filling, SandboxIDs: p.IDs,
		}
	}
	return out
}

// listPools answers the warm pool's classes, and in cluster mode the
// other nodes'.
func (s *server) listPools(w http.ResponseWriter, r *http.Request) error {
	out := toPoolsJSON(s.svc.PoolStatus())
	for _, n := range s.svc.PeerPools(r.Context()) {
		out.Nodes = append(out.Nodes, nodePoolsJSON{Node: n.Node, Pools: toPoolsJSON(n.Pools).Pools})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// setPools replaces the warm pool's targets (absent fields take a
// create's defaults; a class left out is emptied) and answers the pool.
// Repeating it is harmless.
func (s *server) setPools(w http.ResponseWriter, r *http.Request) error {
	var body poolsRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	if body.Pools == nil {
		return fieldError("pools", "is required (an empty list empties the pool)")
	}
	targets := make([]service.PoolTarget, len(body.Pools))
	for i, p := range body.Pools {
		if p.CPU < 0 || p.CPU > 1e6 || math.IsNaN(p.CPU) {
			return fieldError("pools", "cpu must be a positive number of cores")
		}
		if p.WindowS < 0 || p.WindowS > int64(24*time.Hour/time.Second) {
			return fieldError("pools", "window_s must be a number of seconds from 1 to 86400")
		}
		targets[i] = service.PoolTarget{PoolClass: service.PoolClass{
			Image: p.Image, Runtime: p.Runtime, MilliCPU: int64(math.Round(p.CPU * 1000)),
			MemoryMB: p.MemoryMB, DiskMB: p.DiskMB, Network: p.Network,
		}, Size: p.Size, Max: p.MaxSize, Window: time.Duration(p.WindowS) * time.Second}
	}
	st, err := s.svc.SetPool(r.Context(), targets)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toPoolsJSON(st))
	return nil
}
