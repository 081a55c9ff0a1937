package e2b

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/service"
)

func TestRequestHost(t *testing.T) {
	sb := func(network string) service.Sandbox {
		return service.Sandbox{Annotations: map[string]string{annNetwork: network}}
	}
	for _, tc := range []struct {
		network, want string
		ok            bool
	}{
		{"", "8080-sb-1.localhost:7070", true},
		{`{"allowPublicTraffic":false}`, "8080-sb-1.localhost:7070", true},
		{`{"maskRequestHost":""}`, "8080-sb-1.localhost:7070", true},
		{`{"maskRequestHost":"localhost:${PORT}"}`, "localhost:8080", true},
		{`{"maskRequestHost":"${PORT}-app.example.com"}`, "8080-app.example.com", true},
		{`{"maskRequestHost":"app.example.com"}`, "app.example.com", true},
		{`{"maskRequestHost":"[::1]:${PORT}"}`, "[::1]:8080", true},
		{`{"maskRequestHost":"10.0.0.1"}`, "10.0.0.1", true},
		{`{"maskRequestHost":"evil.com/path"}`, "", false},
		{`{"maskRequestHost":"a b.com"}`, "", false},
		{`{"maskRequestHost":"user@host.com"}`, "", false},
		{`{"maskRequestHost":"host.com:99999"}`, "", false},
		{`{"maskRequestHost":"host.com\r\nX-Evil: 1"}`, "", false},
	} {
		got, ok := requestHost(sb(tc.network), 8080, "8080-sb-1.localhost:7070")
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("network %s: requestHost = %q, %v; want %q, %v", tc.network, got, ok, tc.want, tc.ok)
		}
	}
}
