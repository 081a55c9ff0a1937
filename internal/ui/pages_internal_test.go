package ui

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// hostile is what a tenant or a sandbox may put in any name.
const hostile = `<script>alert(1)</script><img src=x onerror=alert(2)>"'`

// TestPages_RenderAndEscape renders every page with hostile values where
// a tenant or a sandbox chooses them: each renders, and none carries the
// markup unescaped.
func TestPages_RenderAndEscape(t *testing.T) {
	h, err := New(Options{API: http.NotFoundHandler(), APIHost: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	now := time.Now()
	sb := sandboxd.Sandbox{ID: "sb-0123456789abcdef", Name: hostile, Owner: hostile, Image: hostile, State: "running", CPU: 1, MemoryMB: 512, CreatedAt: now}
	quota := &sandboxd.Quota{Sandboxes: 3, CPU: 2, MemoryMB: 2048}
	pages := map[string]any{
		"login": hostile,
		"error": struct {
			Status  int
			Message string
		}{404, hostile},
		"sandboxes": struct {
			Sandboxes    []sandboxd.Sandbox
			DefaultImage string
			Truncated    bool
		}{[]sandboxd.Sandbox{sb}, defaultImage, true},
		"sandbox": struct {
			Sandbox     *sandboxd.Sandbox
			Running     bool
			Dir, Parent string
			Files       []sandboxd.FileEntry
			FilesErr    string
			Ports       []sandboxd.Port
			PortsErr    string
			TID         string
		}{&sb, true, "/tmp/" + hostile, "/tmp", []sandboxd.FileEntry{{Name: hostile, Path: "/tmp/" + hostile, Type: sandboxd.FileTypeFile, ModifiedAt: now}, {Name: hostile, Path: "/tmp/d", Type: sandboxd.FileTypeDir}}, hostile,
			[]sandboxd.Port{{Port: 8080, Protocol: "http", URL: "javascript:alert(3)"}}, hostile, newTID()},
		"templates": []sandboxd.Template{{ID: "tpl-1", Name: hostile, Owner: hostile, Tags: []string{hostile}, State: "ready", Error: hostile, CreatedAt: now}},
		"pools":     []sandboxd.Pool{{Image: hostile, Size: 2, Ready: 1, MemoryMB: 256}},
		"nodes": struct {
			Clustered bool
			Nodes     []node
		}{true, []node{{ID: hostile, APIURL: hostile, Self: true, MilliCPU: 2000}}},
		"tokens": struct {
			Tokens    []sandboxd.Token
			Quota     auth.Quota
			Held      []holding
			Truncated bool
		}{[]sandboxd.Token{{ID: "t1", Name: hostile, Owner: hostile, Quota: quota}, {ID: "t2", Name: "x"}}, auth.Quota{MilliCPU: 1500},
			[]holding{{Owner: hostile, Sandboxes: 2, CPU: 1.5, MemoryMB: 1024, Quota: quota}, {Owner: "b", Mixed: true}}, true},
	}
	for name := range h.pages {
		if _, ok := pages[name]; !ok {
			t.Errorf("page %s has no case here", name)
		}
	}
	for name, data := range pages {
		for _, p := range []auth.Principal{{Role: auth.RoleAdmin}, {Role: auth.RoleUser, Owner: hostile}} {
			var buf strings.Builder
			sess := &session{principal: p, csrf: "c"}
			if err := h.pages[name].Execute(&buf, view{Title: hostile, Owner: p.Owner, Admin: p.IsAdmin(), CSRF: sess.csrf, Data: data}); err != nil {
				t.Fatalf("render %s as %s: %v", name, p.Role, err)
			}
			out := buf.String()
			for _, bad := range []string{"<script>alert", "<img src=x", `href="javascript:`} {
				if strings.Contains(out, bad) {
					t.Errorf("page %s as %s carries %q unescaped", name, p.Role, bad)
				}
			}
		}
	}
}
