package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// labelNode is the label every sandbox container carries with its owning
// node's id (runtime.LabelNode; not imported, so that testenv depends on
// nothing in the module).
const labelNode = "sandboxd.node"

// cleanupTimeout bounds one node's container removal.
const cleanupTimeout = 2 * time.Minute

// nodes are the node ids the tests of this process made containers under
// (TrackNode), so that LeftoverCheck can look at exactly those, and never at
// another package's or another run's containers on the same engine.
var nodes struct {
	sync.Mutex
	ids []string
}

// TrackNode records that t makes containers labelled sandboxd.node=node,
// and removes every such container when t ends, passed or failed. Call it
// before the first container is made; it is safe to call for a node
// another test already tracks.
func TrackNode(t testing.TB, node string) {
	t.Helper()
	Track(node)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if removed, err := RemoveNode(ctx, node); err != nil {
			t.Errorf("remove the containers of node %s: %v", node, err)
		} else if len(removed) > 0 {
			t.Logf("removed %d container(s) of node %s the test left: %s", len(removed), node, strings.Join(removed, ", "))
		}
	})
}

// Track records node for LeftoverCheck without a test: TestMain calls it
// for a fixture shared by the package's tests.
func Track(node string) {
	nodes.Lock()
	defer nodes.Unlock()
	if !slices.Contains(nodes.ids, node) {
		nodes.ids = append(nodes.ids, node)
	}
}

// NodeContainers lists the containers (running or not) labelled
// sandboxd.node=node, one "id name status" line each.
func NodeContainers(ctx context.Context, node string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--no-trunc",
		"--filter", "label="+labelNode+"="+node,
		"--format", "{{.ID}} {{.Names}} {{.Status}}").Output()
	if err != nil {
		return nil, fmt.Errorf("docker ps: %w%s", err, stderr(err))
	}
	var lines []string
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return lines, nil
}

// RemoveNode force-removes every container labelled sandboxd.node=node
// (with its anonymous volumes) and returns what it removed. A container
// already gone is not an error.
func RemoveNode(ctx context.Context, node string) (_ []string, err error) {
	list, err := NodeContainers(ctx, node)
	if err == nil && len(list) == 0 {
		return nil, removeNodeImages(ctx, node)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if ierr := removeNodeImages(ctx, node); ierr != nil && err == nil {
			err = ierr
		}
	}()
	var ids, removed []string
	for _, line := range list {
		ids = append(ids, strings.Fields(line)[0])
		removed = append(removed, line)
	}
	out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f", "-v"}, ids...)...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No such container") {
		return removed, fmt.Errorf("docker rm: %w: %s", err, out)
	}
	return removed, nil
}

// LeftoverCheck is the end of a TestMain that made containers: after
// m.Run (and after the package's shared fixtures are closed) it looks for
// a container of any tracked node, removes those it finds, and returns an
// error listing them. A run that leaks containers fails, even when every
// test passed.
func LeftoverCheck() error {
	nodes.Lock()
	ids := slices.Clone(nodes.ids)
	nodes.Unlock()
	var errs []error
	for _, node := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		removed, err := RemoveNode(ctx, node)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", node, err))
		}
		if len(removed) > 0 {
			errs = append(errs, fmt.Errorf("node %s left %d container(s) after the tests (now removed):\n\t%s",
				node, len(removed), strings.Join(removed, "\n\t")))
		}
	}
	return errors.Join(errs...)
}

// Exit is what TestMain returns after m.Run returned code: code, or 1 with
// the leftovers printed when LeftoverCheck finds any.
func Exit(code int) int {
	if err := LeftoverCheck(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: containers leaked:", err)
		return 1
	}
	return code
}

func stderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// removeNodeImages removes the images node made (templates, snapshots,
// forks' captures carry its node label), once its containers are gone.
func removeNodeImages(ctx context.Context, node string) error {
	out, err := exec.CommandContext(ctx, "docker", "images", "-q", "--filter", "label=sandboxd.node="+node).Output()
	if err != nil {
		return fmt.Errorf("docker images: %w", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return nil
	}
	if out, err := exec.CommandContext(ctx, "docker", append([]string{"rmi", "-f"}, ids...)...).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such image") {
		return fmt.Errorf("docker rmi: %w: %s", err, out)
	}
	return nil
}
