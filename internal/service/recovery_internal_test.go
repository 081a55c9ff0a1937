package service

import (
	"testing"
	"time"
)

// TestRecovery_CarriesTheLifecycle: a sandbox recreated on failover keeps
// its lifecycle rules (the recovery spec carries them).
func TestRecovery_CarriesTheLifecycle(t *testing.T) {
	l := Lifecycle{AutoStop: 15 * time.Minute, DeleteOnStop: true, AutoArchive: time.Hour, PauseOnTimeout: true}
	p, err := placementOf("sb-0123456789abcdef", CreateRequest{Owner: "alice", Image: "img", Failover: FailoverRecreate, Lifecycle: l})
	if err != nil {
		t.Fatal(err)
	}
	req, err := requestOf(p.Recovery)
	if err != nil {
		t.Fatal(err)
	}
	if req.Lifecycle != l || !req.PauseOnTimeout {
		t.Errorf("recovered rules %+v (pause on timeout %v), want %+v", req.Lifecycle, req.PauseOnTimeout, l)
	}
	p, _ = placementOf("sb-0123456789abcdef", CreateRequest{Owner: "alice", Image: "img", Failover: FailoverRecreate})
	if req, _ := requestOf(p.Recovery); req.Lifecycle != (Lifecycle{}) {
		t.Errorf("no rules recovered as %+v", req.Lifecycle)
	}
}
