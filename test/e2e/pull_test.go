package e2e_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // tamperRegistryCredential opens the daemon's database

	"github.com/sandboxd/sandboxd/internal/testenv/registrytest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Pulls from a registry on loopback (internal/testenv/registrytest): the
// engine lacks each image until the daemon pulls it.

// repoTag splits "host/repo:tag" into repo and tag.
func repoTag(ref string) (repo, tag string) {
	_, rest, _ := strings.Cut(ref, "/")
	i := strings.LastIndex(rest, ":")
	return rest[:i], rest[i+1:]
}

// imagePresent reports whether the engine has ref.
func imagePresent(ctx context.Context, ref string) bool {
	return exec.CommandContext(ctx, "docker", "image", "inspect", ref).Run() == nil
}

// wantAPIError checks err is an API error with status and code, whose
// message contains each of words.
func wantAPIError(t *testing.T, err error, status int, code sandboxd.ErrorCode, words ...string) *sandboxd.APIError {
	t.Helper()
	var apiErr *sandboxd.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want an API error %d %s", err, status, code)
	}
	if apiErr.Status != status || apiErr.Code != code {
		t.Fatalf("err = %d %s %q, want %d %s", apiErr.Status, apiErr.Code, apiErr.Message, status, code)
	}
	for _, w := range words {
		if !strings.Contains(apiErr.Message, w) {
			t.Errorf("message %q does not say %q", apiErr.Message, w)
		}
	}
	return apiErr
}

// noSandboxOf fails t when the daemon has a sandbox (row) or container
// with image ref.
func noSandboxOf(ctx context.Context, t *testing.T, d *daemonProcess, c *sandboxd.Client, ref string) {
	t.Helper()
	all, err := listAll(ctx, c, sandboxd.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range all {
		if sb.Image == ref {
			t.Errorf("sandbox %s (%s) of image %s is left", sb.ID, sb.State, ref)
		}
	}
	out, err := docker(ctx, "ps", "-a", "--filter", "label=sandboxd.node="+d.NodeID(), "--filter", "ancestor="+ref, "--format", "{{.ID}}")
	if err != nil {
		// The engine refuses an ancestor filter for an image it lacks:
		// then no container can have it either.
		return
	}
	if strings.TrimSpace(out) != "" {
		t.Errorf("containers of image %s are left: %s", ref, out)
	}
}

func TestPull_AnonymousOnCreate(t *testing.T) {
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, busyboxImage, "t/busybox")
	if imagePresent(ctx, ref) {
		t.Fatalf("the engine has %s before the create", ref)
	}
	c := newClient(d, false)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: ref})
	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo pulled"})
	if err != nil || strings.TrimSpace(res.Stdout) != "pulled" {
		t.Fatalf("exec = %+v, %v", res, err)
	}
	repo, tag := repoTag(ref)
	if n := reg.ManifestRequests(repo, tag); n != 1 {
		t.Errorf("the registry was asked for %s:%s %d times, want 1", repo, tag, n)
	}
	// Present now: the next create pulls nothing.
	createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: ref})
	if n := reg.ManifestRequests(repo, tag); n != 1 {
		t.Errorf("after a second create the registry was asked %d times, want 1", n)
	}
}

func TestPull_MissingImageIsNotFound(t *testing.T) {
	d := sharedDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Host + "/t/nothere:" + registrytest.RandomTag()
	c := newClient(d, false)
	_, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128})
	wantAPIError(t, err, http.StatusNotFound, sandboxd.CodeNotFound, ref, "not found in its registry")
	noSandboxOf(ctx, t, d, c, ref)
	if imagePresent(ctx, ref) {
		t.Errorf("the engine has %s", ref)
	}
}

func TestPull_RegistryDownThenBack(t *testing.T) {
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, busyboxImage, "t/busybox")
	reg.Stop()
	c := newClient(d, false)
	req := sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128}
	_, err := c.CreateSandbox(ctx, req)
	apiErr := wantAPIError(t, err, http.StatusServiceUnavailable, sandboxd.CodeUnavailable, "cause: registry")
	if !apiErr.Retryable {
		t.Errorf("a registry that is down is not retryable: %+v", apiErr)
	}
	noSandboxOf(ctx, t, d, c, ref)

	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	createTestSandbox(ctx, t, c, req)
}

// TestPull_RegistryBreaksOffIsUnavailable: a registry that closes the
// connection on the manifest request is a fault (503, cause registry,
// retryable) even when the image's repository is named "unauthorized":
// the engine's message holds the URL, and a word of a name is no
// refusal of credentials. Once the registry answers, the create works.
func TestPull_RegistryBreaksOffIsUnavailable(t *testing.T) {
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, busyboxImage, "t/unauthorized")
	reg.CutManifests(true)
	c := newClient(d, false)
	req := sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128}
	_, err := c.CreateSandbox(ctx, req)
	apiErr := wantAPIError(t, err, http.StatusServiceUnavailable, sandboxd.CodeUnavailable, "cause: registry")
	if !apiErr.Retryable {
		t.Errorf("a registry that broke off is not retryable: %+v", apiErr)
	}
	noSandboxOf(ctx, t, d, c, ref)

	reg.CutManifests(false)
	createTestSandbox(ctx, t, c, req)
}

// pushBigImage builds a local image of about 100 MB over the base image
// (random bytes: nothing compresses them), pushes it to reg and removes
// it from the engine, whose store then lacks its big layer. It returns
// the registry's reference.
func pushBigImage(t *testing.T, reg *registrytest.Registry) string {
	t.Helper()
	big, err := buildBigImage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Push(t, big, "t/big")
	registrytest.RemoveLocal(big)
	return ref
}

func buildBigImage(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "bigimage")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	df := "FROM " + baseImage + "\nRUN head -c 100000000 /dev/urandom > /big.bin\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o600); err != nil {
		return "", err
	}
	ref := "sandboxd-test/big:" + registrytest.RandomTag()
	if _, err := docker(ctx, "build", "--network", "none", "-q", "-t", ref, dir); err != nil {
		return "", err
	}
	return ref, nil
}

func TestPull_RegistryDiesMidPull(t *testing.T) {
	// Parallel: the longest test of the package (building, pushing and
	// twice pulling a 100 MB image, one pull cut), waited out beside the
	// others. It looks only at its own registry, image and sandboxes.
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 10*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := pushBigImage(t, reg)
	// 20 MB/s: the 100 MB layer takes about 5 s, long enough to be cut.
	reg.Slow(0, 20<<20)
	c := newClient(d, false)
	req := sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128}
	errc := make(chan error, 1)
	go func() {
		sb, err := c.CreateSandbox(ctx, req)
		if err == nil {
			// Not expected; destroyed so that nothing is left either way.
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = c.DestroySandbox(dctx, sb.ID)
			err = errors.New("the create succeeded although its registry died mid-pull")
		}
		errc <- err
	}()
	done := false
	t.Cleanup(func() {
		if !done {
			<-errc
		}
	})
	t.Cleanup(func() { reg.Stop() }) // first: a create still waiting ends
	// Wait until the layers are being fetched, then kill the registry.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		fetching := false
		for _, q := range reg.Requests() {
			if q.Method == http.MethodGet && strings.Contains(q.Path, "/t/big/blobs/sha256:") {
				fetching = true
			}
		}
		if fetching {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pull never asked for a layer")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // some bytes flow
	reg.Stop()
	err := <-errc
	done = true
	wantAPIError(t, err, http.StatusServiceUnavailable, sandboxd.CodeUnavailable, "cause: registry")
	noSandboxOf(ctx, t, d, c, ref)
	if imagePresent(ctx, ref) {
		t.Errorf("a pull cut off left the image %s", ref)
	}

	reg.Slow(0, 0)
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	sb := createTestSandbox(ctx, t, c, req)
	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "stat -c %s /big.bin"})
	if err != nil || strings.TrimSpace(res.Stdout) != "100000000" {
		t.Fatalf("exec = %+v, %v", res, err)
	}
}

func TestPull_ConcurrentCreatesMakeOnePull(t *testing.T) {
	t.Parallel() // its own daemon and registry
	requireDocker(t)
	d := startDaemon(t, "pull20", "--cpu-budget", "100000", "--memory-budget", "100000", "--pool", "none")
	ctx := testContext(t, 10*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, busyboxImage, "t/busybox")
	// The manifest is held 3 s: every create arrives while the pull runs.
	reg.Slow(3*time.Second, 0)
	c := newClient(d, false)
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	ids := make([]string, n)
	for i := range n {
		wg.Go(func() {
			sb, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: ref, CPU: 0.1, MemoryMB: 64})
			if err == nil {
				ids[i] = sb.ID
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range n {
		if ids[i] != "" {
			destroyAtEnd(t, c, ids[i])
		}
		if errs[i] != nil {
			t.Errorf("create %d: %v", i, errs[i])
		}
	}
	repo, tag := repoTag(ref)
	if got := reg.ManifestRequests(repo, tag); got != 1 {
		t.Errorf("%d creates asked the registry for %s:%s %d times, want 1", n, repo, tag, got)
	}
}

func TestPull_OperatorControls(t *testing.T) {
	requireDocker(t)
	ctx := testContext(t, 5*time.Minute)
	allowed := registrytest.Start(t, registrytest.Options{})
	other := registrytest.Start(t, registrytest.Options{})
	d := startDaemon(t, "pullpolicy", "--registry-allow", allowed.Host, "--image-max-mb", "1", "--pool", "none")
	c := newClient(d, false)

	t.Run("RegistryNotAllowed", func(t *testing.T) {
		ref := other.Push(t, busyboxImage, "t/busybox")
		before := len(other.Requests())
		_, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128})
		wantAPIError(t, err, http.StatusForbidden, sandboxd.CodePermissionDenied, other.Host, "--registry-allow")
		if got := other.Requests()[before:]; len(got) != 0 {
			t.Errorf("the registry not allowed was asked: %v", got)
		}
		noSandboxOf(ctx, t, d, c, ref)
	})
	t.Run("ImageOverTheCap", func(t *testing.T) {
		ref := allowed.Push(t, busyboxImage, "t/busybox") // about 2 MB
		_, err := c.CreateSandbox(ctx, sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128})
		wantAPIError(t, err, http.StatusBadRequest, sandboxd.CodeInvalidArgument, "2 MB", "cap of 1 MB", "--image-max-mb")
		noSandboxOf(ctx, t, d, c, ref)
		if imagePresent(ctx, ref) {
			t.Errorf("the image past the cap, %s, is still there", ref)
		}
	})
	t.Run("ImageOverTheCapOnTheFacades", func(t *testing.T) {
		// The image exists: a client error that will not clear (400, not
		// E2B's 404 "template not found"), naming the cap.
		ref := allowed.Push(t, busyboxImage, "t/busybox")
		status, body := call(ctx, d, http.MethodPost, "/sandboxes", map[string]any{"templateID": ref, "timeout": 60})
		if status != http.StatusBadRequest || !strings.Contains(string(body), `"code":400`) || !strings.Contains(string(body), "cap of 1 MB") {
			t.Errorf("E2B create of an image over the cap: %d %s; want 400 {code: 400} naming the cap", status, body)
		}
		status, body = call(ctx, d, http.MethodPost, "/daytona/api/sandbox", map[string]any{"snapshot": ref})
		if status != http.StatusBadRequest || !strings.Contains(string(body), `"statusCode":400`) || !strings.Contains(string(body), "cap of 1 MB") {
			t.Errorf("Daytona create of an image over the cap: %d %s; want 400 {statusCode: 400} naming the cap", status, body)
		}
		noSandboxOf(ctx, t, d, c, ref)
		if imagePresent(ctx, ref) {
			t.Errorf("the image past the cap, %s, is still there", ref)
		}
	})
	t.Run("PresentImagesStayUsable", func(t *testing.T) {
		// The allow list is for pulls: an image on the host is used
		// whatever registry its name says.
		createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: busyboxImage})
	})
}

// userClient makes a user token of owner on d and returns its client.
func userClient(ctx context.Context, t *testing.T, d *daemonProcess, owner string) *sandboxd.Client {
	t.Helper()
	tok, err := newClient(d, false).CreateToken(ctx, sandboxd.CreateTokenRequest{Name: owner, Role: sandboxd.RoleUser, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	return sandboxd.New(d.URL(), tok.Secret, sandboxd.WithRetryPolicy(sandboxd.RetryPolicy{MaxAttempts: 1}))
}

func TestPull_RegistryCredentialsPerOwner(t *testing.T) {
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{User: "alice", Password: "s3cret-pw"})
	ref := reg.Push(t, busyboxImage, "team/app")
	suffix := registrytest.RandomTag()
	alice := userClient(ctx, t, d, "alice-"+suffix)
	mallory := userClient(ctx, t, d, "mallory-"+suffix)
	eve := userClient(ctx, t, d, "eve-"+suffix)
	req := sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128}

	// Without a credential the registry refuses the pull.
	_, err := alice.CreateSandbox(ctx, req)
	wantAPIError(t, err, http.StatusForbidden, sandboxd.CodePermissionDenied, reg.Host, "refused the credentials")
	noSandboxOf(ctx, t, d, newClient(d, false), ref)

	// With one, it works; the secret is never answered.
	if _, err := alice.PutRegistryCredential(ctx, reg.Host, "alice", "s3cret-pw"); err != nil {
		t.Fatal(err)
	}
	creds, err := alice.ListRegistryCredentials(ctx)
	if err != nil || len(creds) != 1 || creds[0].Host != reg.Host || creds[0].Username != "alice" {
		t.Fatalf("ListRegistryCredentials = %+v, %v", creds, err)
	}
	sb := createTestSandbox(ctx, t, alice, req)
	if sb.Image != ref {
		t.Errorf("image = %q", sb.Image)
	}
	if !imagePresent(ctx, ref) {
		t.Fatalf("the engine lacks %s after alice's create", ref)
	}
	asked := len(reg.Requests())

	// Another owner without a credential cannot use the node's copy.
	_, err = eve.CreateSandbox(ctx, req)
	wantAPIError(t, err, http.StatusForbidden, sandboxd.CodePermissionDenied, reg.Host, "refused the credentials")
	if img, err := eve.GetImage(ctx, ref); err != nil || img.Present {
		t.Errorf("eve's GetImage = %+v, %v: want not present", img, err)
	}
	if len(reg.Requests()) == asked {
		t.Errorf("eve's create did not ask the registry (the node's copy was used unchecked)")
	}
	// Nor by the image's id, or a prefix of it (the engine takes both).
	id, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", ref)
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	for _, byID := range []string{id, strings.TrimPrefix(id, "sha256:")[:12]} {
		sb, err := eve.CreateSandbox(ctx, sandboxd.CreateRequest{Image: byID, CPU: 0.25, MemoryMB: 128})
		if err == nil {
			destroyAtEnd(t, eve, sb.ID)
		}
		wantAPIError(t, err, http.StatusBadRequest, sandboxd.CodeInvalidArgument, "not by its id")
	}
	// One with a wrong credential neither.
	if _, err := mallory.PutRegistryCredential(ctx, reg.Host, "alice", "guessed"); err != nil {
		t.Fatal(err)
	}
	_, err = mallory.CreateSandbox(ctx, req)
	wantAPIError(t, err, http.StatusForbidden, sandboxd.CodePermissionDenied, reg.Host, "refused the credentials")
	for _, c := range []*sandboxd.Client{eve, mallory} {
		all, err := listAll(ctx, c, sandboxd.ListOptions{})
		if err != nil || len(all) != 0 {
			t.Errorf("a refused owner has sandboxes: %+v, %v", all, err)
		}
	}
	// Alice still can; her credential removed, she cannot.
	createTestSandbox(ctx, t, alice, req)
	if err := alice.DeleteRegistryCredential(ctx, reg.Host); err != nil {
		t.Fatal(err)
	}
	_, err = alice.CreateSandbox(ctx, req)
	wantAPIError(t, err, http.StatusForbidden, sandboxd.CodePermissionDenied, reg.Host)
	// With every credential for the host gone the node's copy is still
	// the private registry's: nobody without access uses it.
	if err := mallory.DeleteRegistryCredential(ctx, reg.Host); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*sandboxd.Client{eve, mallory} {
		sb, err := c.CreateSandbox(ctx, req)
		if err == nil {
			destroyAtEnd(t, c, sb.ID)
		}
		wantAPIError(t, err, http.StatusForbidden, sandboxd.CodePermissionDenied, reg.Host)
	}
}

// TestPull_PresentImageByDigestChecksTheCredential: once alice pulled a
// private registry's image with her credential, the node holds it by its
// registry digest too. Mallory, with a WRONG credential for the same
// registry, and eve, with none, name it by that digest (and by its tag):
// each is refused, because the check asks the registry itself (a pull by
// digest of an image the engine holds may be answered from the engine's
// own store, where no credential is checked).
func TestPull_PresentImageByDigestChecksTheCredential(t *testing.T) {
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{User: "alice", Password: "s3cret-pw"})
	ref := reg.Push(t, busyboxImage, "team/app")
	suffix := registrytest.RandomTag()
	alice := userClient(ctx, t, d, "alice-"+suffix)
	mallory := userClient(ctx, t, d, "mallory-"+suffix)
	eve := userClient(ctx, t, d, "eve-"+suffix)
	if _, err := alice.PutRegistryCredential(ctx, reg.Host, "alice", "s3cret-pw"); err != nil {
		t.Fatal(err)
	}
	createTestSandbox(ctx, t, alice, sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128})
	out, err := docker(ctx, "image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", ref)
	if err != nil {
		t.Fatal(err)
	}
	repo, _, _ := strings.Cut(ref[strings.Index(ref, "/")+1:], ":")
	byDigest := ""
	for line := range strings.Lines(out) {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, reg.Host+"/"+repo+"@sha256:") {
			byDigest = l
		}
	}
	if byDigest == "" {
		t.Fatalf("the engine knows %s by no digest of %s: %q", ref, reg.Host, out)
	}
	if _, err := mallory.PutRegistryCredential(ctx, reg.Host, "alice", "guessed"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		client *sandboxd.Client
	}{{"mallory (wrong credential)", mallory}, {"eve (none)", eve}} {
		for _, image := range []string{byDigest, ref} {
			asked := len(reg.Requests())
			sb, err := c.client.CreateSandbox(ctx, sandboxd.CreateRequest{Image: image, CPU: 0.25, MemoryMB: 128})
			if err == nil {
				destroyAtEnd(t, c.client, sb.ID)
				t.Errorf("%s created a sandbox of %s, the image alice pulled", c.name, image)
				continue
			}
			wantAPIError(t, err, http.StatusForbidden, sandboxd.CodePermissionDenied, reg.Host, "refused the credentials")
			if len(reg.Requests()) == asked {
				t.Errorf("%s's create of %s did not ask the registry", c.name, image)
			}
			if img, err := c.client.PullImage(ctx, image); err == nil {
				t.Errorf("%s's pull of %s = %+v, want refused", c.name, image, img)
			}
		}
		all, err := listAll(ctx, c.client, sandboxd.ListOptions{})
		if err != nil || len(all) != 0 {
			t.Errorf("%s has sandboxes: %+v, %v", c.name, all, err)
		}
	}
	// Alice, by digest too.
	createTestSandbox(ctx, t, alice, sandboxd.CreateRequest{Image: byDigest, CPU: 0.25, MemoryMB: 128})
}

func TestPull_ImagesAPI(t *testing.T) {
	d := sharedDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, busyboxImage, "t/busybox")
	c := newClient(d, true)
	img, err := c.GetImage(ctx, ref)
	if err != nil || img.Present || img.Pulling {
		t.Fatalf("GetImage before = %+v, %v", img, err)
	}
	for range 2 { // idempotent
		img, err = c.PullImage(ctx, ref)
		if err != nil || !img.Present || img.SizeBytes <= 0 {
			t.Fatalf("PullImage = %+v, %v", img, err)
		}
	}
	if img, err = c.GetImage(ctx, ref); err != nil || !img.Present {
		t.Fatalf("GetImage after = %+v, %v", img, err)
	}
	repo, tag := repoTag(ref)
	if n := reg.ManifestRequests(repo, tag); n != 1 {
		t.Errorf("two pulls asked the registry %d times, want 1", n)
	}
	_, err = c.PullImage(ctx, reg.Host+"/t/nothere:v1")
	wantAPIError(t, err, http.StatusNotFound, sandboxd.CodeNotFound, "not found in its registry")
}

func TestPull_CLI(t *testing.T) {
	d := sharedDaemon(t)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, busyboxImage, "t/busybox")
	dir := t.TempDir()
	if r := mustSbx(t, d, dir, "images", ref); !strings.Contains(r.stdout, "absent") {
		t.Errorf("sbx images before the pull: %q", r.stdout)
	}
	if r := mustSbx(t, d, dir, "pull", ref); !strings.Contains(r.stdout, ref+": present") {
		t.Errorf("sbx pull: %q", r.stdout)
	}
	if r := mustSbx(t, d, dir, "images", ref); !strings.Contains(r.stdout, "present") {
		t.Errorf("sbx images after the pull: %q", r.stdout)
	}
	if r := sbx(t, d, dir, "pull", reg.Host+"/t/nothere:v1"); r.code == 0 || !strings.Contains(r.stderr, "not found in its registry") {
		t.Errorf("sbx pull of a missing image: exit %d, stderr %q", r.code, r.stderr)
	}
}

// tamperRegistryCredential flips one byte of the sealed secret of owner's
// credential for host in d's database, as a bit rot or an attacker with
// the file would: the keyring can no longer open it.
func tamperRegistryCredential(ctx context.Context, t *testing.T, d *daemonProcess, owner, host string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.DataDir(), "sandboxd.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var sealed []byte
	if err := db.QueryRowContext(ctx, `SELECT sealed_secret FROM registry_credentials WHERE owner = ? AND host = ?`, owner, host).Scan(&sealed); err != nil {
		t.Fatalf("read the sealed credential: %v", err)
	}
	sealed[len(sealed)-1] ^= 0xff
	res, err := db.ExecContext(ctx, `UPDATE registry_credentials SET sealed_secret = ? WHERE owner = ? AND host = ?`, sealed, owner, host)
	if err != nil {
		t.Fatalf("tamper with the sealed credential: %v", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("tampered with %d rows, %v; want 1", n, err)
	}
}

// TestPull_UndecryptableCredential: a stored credential the keyring can no
// longer open (its row altered in the database) makes a pull that needs it
// answer 503 naming the registry and what to do, logged, never an opaque
// 500; storing the credential again clears it.
func TestPull_UndecryptableCredential(t *testing.T) {
	d := sharedDaemon(t)
	ctx := testContext(t, 5*time.Minute)
	reg := registrytest.Start(t, registrytest.Options{User: "alice", Password: "s3cret-pw"})
	ref := reg.Push(t, busyboxImage, "team/app")
	owner := "tamper-" + registrytest.RandomTag()
	c := userClient(ctx, t, d, owner)
	if _, err := c.PutRegistryCredential(ctx, reg.Host, "alice", "s3cret-pw"); err != nil {
		t.Fatal(err)
	}
	tamperRegistryCredential(ctx, t, d, owner, reg.Host)

	req := sandboxd.CreateRequest{Image: ref, CPU: 0.25, MemoryMB: 128}
	_, err := c.CreateSandbox(ctx, req)
	apiErr := wantAPIError(t, err, http.StatusServiceUnavailable, sandboxd.CodeUnavailable,
		"stored credential for registry "+reg.Host, "cannot be decrypted", "store it again")
	if !apiErr.Retryable {
		t.Errorf("a 503 is retryable: %+v", apiErr)
	}
	_, err = c.PullImage(ctx, ref)
	wantAPIError(t, err, http.StatusServiceUnavailable, sandboxd.CodeUnavailable, "stored credential for registry "+reg.Host)
	noSandboxOf(ctx, t, d, newClient(d, false), ref)
	if imagePresent(ctx, ref) {
		t.Errorf("the engine has %s", ref)
	}
	if log := d.LogTail(2000); !strings.Contains(log, "registry credential cannot be decrypted") || !strings.Contains(log, owner) {
		t.Errorf("the daemon did not log the undecryptable credential:\n%s", d.LogTail(40))
	}

	// Stored again, it opens.
	if _, err := c.PutRegistryCredential(ctx, reg.Host, "alice", "s3cret-pw"); err != nil {
		t.Fatal(err)
	}
	createTestSandbox(ctx, t, c, req)
}
