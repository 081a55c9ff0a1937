package v1

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
)

func TestMilliCPU(t *testing.T) {
	tests := []struct {
		cores float64
		want  int64
	}{
		{0, 0},
		{0.5, 500},
		{1, 1000},
		{0.0001, 1},   // positive stays positive: not "default"
		{-0.0001, -1}, // negative stays negative
		{-2, -2000},
		{1e300, math.MaxInt64},
		{-1e300, math.MinInt64},
	}
	for _, tt := range tests {
		if got := milliCPU(tt.cores); got != tt.want {
			t.Errorf("milliCPU(%v) = %d, want %d", tt.cores, got, tt.want)
		}
	}
}

func TestSeconds_Saturates(t *testing.T) {
	if got := seconds(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("seconds(MaxInt64) = %v, want saturation", got)
	}
	if got := seconds(-math.MaxInt64); got != math.MinInt64 {
		t.Errorf("seconds(-MaxInt64) = %v, want saturation", got)
	}
	if got := seconds(90); got != 90*time.Second {
		t.Errorf("seconds(90) = %v", got)
	}
}

func TestServerTiming(t *testing.T) {
	got := serverTiming([]service.StepTiming{
		{Step: "validate", Duration: 100 * time.Microsecond},
		{Step: "store mounts", Duration: 1500 * time.Microsecond},
		{Step: "", Duration: 0},
		{Step: `a"b;c,d`, Duration: 2 * time.Second},
	})
	want := `validate;dur=0.1, store_mounts;dur=1.5, step;dur=0, a_b_c_d;dur=2000`
	if got != want {
		t.Errorf("serverTiming = %q, want %q", got, want)
	}
}

// TestClassify checks the one mapping from errors to wire codes, and that
// a server error's text never reaches the message.
func TestClassify(t *testing.T) {
	secret := "sbx_deadbeef_0123456789"
	tests := []struct {
		err  error
		want Code
	}{
		{fmt.Errorf("x: %w", service.ErrInvalidArgument), CodeInvalidArgument},
		{&service.FieldError{Field: "cpu", Reason: "too big"}, CodeInvalidArgument},
		{fmt.Errorf("sandbox: %w", service.ErrNotFound), CodeNotFound},
		{store.ErrNotFound, CodeNotFound},
		{service.ErrNameConflict, CodeNameConflict},
		{store.ErrHostnameConflict, CodeHostnameConflict},
		{service.ErrConflict, CodeConflict},
		{service.ErrIdempotencyKeyReused, CodeIdempotencyKeyReused},
		{&service.RetryAfterError{Err: service.ErrCapacityExhausted, After: 1500 * time.Millisecond}, CodeCapacityExhausted},
		{service.ErrUnavailable, CodeUnavailable},
		{fmt.Errorf("%w: no token", auth.ErrUnauthenticated), CodeUnauthenticated},
		{&http.MaxBytesError{Limit: 10}, CodePayloadTooLarge},
		{errorf(CodePermissionDenied, "no"), CodePermissionDenied},
		{errors.New("open db with password " + secret), CodeInternal},
	}
	for _, tt := range tests {
		code, msg := classify(tt.err)
		if code != tt.want {
			t.Errorf("classify(%v) = %s, want %s", tt.err, code, tt.want)
		}
		if code == CodeInternal && msg != "internal error" {
			t.Errorf("internal error message = %q, want the fixed text", msg)
		}
	}
	ra := &service.RetryAfterError{Err: service.ErrCapacityExhausted, After: 1500 * time.Millisecond}
	if got := apierr.RetryAfter(ra); got != "2" {
		t.Errorf("RetryAfter(1.5s) = %q, want 2", got)
	}
}

// TestTemplateWire pins the wire names of the template and the recipe,
// which the API encodes with the service's own JSON tags: a rename there
// must fail here, not change docs/api-v1.md silently.
func TestTemplateWire(t *testing.T) {
	keys := func(v any) []string {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(m))
	}
	tpl := service.Template{ID: "tpl-1", Owner: "o", Name: "n", Kind: store.TemplateBuild, State: store.TemplateReady,
		BaseImage: "b", SourceID: "sb-1", SizeBytes: 1, Error: "e", StartCmd: "s", ReadyCmd: "r"}
	want := []string{"base_image", "created_at", "error", "id", "kind", "name", "owner", "ready_cmd", "size_bytes", "source_id", "start_cmd", "state", "updated_at"}
	if diff := cmp.Diff(want, keys(tpl)); diff != "" {
		t.Errorf("template keys (-want +got):\n%s", diff)
	}
	recipe := service.Recipe{Name: "n", Base: "b", StartCmd: "s", ReadyCmd: "r", Steps: []service.Step{{Run: "x"}}}
	if diff := cmp.Diff([]string{"base", "name", "ready_cmd", "start_cmd", "steps"}, keys(recipe)); diff != "" {
		t.Errorf("recipe keys (-want +got):\n%s", diff)
	}
	step := service.Step{Run: "x", Copy: &service.CopyStep{Path: "/p", Content: []byte("c")}, Env: map[string]string{"A": "b"}, Workdir: "/w", User: "u"}
	if diff := cmp.Diff([]string{"copy", "env", "run", "user", "workdir"}, keys(step)); diff != "" {
		t.Errorf("step keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"content", "path"}, keys(step.Copy)); diff != "" {
		t.Errorf("copy keys (-want +got):\n%s", diff)
	}
}
