package daytona_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestCreate_UnhonouredFieldsAreRefusedByName: a CreateSandbox field the
// facade does not act on was dropped (200, nothing done); it is a 400
// whose message names the field, and it leaves nothing behind.
func TestCreate_UnhonouredFieldsAreRefusedByName(t *testing.T) {
	s := need(t)
	for field, value := range map[string]any{
		"linkedSandbox":        "sb-0000000000000000",
		"ttlMinutes":           30,
		"autoPauseInterval":    15,
		"secrets":              []map[string]string{{"TOKEN": "vault-name"}},
		"kvm":                  true,
		"spot":                 true,
		"gpuType":              []string{"H100"},
		"outboundProxyUrl":     "http://127.0.0.1:3128",
		"otelEndpointOverride": "http://127.0.0.1:4318",
		"notADaytonaField":     "x",
	} {
		t.Run(field, func(t *testing.T) {
			before := footprint(t, s)
			body := wantError(t, s.do(t, s.User, http.MethodPost, "/sandbox", map[string]any{field: value}), http.StatusBadRequest)
			if !strings.Contains(body.Message, field) {
				t.Errorf("message %q does not name %s", body.Message, field)
			}
			if after := footprint(t, s); after != before {
				t.Errorf("before %s, after %s", before, after)
			}
		})
	}
}

// TestCreate_ZeroValuedFieldsAskForNothing: what the SDK sends for options
// left alone (false, 0, "", [], null) is not a request, and passes.
func TestCreate_ZeroValuedFieldsAskForNothing(t *testing.T) {
	s := need(t)
	sb := s.create(t, s.User, map[string]any{
		"linkedSandbox": "", "ttlMinutes": 0, "autoPauseInterval": 0, "secrets": []any{},
		"kvm": false, "spot": false, "gpuType": nil, "outboundProxyUrl": nil, "gpu": 0,
	})
	if sb.State != "started" {
		t.Errorf("state %q, want started", sb.State)
	}
}
