package oci_test

import (
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
	kinds := map[string]bool{}
	// Parallel tests share the directories: a create of theirs in
	// progress has a temporary directory without its meta.json yet,
	// which tells no node.
	for _, tr := range rt.Traces() {
		if tr.SandboxID != id && tr.Kind != oci.TraceTmpDir {
			t.Errorf("a trace of another sandbox: %+v", tr)
		}
		kinds[tr.Kind] = true
	}
	for _, k := range []string{oci.TraceDir, oci.TraceMount, oci.TraceCgroup, oci.TraceSocketDir, oci.TraceOCIState, oci.TraceProcess} {
		if !kinds[k] {
			t.Errorf("no %s among the traces of a running sandbox: %v", k, rt.Traces())
		}
	}
	for _, tr := range other.Traces() {
		if tr.Kind != oci.TraceTmpDir {
			t.Errorf("another node's runtime on the same directories lists %+v", tr)
		}
	}
	if err := rt.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if left := rt.Traces(id); len(left) > 0 {
		t.Errorf("after Destroy: %v", left)
	}
}
