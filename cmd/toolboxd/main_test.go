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
	if _, err := parseConfig(nil, ""); err == nil {
		t.Error("no token: want an error")
	}
}
