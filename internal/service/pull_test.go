package service_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/testenv/registrytest"
)

// heldPuller holds each pull of the engine's Puller until release is
// closed (a fault: a slow registry), and reports when a pull starts and
// when one is cancelled while held.
type heldPuller struct {
	runtime.Puller
	started   chan string
	cancelled chan string
	release   chan struct{}
}

func newHeldPuller(p runtime.Puller) *heldPuller {
	return &heldPuller{Puller: p, started: make(chan string, 16), cancelled: make(chan string, 16), release: make(chan struct{})}
}

func (h *heldPuller) PullImage(ctx context.Context, ref string, auth *runtime.RegistryAuth, progress func(runtime.PullProgress)) error {
	h.started <- ref
	select {
	case <-h.release:
	case <-ctx.Done():
		h.cancelled <- ref
		return ctx.Err()
	}
	return h.Puller.PullImage(ctx, ref, auth, progress)
}

func present(ref string) bool { return exec.Command("docker", "image", "inspect", ref).Run() == nil }

func wait[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestPull_WaiterLeavesPullGoesOn: a waiter whose context ends stops
// waiting; the one pull goes on for the other waiter.
func TestPull_WaiterLeavesPullGoesOn(t *testing.T) {
	var held *heldPuller
	h := newHarness(t, harnessOptions{puller: func(p runtime.Puller) runtime.Puller { held = newHeldPuller(p); return held }})
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, busybox, "t/busybox")

	leaving, leave := context.WithCancel(t.Context())
	errc := make(chan error, 2)
	go func() { errc <- h.svc.PullImage(leaving, admin, ref) }()
	wait(t, held.started, "the pull to start")
	go func() { errc <- h.svc.PullImage(t.Context(), admin, ref) }()
	// The second waiter joins the pull under way: no second pull starts.
	st, err := h.svc.ImageStatus(t.Context(), admin, ref)
	if err != nil || !st.Pulling {
		t.Fatalf("ImageStatus = %+v, %v: want pulling", st, err)
	}
	leave()
	if err := wait(t, errc, "the leaving waiter"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the leaving waiter got %v, want context.Canceled", err)
	}
	close(held.release)
	if err := wait(t, errc, "the staying waiter"); err != nil {
		t.Fatalf("the staying waiter got %v", err)
	}
	if len(held.cancelled) != 0 || len(held.started) != 0 {
		t.Errorf("pulls cancelled %d, started again %d: want the one pull to go on", len(held.cancelled), len(held.started))
	}
	if !present(ref) {
		t.Errorf("the engine lacks %s", ref)
	}
	if n := reg.ManifestRequests("t/busybox", ref[strings.LastIndex(ref, ":")+1:]); n != 1 {
		t.Errorf("the registry was asked %d times, want 1", n)
	}
}

// TestPull_AbandonedPullIsCancelled: a pull nobody waits for any more is
// cancelled once the grace has passed, leaving no image; the next create
// pulls afresh.
func TestPull_AbandonedPullIsCancelled(t *testing.T) {
	var held *heldPuller
	h := newHarness(t, harnessOptions{
		pullIdleGrace: 200 * time.Millisecond,
		puller:        func(p runtime.Puller) runtime.Puller { held = newHeldPuller(p); return held },
	})
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, busybox, "t/busybox")

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- h.svc.PullImage(ctx, admin, ref) }()
	wait(t, held.started, "the pull to start")
	cancel()
	if err := wait(t, errc, "the waiter"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter got %v", err)
	}
	wait(t, held.cancelled, "the abandoned pull to be cancelled")
	if present(ref) {
		t.Errorf("an abandoned pull left %s", ref)
	}
	st, err := h.svc.ImageStatus(t.Context(), admin, ref)
	if err != nil || st.Pulling || st.Present {
		t.Fatalf("ImageStatus = %+v, %v: want neither pulling nor present", st, err)
	}

	close(held.release)
	if err := h.svc.PullImage(t.Context(), admin, ref); err != nil {
		t.Fatal(err)
	}
	if !present(ref) {
		t.Errorf("the engine lacks %s", ref)
	}
}

// TestPull_PrivateOwnersCheckedThenJoined: on a registry with auth, each
// owner's access is asked of the registry first; owners that pass join
// the one pull under way (each was checked), and an owner with a wrong
// credential is refused at once, pull or no pull, by tag and, once the
// image is present, by digest.
func TestPull_PrivateOwnersCheckedThenJoined(t *testing.T) {
	var held *heldPuller
	h := newHarness(t, harnessOptions{puller: func(p runtime.Puller) runtime.Puller { held = newHeldPuller(p); return held }})
	reg := registrytest.Start(t, registrytest.Options{User: "alice", Password: "s3cret-pw"})
	ref := reg.Push(t, busybox, "team/app")
	alice, bob, mallory := service.Caller{Owner: "alice"}, service.Caller{Owner: "bob"}, service.Caller{Owner: "mallory"}
	for c, pw := range map[service.Caller]string{alice: "s3cret-pw", bob: "s3cret-pw", mallory: "guessed"} {
		if _, err := h.svc.PutRegistryCredential(t.Context(), c, service.RegistryCredentialInput{Host: reg.Host, Username: "alice", Password: pw}); err != nil {
			t.Fatal(err)
		}
	}

	errc := make(chan error, 2)
	go func() { errc <- h.svc.PullImage(t.Context(), alice, ref) }()
	wait(t, held.started, "alice's pull to start")
	go func() { errc <- h.svc.PullImage(t.Context(), bob, ref) }()
	// Refused by the check, without waiting for the pull held meanwhile
	// (the bound only keeps a wrong answer from hanging the test).
	mctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	err := h.svc.PullImage(mctx, mallory, ref)
	cancel()
	if !errors.Is(err, service.ErrPermissionDenied) {
		t.Errorf("mallory's pull during alice's = %v, want permission denied", err)
	}
	close(held.release)
	for range 2 {
		if err := wait(t, errc, "alice's and bob's pulls"); err != nil {
			t.Fatalf("a checked owner's pull: %v", err)
		}
	}
	if n := len(held.started); n != 0 {
		t.Errorf("%d more pulls started: want bob to join alice's", n)
	}

	out, err := exec.CommandContext(t.Context(), "docker", "image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", ref).Output()
	if err != nil {
		t.Fatal(err)
	}
	byDigest := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if !strings.Contains(byDigest, "@sha256:") {
		t.Fatalf("no digest of %s: %q", ref, out)
	}
	for _, image := range []string{ref, byDigest} {
		if err := h.svc.PullImage(t.Context(), mallory, image); !errors.Is(err, service.ErrPermissionDenied) {
			t.Errorf("mallory's pull of the present %s = %v, want permission denied", image, err)
		}
		if err := h.svc.PullImage(t.Context(), bob, image); err != nil {
			t.Errorf("bob's pull of the present %s = %v", image, err)
		}
	}
	if n := len(held.started); n != 0 {
		t.Errorf("%d pulls of a present image started: want access checks only", n)
	}
}
