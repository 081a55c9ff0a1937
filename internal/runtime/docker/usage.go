package docker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

var _ runtime.UsageReader = (*Runtime)(nil)

// diskSizeTTL is how long Usage reuses a sandbox's writable-layer size:
// counting it walks the layer's files in the engine, so a caller polling
// metrics (or a scrape of many sandboxes) costs at most one walk per
// sandbox per TTL.
const diskSizeTTL = 10 * time.Second

// diskSize is a cached writable-layer size.
type diskSize struct {
	at   time.Time
	used uint64
}

// Usage implements runtime.UsageReader: one ContainerInspect, with the
// size when the cached one is older than diskSizeTTL (the engine sums the
// container's writable layer: on btrfs its subvolume's files, tens of
// milliseconds for a small sandbox, more for one with many files), then
// the network counters of the sandbox's network namespace from
// /proc/<pid>/net/dev of its init process (the kernel's table; nothing the
// sandbox writes).
func (r *Runtime) Usage(ctx context.Context, sandboxID string) (_ runtime.Usage, err error) {
	defer func() { err = engineErr(err) }()
	if err := checkID(sandboxID); err != nil {
		return runtime.Usage{}, err
	}
	cached, fresh := r.diskSizes.Load(sandboxID)
	fresh = fresh && time.Since(cached.(diskSize).at) < diskSizeTTL
	res, err := r.cli.ContainerInspect(ctx, r.name(sandboxID), client.ContainerInspectOptions{Size: !fresh})
	if err != nil {
		return runtime.Usage{}, fmt.Errorf("usage of sandbox %s: %w", sandboxID, notFound(err))
	}
	var u runtime.Usage
	if fresh {
		u.DiskUsed = cached.(diskSize).used
	} else {
		if n := res.Container.SizeRw; n != nil && *n > 0 {
			u.DiskUsed = uint64(*n)
		}
		r.diskSizes.Store(sandboxID, diskSize{at: time.Now(), used: u.DiskUsed})
	}
	if st := res.Container.State; st != nil && st.Running && st.Pid > 0 {
		u.NetRx, u.NetTx, _ = netDev(fmt.Sprintf("/proc/%d/net/dev", st.Pid))
	}
	return u, nil
}

// netDev sums the received and sent bytes of every interface but lo in a
// /proc/net/dev table.
func netDev(path string) (rx, tx uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			continue
		}
		r, err1 := strconv.ParseUint(f[0], 10, 64)
		t, err2 := strconv.ParseUint(f[8], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		rx += r
		tx += t
	}
	return rx, tx, sc.Err()
}
