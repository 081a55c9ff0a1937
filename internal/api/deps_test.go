// Package api_test keeps the HTTP edges thin: they speak the service's
// and auth's words, never the store's; and they share one error table.
package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sandboxd/sandboxd/"

// harnesses are packages under internal/api that are not edges: they
// build a whole daemon for tests and may reach anything.
var harnesses = map[string]bool{
	module + "internal/api/apitest": true,
}

// TestEdges_DoNotImportStore: no package under internal/api (but the
// test harnesses) imports internal/store; they go through the service
// (service.State, service.Is, service.MaxListLimit) and auth (token
// issuance). Test files are not checked.
func TestEdges_DoNotImportStore(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"internal/api/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || harnesses[fields[0]] {
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			if imp == module+"internal/store" || strings.HasPrefix(imp, module+"internal/store/") {
				t.Errorf("%s imports %s; use the service's words (package service) instead", fields[0], imp)
			}
		}
	}
	if checked < 3 {
		t.Fatalf("checked %d packages, want the three edges at least:\n%s", checked, out)
	}
}

// TestErrorTable_ImportsNoEdge: package apierr, the error table every edge
// uses, imports no edge (v1, e2b, daytona), directly or not, so that any
// edge may use it and none can bend it to its wire.
func TestErrorTable_ImportsNoEdge(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-deps", module+"internal/api/apierr").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for dep := range strings.Lines(string(out)) {
		dep = strings.TrimSpace(dep)
		for _, edge := range []string{"v1", "e2b", "daytona"} {
			if dep == module+"internal/api/"+edge {
				t.Errorf("apierr depends on the edge %s", dep)
			}
		}
	}
}
