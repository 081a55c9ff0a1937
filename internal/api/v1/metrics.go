package v1

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/service"
)

// scrapeTimeout bounds the database reads of one /metrics scrape.
const scrapeTimeout = 5 * time.Second

// metrics are the API's own instruments. The create-step histogram is the
// service's (service.Metrics), registered on the same registry by whoever
// builds the service.
type metrics struct {
	errors  *prometheus.CounterVec
	handler http.Handler
}

func newMetrics(reg Registry, count func(context.Context) (map[service.State]int, error)) (*metrics, error) {
	m := &metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd",
			Subsystem: "api",
			Name:      "errors_total",
			Help:      "Error answers of the native API, by wire error code.",
		}, []string{"code"}),
	}
	for _, class := range apierr.Classes() {
		m.errors.WithLabelValues(string(class.Code)) // every code shows from the first scrape
	}
	states := &stateCollector{
		desc:  prometheus.NewDesc("sandboxd_sandboxes", "Sandboxes on this node, by state.", []string{"state"}, nil),
		count: count,
	}
	for _, c := range []prometheus.Collector{m.errors, states} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return m, nil
}

func (s *server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// stateCollector counts sandboxes by state at scrape time, so the gauge is
// never out of step with the database.
type stateCollector struct {
	desc  *prometheus.Desc
	count func(context.Context) (map[service.State]int, error)
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	n, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, st := range []service.State{service.StateCreating, service.StateRunning, service.StatePaused, service.StateStopping, service.StateStopped, service.StateError} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n[st]), string(st))
	}
}

// countByState pages through every sandbox as an admin. It is O(sandboxes)
// per scrape, fine for one host's few thousand; a COUNT … GROUP BY state
// in the store, exposed by the service, would make it one query.
func (s *server) countByState(ctx context.Context) (map[service.State]int, error) {
	admin := service.Caller{Admin: true}
	n := map[service.State]int{}
	f := service.ListFilter{Limit: service.MaxListLimit}
	for {
		page, next, err := s.svc.ListLocal(ctx, admin, f) // this node's gauge, also in a cluster
		if err != nil {
			return nil, err
		}
		for _, sb := range page {
			n[sb.State]++
		}
		if next == "" {
			return n, nil
		}
		f.PageToken = next
	}
}
