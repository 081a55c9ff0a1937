package main

import "testing"

func TestParseConfig(t *testing.T) {
	t.Setenv(envSocket, "/tmp/from-env.sock")
	cfg, err := parseConfig(nil, "tok")
	if err != nil || cfg.socket != "/tmp/from-env.sock" || cfg.token != "tok" {
		t.Errorf("env socket: %+v, %v", cfg, err)
	}
	cfg, err = parseConfig([]string{"--listen", "/tmp/flag.sock"}, "tok")
	if err != nil || cfg.socket != "/tmp/flag.sock" {
		t.Errorf("flag socket: %+v, %v", cfg, err)
	}
	// No token from the environment: the handoff or the token file
	// brings it (main, run).
	if cfg, err := parseConfig([]string{"--handoff", "/run/sandboxd/handoff.sock"}, ""); err != nil || cfg.token != "" || cfg.handoff == "" {
		t.Errorf("no token: %+v, %v", cfg, err)
	}
}
