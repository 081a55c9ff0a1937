package admission_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/admission"
	"pgregory.net/rapid"
)

var small = admission.Request{MilliCPU: 1000, MemoryMB: 256}

func checkUsage(t *testing.T, c *admission.Controller, want admission.Request) {
	t.Helper()
	if got, _ := c.Usage(); got != want {
		t.Errorf("used = %s, want %s", got, want)
	}
}

func TestReserve_ConcurrentExactlyBudgetSucceed(t *testing.T) {
	const goroutines, fit = 64, 10
	c := admission.New(admission.Budget{MilliCPU: fit * small.MilliCPU, MemoryMB: 100_000})

	start := make(chan struct{})
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			<-start
			errs[i] = c.Reserve(fmt.Sprintf("sb-%d", i), small)
		})
	}
	close(start)
	wg.Wait()

	var ok, exhausted int
	for i, err := range errs {
		var ee *admission.ExhaustedError
		switch {
		case err == nil:
			ok++
		case errors.Is(err, admission.ErrCapacityExhausted) && errors.As(err, &ee):
			exhausted++
			if ee.RetryAfter <= 0 || ee.Requested != small {
				t.Errorf("sb-%d: ExhaustedError %+v lacks RetryAfter or Requested", i, ee)
			}
		default:
			t.Errorf("sb-%d: unexpected error %v", i, err)
		}
	}
	if ok != fit || exhausted != goroutines-fit {
		t.Errorf("%d reserved, %d exhausted; want %d, %d", ok, exhausted, fit, goroutines-fit)
	}
	checkUsage(t, c, admission.Request{MilliCPU: fit * small.MilliCPU, MemoryMB: fit * small.MemoryMB})
}

func TestReserve_ConcurrentSameID(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 1000, MemoryMB: 1000})
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			if err := c.Reserve("sb-1", small); err != nil {
				t.Errorf("Reserve: %v", err)
			}
		})
	}
	wg.Wait()
	checkUsage(t, c, small)
}

func TestReserve_Idempotent(t *testing.T) {
	// Room for exactly one: the retry must succeed on a full host.
	c := admission.New(admission.Budget{MilliCPU: small.MilliCPU, MemoryMB: small.MemoryMB})
	for range 3 {
		if err := c.Reserve("sb-1", small); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
	}
	checkUsage(t, c, small)
	if err := c.Reserve("sb-2", small); !errors.Is(err, admission.ErrCapacityExhausted) {
		t.Errorf("second id: err = %v, want ErrCapacityExhausted", err)
	}
}

func TestReserve_Resize(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 3000, MemoryMB: 3000})
	mustReserve(t, c, "a", admission.Request{MilliCPU: 1000, MemoryMB: 1000})
	mustReserve(t, c, "b", admission.Request{MilliCPU: 1000, MemoryMB: 1000})

	// Growing within what is free, counting a's own share, succeeds.
	mustReserve(t, c, "a", admission.Request{MilliCPU: 2000, MemoryMB: 1000})
	checkUsage(t, c, admission.Request{MilliCPU: 3000, MemoryMB: 2000})

	// Growing beyond fails and keeps the old size.
	err := c.Reserve("a", admission.Request{MilliCPU: 2500, MemoryMB: 1000})
	var ee *admission.ExhaustedError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want *ExhaustedError", err)
	}
	// Free counts a's own share: it is the most a could grow to.
	if want := (admission.Request{MilliCPU: 2000, MemoryMB: 2000}); ee.Free != want {
		t.Errorf("Free = %s, want %s", ee.Free, want)
	}
	if got, _ := c.Held("a"); got != (admission.Request{MilliCPU: 2000, MemoryMB: 1000}) {
		t.Errorf("a holds %s after a failed resize", got)
	}

	// Shrinking always succeeds.
	mustReserve(t, c, "a", admission.Request{MilliCPU: 500, MemoryMB: 500})
	checkUsage(t, c, admission.Request{MilliCPU: 1500, MemoryMB: 1500})
}

func TestReserve_ExhaustedPerDimension(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 2000, MemoryMB: 512})
	mustReserve(t, c, "a", admission.Request{MilliCPU: 100, MemoryMB: 500})
	// Plenty of CPU, not enough memory.
	err := c.Reserve("b", admission.Request{MilliCPU: 100, MemoryMB: 100})
	if !errors.Is(err, admission.ErrCapacityExhausted) {
		t.Fatalf("err = %v, want ErrCapacityExhausted", err)
	}
	if got, want := err.Error(), "capacity exhausted: requested 100m CPU, 100 MB, free 1900m CPU, 12 MB"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestReserve_ExceedsBudget(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 1000, MemoryMB: 1000})
	err := c.Reserve("a", admission.Request{MilliCPU: 1001, MemoryMB: 1})
	if !errors.Is(err, admission.ErrExceedsBudget) || errors.Is(err, admission.ErrCapacityExhausted) {
		t.Errorf("err = %v, want ErrExceedsBudget only", err)
	}
	checkUsage(t, c, admission.Request{})
}

func TestReserve_Invalid(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 1000, MemoryMB: 1000})
	for _, tt := range []struct {
		id  string
		req admission.Request
	}{
		{"", small},
		{"a", admission.Request{MilliCPU: -1}},
		{"a", admission.Request{MemoryMB: -1}},
	} {
		if err := c.Reserve(tt.id, tt.req); !errors.Is(err, admission.ErrInvalidRequest) {
			t.Errorf("Reserve(%q, %s): err = %v, want ErrInvalidRequest", tt.id, tt.req, err)
		}
	}
	checkUsage(t, c, admission.Request{})
}

func TestReserve_ZeroBudget(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 1000})
	mustReserve(t, c, "cpu-only", admission.Request{MilliCPU: 1000})
	if err := c.Reserve("mem", admission.Request{MemoryMB: 1}); !errors.Is(err, admission.ErrExceedsBudget) {
		t.Errorf("err = %v, want ErrExceedsBudget", err)
	}
}

func TestRelease_FreesCapacity(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: small.MilliCPU, MemoryMB: small.MemoryMB})
	mustReserve(t, c, "a", small)
	c.Release("a")
	c.Release("a")     // idempotent
	c.Release("never") // unknown ids are a no-op
	checkUsage(t, c, admission.Request{})
	if _, ok := c.Held("a"); ok {
		t.Error("a still held after Release")
	}
	mustReserve(t, c, "b", small)
}

func TestReset_RecomputesFromLiveRows(t *testing.T) {
	c := admission.New(admission.Budget{MilliCPU: 2000, MemoryMB: 2000})
	mustReserve(t, c, "gone", small)

	// The rows say three sandboxes live: more than the budget holds.
	c.Reset(map[string]admission.Request{"a": small, "b": small, "c": small})
	checkUsage(t, c, admission.Request{MilliCPU: 3000, MemoryMB: 768})
	if _, ok := c.Held("gone"); ok {
		t.Error("Reset kept a reservation that is not live")
	}
	// Overcommitted: nothing new fits, but retries of live ids succeed.
	var ee *admission.ExhaustedError
	if err := c.Reserve("d", admission.Request{MilliCPU: 1}); !errors.As(err, &ee) {
		t.Fatalf("err = %v, want *ExhaustedError", err)
	}
	if ee.Free != (admission.Request{MilliCPU: 0, MemoryMB: 1232}) {
		t.Errorf("Free = %s, want 0m CPU (never negative)", ee.Free)
	}
	mustReserve(t, c, "a", small)

	c.Release("a")
	c.Release("b")
	mustReserve(t, c, "d", small)
}

func TestNew_NegativeBudget(t *testing.T) {
	b := admission.Budget{MilliCPU: -1, MemoryMB: 10}
	if err := b.Validate(); err == nil {
		t.Error("Validate accepted a negative budget")
	}
	_, got := admission.New(b).Usage()
	if diff := cmp.Diff(admission.Budget{MilliCPU: 0, MemoryMB: 10}, got); diff != "" {
		t.Errorf("budget (-want +got):\n%s", diff)
	}
}

func mustReserve(t *testing.T, c *admission.Controller, id string, req admission.Request) {
	t.Helper()
	if err := c.Reserve(id, req); err != nil {
		t.Fatalf("Reserve(%q, %s): %v", id, req, err)
	}
}

// TestController_Model checks the Controller against a plain map under
// random sequences of operations.
func TestController_Model(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		budget := admission.Budget{
			MilliCPU: rapid.Int64Range(0, 8000).Draw(t, "budget cpu"),
			MemoryMB: rapid.Int64Range(0, 8192).Draw(t, "budget mem"),
		}
		c := admission.New(budget)
		model := map[string]admission.Request{}

		ids := rapid.SampledFrom([]string{"a", "b", "c", "d", "e"})
		reqs := rapid.Custom(func(t *rapid.T) admission.Request {
			return admission.Request{
				MilliCPU: rapid.Int64Range(0, 4000).Draw(t, "cpu"),
				MemoryMB: rapid.Int64Range(0, 4096).Draw(t, "mem"),
			}
		})
		sum := func(m map[string]admission.Request) (s admission.Request) {
			for _, r := range m {
				s.MilliCPU += r.MilliCPU
				s.MemoryMB += r.MemoryMB
			}
			return s
		}
		within := func(r admission.Request, b admission.Budget) bool {
			return r.MilliCPU <= b.MilliCPU && r.MemoryMB <= b.MemoryMB
		}

		t.Repeat(map[string]func(*rapid.T){
			"Reserve": func(t *rapid.T) {
				id, req := ids.Draw(t, "id"), reqs.Draw(t, "req")
				err := c.Reserve(id, req)

				old, held := model[id]
				others := sum(model)
				others.MilliCPU -= old.MilliCPU
				others.MemoryMB -= old.MemoryMB
				after := admission.Request{MilliCPU: others.MilliCPU + req.MilliCPU, MemoryMB: others.MemoryMB + req.MemoryMB}
				switch {
				case held && old == req:
					if err != nil {
						t.Fatalf("retry of %s: %v", id, err)
					}
				case !within(req, budget):
					if !errors.Is(err, admission.ErrExceedsBudget) {
						t.Fatalf("Reserve(%s, %s) = %v, want ErrExceedsBudget", id, req, err)
					}
				case !within(after, budget) && (req.MilliCPU > 0 || req.MemoryMB > 0): // disk alone needs no room
					if !errors.Is(err, admission.ErrCapacityExhausted) {
						t.Fatalf("Reserve(%s, %s) = %v, want ErrCapacityExhausted", id, req, err)
					}
				default:
					if err != nil {
						t.Fatalf("Reserve(%s, %s) = %v, want success", id, req, err)
					}
					model[id] = req
				}
			},
			"Release": func(t *rapid.T) {
				id := ids.Draw(t, "id")
				c.Release(id)
				delete(model, id)
			},
			"Reset": func(t *rapid.T) {
				live := rapid.MapOfN(ids, reqs, 0, 5).Draw(t, "live")
				c.Reset(live)
				model = live
			},
			"": func(t *rapid.T) {
				used, gotBudget := c.Usage()
				if gotBudget != budget {
					t.Fatalf("budget = %+v, want %+v", gotBudget, budget)
				}
				if want := sum(model); used != want {
					t.Fatalf("used = %s, model says %s", used, want)
				}
				for _, id := range []string{"a", "b", "c", "d", "e"} {
					got, ok := c.Held(id)
					want, wantOK := model[id]
					if got != want || ok != wantOK {
						t.Fatalf("Held(%s) = %s, %t; model says %s, %t", id, got, ok, want, wantOK)
					}
				}
			},
		})
	})
}
