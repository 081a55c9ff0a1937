package v1

import (
	"context"
	"sync"

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
const sandboxSampleWorkers = 4

// sandboxCollector exports per-sandbox usage at scrape time.
type sandboxCollector struct {
	svc                           Service
	cpu, mem, disk, rx, tx, omits *prometheus.Desc
}

func newSandboxCollector(svc Service) *sandboxCollector {
	l := []string{"sandbox"}
	return &sandboxCollector{
		svc:   svc,
		cpu:   prometheus.NewDesc("sandboxd_sandbox_cpu_seconds_total", "CPU time a running sandbox used since it started.", l, nil),
		mem:   prometheus.NewDesc("sandboxd_sandbox_memory_bytes", "Memory a running sandbox uses, reclaimable page cache excluded.", l, nil),
		disk:  prometheus.NewDesc("sandboxd_sandbox_disk_bytes", "What a running sandbox wrote over its image (what its disk limit counts).", l, nil),
		rx:    prometheus.NewDesc("sandboxd_sandbox_network_receive_bytes_total", "Bytes a running sandbox received.", l, nil),
		tx:    prometheus.NewDesc("sandboxd_sandbox_network_transmit_bytes_total", "Bytes a running sandbox sent.", l, nil),
		omits: prometheus.NewDesc("sandboxd_sandbox_series_omitted", "Running sandboxes left out of the per-sandbox series (beyond the cap of 64).", nil, nil),
	}
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cpu, c.mem, c.disk, c.rx, c.tx, c.omits} {
		ch <- d
	}
}

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

	var wg sync.WaitGroup
	sem := make(chan struct{}, sandboxSampleWorkers)
	for _, sb := range running {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			m, err := c.svc.SandboxUsage(ctx, admin, sb.ID)
			if err != nil {
				return // stopped or gone since the listing; no series
			}
			ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, m.CPUSeconds, sb.ID)
			ch <- prometheus.MustNewConstMetric(c.mem, prometheus.GaugeValue, float64(m.MemoryUsed), sb.ID)
			ch <- prometheus.MustNewConstMetric(c.disk, prometheus.GaugeValue, float64(m.Disk.Used), sb.ID)
			ch <- prometheus.MustNewConstMetric(c.rx, prometheus.CounterValue, float64(m.NetRx), sb.ID)
			ch <- prometheus.MustNewConstMetric(c.tx, prometheus.CounterValue, float64(m.NetTx), sb.ID)
		}()
	}
	wg.Wait()
}
