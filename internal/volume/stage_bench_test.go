package volume_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/volume"
)

// BenchmarkPrepareRelease is the mounts step of a create and the volume
// part of its destroy, for a whole volume (the baseline) and for a subpath
// that exists (one openat2) or must be made (a walk with mkdirat).
//
//	go test ./internal/volume -run '^$' -bench PrepareRelease -count 5
func BenchmarkPrepareRelease(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("staging needs root")
	}
	for _, c := range []struct {
		name  string
		mount func(i int) service.Mount
	}{
		{"whole", func(int) service.Mount { return service.Mount{Volume: "data", Path: "/p"} }},
		{"subpath-exists", func(int) service.Mount { return service.Mount{Volume: "data", Path: "/p", Subpath: "users/alice"} }},
		{"subpath-made-3-levels", func(i int) service.Mount {
			return service.Mount{Volume: "data", Path: "/p", Subpath: fmt.Sprintf("n%d/a/b", i)}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			base := b.TempDir()
			d, _, err := volume.New(filepath.Join(base, "volumes"), volume.Options{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := b.Context()
			if _, err := d.Prepare(ctx, "alice", "sb-0000000000000000", []service.Mount{{Volume: "data", Path: "/p", Subpath: "users/alice"}}, nil); err != nil {
				b.Fatal(err)
			}
			d.Release(ctx, "sb-0000000000000000")
			i := 0
			var prep, rel time.Duration
			for b.Loop() {
				id := fmt.Sprintf("sb-%016x", i+1)
				t0 := time.Now()
				if _, err := d.Prepare(ctx, "alice", id, []service.Mount{c.mount(i)}, nil); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := d.Release(ctx, id); err != nil {
					b.Fatal(err)
				}
				prep, rel = prep+t1.Sub(t0), rel+time.Since(t1)
				i++
			}
			b.ReportMetric(float64(prep.Microseconds())/float64(i), "prepare-µs/op")
			b.ReportMetric(float64(rel.Microseconds())/float64(i), "release-µs/op")
		})
	}
}
