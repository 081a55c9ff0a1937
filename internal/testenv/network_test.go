package testenv_test

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// RemoveNetwork refuses while a container that exists is on the network,
// naming it, and leaves it there; once it is gone the network goes, and a
// network already gone is no error.
func TestRemoveNetwork_NamesALiveContainerAndRemovesOnceItIsGone(t *testing.T) {
	testenv.NeedsDocker(t)
	var b [5]byte
	rand.Read(b[:])
	name := "tenv" + hex.EncodeToString(b[:])
	docker := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), "docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	docker("network", "create", name)
	t.Cleanup(func() { exec.Command("docker", "network", "rm", name).Run() })
	id := docker("run", "-d", "--network", name, "--name", name, "sandboxd/busybox:latest", "sleep", "600")
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })
	err := testenv.RemoveNetwork(t.Context(), name)
	if err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("RemoveNetwork with a live container on it: %v, want an error naming it", err)
	}
	if exec.CommandContext(t.Context(), "docker", "container", "inspect", id).Run() != nil {
		t.Fatal("RemoveNetwork touched the live container")
	}
	docker("rm", "-f", id)
	if err := testenv.RemoveNetwork(t.Context(), name); err != nil {
		t.Fatalf("RemoveNetwork after the container went: %v", err)
	}
	if exec.CommandContext(t.Context(), "docker", "network", "inspect", name).Run() == nil {
		t.Error("the network is still there")
	}
	if err := testenv.RemoveNetwork(t.Context(), name); err != nil {
		t.Errorf("RemoveNetwork of a network already gone: %v", err)
	}
}
