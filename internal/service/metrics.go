package service

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the service's Prometheus instruments, registered on an
// injected registry (never the global one).
type Metrics struct {
	createStep  *prometheus.HistogramVec
	createTotal *prometheus.CounterVec
	reconciled  *prometheus.CounterVec

	poolSize   *prometheus.GaugeVec
	poolClaims *prometheus.CounterVec
	poolClaim  prometheus.Histogram
	poolRefill prometheus.Histogram

	// undelivered counts creates whose client went away before the
	// answer and that were offered to an identical retry.
	undelivered prometheus.Counter
}

// NewMetrics creates the instruments and registers them on reg; a nil reg
// keeps them unregistered (tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		createStep: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sandboxd",
			Name:      "create_step_seconds",
			Help:      "Latency of each step of the sandbox create chain.",
			Buckets:   []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"step"}),
		createTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd",
			Name:      "creates_total",
			Help:      "Sandbox creates by outcome.",
		}, []string{"outcome"}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd",
			Name:      "reconcile_actions_total",
			Help:      "Repairs made by the reconciler and the reaper, by kind.",
		}, []string{"action"}),
		poolSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sandboxd",
			Name:      "pool_ready",
			Help:      "Idle sandboxes the warm pool holds, by class.",
		}, []string{"class"}),
		poolClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd",
			Name:      "pool_claims_total",
			Help:      "Creates the warm pool served (hit) or could not serve (miss: the cold path ran).",
		}, []string{"outcome"}),
		poolClaim: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sandboxd",
			Name:      "pool_claim_seconds",
			Help:      "Latency of a claim from the warm pool (store write and agent call).",
			Buckets:   []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
		poolRefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sandboxd",
			Name:      "pool_refill_seconds",
			Help:      "Time to add one idle sandbox to the warm pool.",
			Buckets:   []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		undelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sandboxd",
			Name:      "creates_undelivered_total",
			Help:      "Creates whose client went away before the answer, kept for an identical retry to adopt (E2B dedupe).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.createStep, m.createTotal, m.reconciled, m.poolSize, m.poolClaims, m.poolClaim, m.poolRefill, m.undelivered)
	}
	return m
}

func (m *Metrics) observeCreate(timings []StepTiming, err error) {
	var total float64
	for _, t := range timings {
		m.createStep.WithLabelValues(t.Step).Observe(t.Duration.Seconds())
		total += t.Duration.Seconds()
	}
	if len(timings) > 0 {
		m.createStep.WithLabelValues("total").Observe(total)
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.createTotal.WithLabelValues(outcome).Inc()
}

func (m *Metrics) reconcileAction(action string) { m.reconciled.WithLabelValues(action).Inc() }
func (m *Metrics) reconcileActions(action string, n int) {
	m.reconciled.WithLabelValues(action).Add(float64(n))
}

func (m *Metrics) poolHit(d time.Duration) {
	m.poolClaims.WithLabelValues("hit").Inc()
	m.poolClaim.Observe(d.Seconds())
}
func (m *Metrics) poolEvicted()                 { m.poolClaims.WithLabelValues("evicted").Inc() }
func (m *Metrics) poolMiss()                    { m.poolClaims.WithLabelValues("miss").Inc() }
func (m *Metrics) createUndelivered()           { m.undelivered.Inc() }
func (m *Metrics) poolRefilled(d time.Duration) { m.poolRefill.Observe(d.Seconds()) }
func (m *Metrics) poolReady(c PoolClass, ready int) {
	m.poolSize.WithLabelValues(c.String()).Set(float64(ready))
}
