package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// cpuSample is what CPUPercent is computed against on the next Stats call.
type cpuSample struct {
	total  uint64 // container CPU time, ns
	system uint64 // host CPU time, ns (all cores)
}

// Stats implements runtime.Runtime with one one-shot sample (stream=false,
// no pre-sample: the engine answers at once instead of after a second).
func (r *Runtime) Stats(ctx context.Context, sandboxID string) (_ runtime.Stats, err error) {
	defer func() { err = engineErr(err) }()
	if err := checkID(sandboxID); err != nil {
		return runtime.Stats{}, err
	}
	res, err := r.cli.ContainerStats(ctx, r.name(sandboxID), client.ContainerStatsOptions{Stream: false})
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("stats of sandbox %s: %w", sandboxID, notFound(err))
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return runtime.Stats{}, fmt.Errorf("stats of sandbox %s: decode: %w", sandboxID, err)
	}

	out := runtime.Stats{
		At:          s.Read,
		CPUTime:     time.Duration(s.CPUStats.CPUUsage.TotalUsage),
		MemoryUsed:  memoryUsed(s.MemoryStats),
		MemoryLimit: s.MemoryStats.Limit,
		Pids:        s.PidsStats.Current,
	}
	cur := cpuSample{total: s.CPUStats.CPUUsage.TotalUsage, system: s.CPUStats.SystemUsage}
	r.mu.Lock()
	prev, ok := r.cpuPrevs[sandboxID]
	r.cpuPrevs[sandboxID] = cur
	r.mu.Unlock()
	// A restarted container's counters start again from zero: no percentage.
	if ok && cur.total >= prev.total && cur.system > prev.system {
		cpus := float64(s.CPUStats.OnlineCPUs)
		if cpus == 0 {
			cpus = float64(len(s.CPUStats.CPUUsage.PercpuUsage))
		}
		out.CPUPercent = float64(cur.total-prev.total) / float64(cur.system-prev.system) * cpus * 100
	}
	return out, nil
}

// memoryUsed is usage minus reclaimable page cache, as `docker stats`
// computes it (cgroup v1 reports total_inactive_file, v2 inactive_file).
func memoryUsed(m container.MemoryStats) uint64 {
	for _, k := range []string{"total_inactive_file", "inactive_file"} {
		if v, ok := m.Stats[k]; ok && v < m.Usage {
			return m.Usage - v
		}
	}
	return m.Usage
}
