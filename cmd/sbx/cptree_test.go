package main

import "testing"

func TestRemoteBase(t *testing.T) {
	for p, want := range map[string]string{
		"/":         "root",
		"//":        "root",
		"/tmp/app":  "app",
		"/tmp/app/": "app",
		"app":       "app",
		"~/app":     "app",
		"~":         "",
		".":         "",
		"/tmp/..":   "",
	} {
		if got := remoteBase(p); got != want {
			t.Errorf("remoteBase(%q) = %q, want %q", p, got, want)
		}
	}
}
