package v1

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/service"
)

// maxSandboxSeries caps the sandboxes that get per-sandbox series on
// /metrics: the oldest running ones of this node (a stable choice, so a
// scrape's series do not churn). Each costs a sample from the engine per
// scrape (cgroup statistics and the writable layer's size) and five
// series, so the cap bounds both the scrape's time and Prometheus's label
// set; sandboxd_sandbox_series_omitted says how many were left out, and
// GET /v1/sandboxes/{id}/metrics answers for any of them.
const maxSandboxSeries = 64

// sandboxSampleWorkers bounds the engine calls one scrape makes at once.
// A Docker engine (20.10 here) answers a one-shot stats call at its next
// collection tick, once a second, and calls waiting at once share it, so
// a scrape takes about a second per round of workers. With 4, a scrape of
// 8 sandboxes took p50 1.6 s and one of 64 hit the old 5 s bound with 20
// series; with 32, 0.8–0.9 s and 2.1–2.5 s (p95 2.5–3.8 s on this busy
// machine) with all 64 (go run ./bench/metricsbench, one run each; docker
// stats --no-stream of the same 64 took 2.3–2.7 s beside them). Each call is a goroutine
// and a socket while it waits, little CPU. The bound holds across
// scrapes: calls a past scrape left behind (an engine slow to see their
// cancellation) hold their slots until they return.
const sandboxSampleWorkers = 32

// sandboxSampleDeadline bounds the per-sandbox sampling of one scrape,
// under Prometheus's default scrape timeout (10 s): a sandbox whose
// sample has not come in by then is left out of this scrape and counted
// in sandboxd_sandbox_samples_missing{reason="deadline"}, so a slow or
// hung engine makes a scrape late by this much, never hung.
const sandboxSampleDeadline = 4 * time.Second

// sandboxCollector exports per-sandbox usage at scrape time.
type sandboxCollector struct {
	svc                                    Service
	deadline                               time.Duration
	slots                                  chan struct{} // engine calls in flight, every scrape's
	cpu, mem, disk, rx, tx, omits, missing *prometheus.Desc
}

func newSandboxCollector(svc Service) *sandboxCollector {
	l := []string{"sandbox"}
	return &sandboxCollector{
		svc:      svc,
		deadline: sandboxSampleDeadline,
		slots:    make(chan struct{}, sandboxSampleWorkers),
		cpu:      prometheus.NewDesc("sandboxd_sandbox_cpu_seconds_total", "CPU time a running sandbox used since it started.", l, nil),
		mem:      prometheus.NewDesc("sandboxd_sandbox_memory_bytes", "Memory a running sandbox uses, reclaimable page cache excluded.", l, nil),
		disk:     prometheus.NewDesc("sandboxd_sandbox_disk_bytes", "What a running sandbox wrote over its image (what its disk limit counts).", l, nil),
		rx:       prometheus.NewDesc("sandboxd_sandbox_network_receive_bytes_total", "Bytes a running sandbox received.", l, nil),
		tx:       prometheus.NewDesc("sandboxd_sandbox_network_transmit_bytes_total", "Bytes a running sandbox sent.", l, nil),
		omits:    prometheus.NewDesc("sandboxd_sandbox_series_omitted", "Running sandboxes left out of the per-sandbox series (beyond the cap of 64).", nil, nil),
		missing: prometheus.NewDesc("sandboxd_sandbox_samples_missing",
			"Running sandboxes within the cap left out of this scrape's per-sandbox series: reason=deadline (the engine's sample did not come within 4 s), error (the sample failed, or the sandbox stopped since the listing).", []string{"reason"}, nil),
	}
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cpu, c.mem, c.disk, c.rx, c.tx, c.omits, c.missing} {
		ch <- d
	}
}

// sandboxSample is one sandbox's sample, or why there is none.
type sandboxSample struct {
	id  string
	m   service.SandboxMetrics
	err error
}

// Collect samples the capped running sandboxes, sandboxSampleWorkers at
// a time, until c.deadline: only Collect writes to ch, and it returns at
// the deadline whatever the engine calls still running do (they are
// cancelled, and drop their result into a buffer nobody reads).
func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	admin := service.Caller{Admin: true}
	running, _, err := c.svc.ListLocal(ctx, admin, service.ListFilter{States: []service.State{service.StateRunning}, Limit: service.MaxListLimit})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.omits, err)
		return
	}
	omitted := max(len(running)-maxSandboxSeries, 0)
	running = running[:len(running)-omitted]
	ch <- prometheus.MustNewConstMetric(c.omits, prometheus.GaugeValue, float64(omitted))

	sctx, scancel := context.WithTimeout(ctx, c.deadline)
	defer scancel()
	results := make(chan sandboxSample, len(running)) // never blocks a worker
	started := 0
dispatch:
	for _, sb := range running {
		select {
		case c.slots <- struct{}{}:
		case <-sctx.Done():
			break dispatch
		}
		started++
		go func() {
			defer func() { <-c.slots }()
			m, err := c.svc.SandboxUsage(sctx, admin, sb.ID)
			results <- sandboxSample{id: sb.ID, m: m, err: err}
		}()
	}
	sampled, failed := 0, 0
gather:
	for sampled+failed < started {
		select {
		case r := <-results:
			switch {
			case sctx.Err() != nil: // in at the deadline, or failed by it: late
				break gather
			case r.err != nil:
				failed++
				continue
			}
			sampled++
			ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, r.m.CPUSeconds, r.id)
			ch <- prometheus.MustNewConstMetric(c.mem, prometheus.GaugeValue, float64(r.m.MemoryUsed), r.id)
			ch <- prometheus.MustNewConstMetric(c.disk, prometheus.GaugeValue, float64(r.m.Disk.Used), r.id)
			ch <- prometheus.MustNewConstMetric(c.rx, prometheus.CounterValue, float64(r.m.NetRx), r.id)
			ch <- prometheus.MustNewConstMetric(c.tx, prometheus.CounterValue, float64(r.m.NetTx), r.id)
		case <-sctx.Done():
			break gather
		}
	}
	ch <- prometheus.MustNewConstMetric(c.missing, prometheus.GaugeValue, float64(len(running)-sampled-failed), "deadline")
	ch <- prometheus.MustNewConstMetric(c.missing, prometheus.GaugeValue, float64(failed), "error")
}
