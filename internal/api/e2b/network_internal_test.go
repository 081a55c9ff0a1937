package e2b

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/service"
)

// TestEgressPolicy: E2B's allow-before-deny settings on sandboxd's
// deny-over-allow policy, and the settings that cannot be held refused
// with a 400 naming the entry.
func TestEgressPolicy(t *testing.T) {
	no, yes := false, true
	none := netpolicy.Policy{Mode: netpolicy.ModeNone}
	open := netpolicy.Policy{Mode: netpolicy.ModeOpen}
	for _, tc := range []struct {
		name    string
		e       egress
		want    netpolicy.Policy
		wantErr string // a part of the 400's message; "" none
	}{
		{name: "nothing given: open", want: open},
		{name: "internet true", e: egress{AllowInternet: &yes}, want: open},
		{name: "internet false: none", e: egress{AllowInternet: &no}, want: none},
		{name: "deny ALL_TRAFFIC: none", e: egress{DenyOut: []string{allTraffic}}, want: none},
		{name: "deny list: open minus it", e: egress{DenyOut: []string{"10.0.0.1", "192.168.0.0/16"}},
			want: netpolicy.Policy{Mode: netpolicy.ModeOpen, Deny: []string{"10.0.0.1/32", "192.168.0.0/16"}}},
		{name: "allow with deny all: restricted", e: egress{AllowOut: []string{"1.1.1.1", "Example.com", "8.8.8.0/24"}, DenyOut: []string{allTraffic, "10.0.0.0/8"}},
			want: netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{"1.1.1.1/32", "8.8.8.0/24", "example.com"}}},
		{name: "allow with internet false: restricted", e: egress{AllowInternet: &no, AllowOut: []string{"1.1.1.1"}},
			want: netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{"1.1.1.1/32"}}},
		{name: "allow outside the deny list: no-op", e: egress{AllowOut: []string{"1.1.1.1"}, DenyOut: []string{"10.0.0.0/8"}},
			want: netpolicy.Policy{Mode: netpolicy.ModeOpen, Deny: []string{"10.0.0.0/8"}}},
		{name: "allow inside the deny list", e: egress{AllowOut: []string{"10.1.2.3"}, DenyOut: []string{"10.0.0.0/8"}}, wantErr: "cannot make an exception"},
		{name: "domains without deny all", e: egress{AllowOut: []string{"example.com"}}, wantErr: "ALL_TRAFFIC"},
		{name: "bad deny CIDR", e: egress{DenyOut: []string{"10.0.0.0/33"}}, wantErr: `network.denyOut`},
		{name: "deny a domain", e: egress{DenyOut: []string{"example.com"}}, wantErr: "domain names are not supported"},
		{name: "bad allow entry", e: egress{AllowOut: []string{"not a host"}, DenyOut: []string{allTraffic}}, wantErr: `network.allowOut`},
		{name: "egress proxy", e: egress{EgressProxy: json.RawMessage(`{"address":"p:1080"}`)}, wantErr: "egressProxy"},
		{name: "null egress proxy", e: egress{EgressProxy: json.RawMessage(`null`)}, want: open},
		{name: "transform rules", e: egress{Rules: json.RawMessage(`{"a.com":[{}]}`)}, wantErr: "rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := egressPolicy(tc.e)
			if tc.wantErr != "" {
				var apiErr *apiError
				if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.wantErr) {
					t.Fatalf("err %v, want a 400 mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNetworkJSON: a read shows the policy in force, keeping the
// create's other network settings.
func TestNetworkJSON(t *testing.T) {
	for _, tc := range []struct {
		name, ann string
		p         netpolicy.Policy
		want      string
	}{
		{"open, nothing given", "", netpolicy.Policy{Mode: netpolicy.ModeOpen}, ""},
		{"none", "", netpolicy.Policy{Mode: netpolicy.ModeNone}, `{"denyOut":["0.0.0.0/0"]}`},
		{"none, asked for allowOut on a daemon without network", `{"allowOut":["1.1.1.1"],"maskRequestHost":"x"}`, netpolicy.Policy{Mode: netpolicy.ModeNone},
			`{"denyOut":["0.0.0.0/0"],"maskRequestHost":"x"}`},
		{"open with a deny list", `{"allowPublicTraffic":false}`, netpolicy.Policy{Mode: netpolicy.ModeOpen, Deny: []string{"10.0.0.1/32"}},
			`{"allowPublicTraffic":false,"denyOut":["10.0.0.1/32"]}`},
		{"restricted to nothing", "", netpolicy.Policy{Mode: netpolicy.ModeRestricted}, `{"allowOut":[],"denyOut":["0.0.0.0/0"]}`},
		{"restricted, a deny rule cutting into the allow list", "", netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: []string{"10.0.0.0/8", "a.com"}, Deny: []string{"10.1.0.0/16"}},
			`{"allowOut":["a.com"],"denyOut":["0.0.0.0/0"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := service.Sandbox{NetworkPolicy: tc.p, Annotations: map[string]string{}}
			if tc.ann != "" {
				sb.Annotations[annNetwork] = tc.ann
			}
			if got := string(networkJSON(sb)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
