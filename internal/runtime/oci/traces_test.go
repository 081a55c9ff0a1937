package oci_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime/oci"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
)

// TestTraces_ListASandboxUntilItIsDestroyed: Traces lists a running
// sandbox's directory, mount, cgroups, socket directory, OCI runtime
// state and agent, and nothing of it once it is destroyed; another
// node's runtime on the same directory lists nothing of it.
func TestTraces_ListASandboxUntilItIsDestroyed(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	rt := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	other := newRuntime(t, runtimetest.Options{NodeID: "node-" + runtimetest.NewSandboxID()[3:]})
	id := runtimetest.NewSandboxID()
	if _, err := rt.Create(t.Context(), spec(id)); err != nil {
		t.Fatal(err)
	}
	// Parallel tests share the directories: only this sandbox's traces
	// are looked at.
	kinds := map[string]bool{}
	for _, tr := range of(id, rt.Traces()) {
		kinds[tr.Kind] = true
	}
	for _, k := range []string{oci.TraceDir, oci.TraceMount, oci.TraceCgroup, oci.TraceSocketDir, oci.TraceOCIState, oci.TraceProcess} {
		if !kinds[k] {
			t.Errorf("no %s among the traces of a running sandbox: %v", k, of(id, rt.Traces()))
		}
	}
	if left := of(id, other.Traces()); len(left) > 0 {
		t.Errorf("another node's runtime on the same directories lists %v", left)
	}
	if err := rt.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if left := of(id, rt.Traces(id)); len(left) > 0 {
		t.Errorf("after Destroy: %v", left)
	}
}

// of is the traces of sandbox id among trs.
func of(id string, trs []oci.Trace) []oci.Trace {
	var out []oci.Trace
	for _, tr := range trs {
		if tr.SandboxID == id {
			out = append(out, tr)
		}
	}
	return out
}

// TestNetwork_DestroyWithoutANetworkLeavesNone: a networked sandbox
// destroyed by a runtime that has no network now (its daemon restarted
// without --sandbox-network) loses its namespace, veth and address lease
// all the same.
func TestNetwork_DestroyWithoutANetworkLeavesNone(t *testing.T) {
	requireEnv(t)
	nw := testNetwork(t)
	nw.LeaseDir = "" // the default, under /run/sandboxd-oci: found without the bridge
	t.Cleanup(func() { _ = os.Remove(filepath.Join("/run/sandboxd-oci", nw.Bridge)) })
	node := "node-" + runtimetest.NewSandboxID()[3:]
	rt := newRuntime(t, runtimetest.Options{NodeID: node}, func(o *oci.Options) { o.Network = nw })
	id := runtimetest.NewSandboxID()
	s := spec(id)
	s.Network = true
	if _, err := rt.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, tr := range of(id, rt.Traces(id)) {
		kinds[tr.Kind] = true
	}
	for _, k := range []string{oci.TraceNetns, oci.TraceVeth, oci.TraceLease} {
		if !kinds[k] {
			t.Errorf("no %s among the traces of a networked sandbox: %v", k, rt.Traces(id))
		}
	}
	bare := newRuntime(t, runtimetest.Options{NodeID: node})
	if err := bare.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if left := of(id, rt.Traces(id)); len(left) > 0 {
		t.Errorf("destroyed by a runtime without a network, the sandbox left %v", left)
	}
}
