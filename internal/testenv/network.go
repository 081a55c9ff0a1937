package testenv

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// RemoveNetwork removes the engine's network name, as a test's cleanup
// does with the network it made. A network already gone is not an error.
//
// The engine can refuse with "has active endpoints" for a moment after the
// last container on it was removed, or keep an endpoint whose container is
// gone (a known race of the engine under load). Such an endpoint is
// disconnected by force and the removal tried again until ctx ends. A
// container that still exists on the network is a leftover of the test:
// that is an error naming it, and it is not disconnected.
func RemoveNetwork(ctx context.Context, name string) error {
	var last error
	for {
		out, err := exec.CommandContext(ctx, "docker", "network", "rm", name).CombinedOutput()
		switch {
		case err == nil, strings.Contains(string(out), "not found"):
			return nil
		case !strings.Contains(string(out), "active endpoints"):
			return fmt.Errorf("docker network rm %s: %w: %s", name, err, out)
		}
		last = fmt.Errorf("docker network rm %s: %w: %s", name, err, out)
		if err := disconnectStale(ctx, name); err != nil {
			return errors.Join(last, err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// disconnectStale force-disconnects from network name every endpoint whose
// container no longer exists, and fails naming any container that does.
func disconnectStale(ctx context.Context, name string) error {
	out, err := exec.CommandContext(ctx, "docker", "network", "inspect", "--format",
		`{{range $id, $c := .Containers}}{{$id}} {{$c.Name}}{{"\n"}}{{end}}`, name).Output()
	if err != nil {
		return fmt.Errorf("docker network inspect %s: %w%s", name, err, stderr(err))
	}
	var live []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if exec.CommandContext(ctx, "docker", "container", "inspect", f[0]).Run() == nil {
			live = append(live, strings.TrimSpace(line))
			continue
		}
		// Gone: the engine's stale endpoint. It takes the container's name
		// when there is one (the id of a removed container is refused).
		target := f[0]
		if len(f) > 1 {
			target = f[1]
		}
		_ = exec.CommandContext(ctx, "docker", "network", "disconnect", "--force", name, target).Run()
	}
	if len(live) > 0 {
		return fmt.Errorf("network %s still has the test's containers on it: %s", name, strings.Join(live, "; "))
	}
	return nil
}
