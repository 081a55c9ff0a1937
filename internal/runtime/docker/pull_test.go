package docker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/testenv/registrytest"
)

// TestCheckAccess_AsksTheRegistry: against a loopback registry with auth,
// CheckAccess answers for the credential it is given, even for an image
// the engine holds (by tag and by digest), and classifies a missing image
// and a registry that is gone as a pull does.
func TestCheckAccess_AsksTheRegistry(t *testing.T) {
	requireEnv(t)
	ctx := t.Context()
	reg := registrytest.Start(t, registrytest.Options{User: "alice", Password: "s3cret-pw"})
	ref := reg.Push(t, testImage, "team/app")
	rt := newRuntime(t, runtimetest.Options{NodeID: "checkaccess-" + runtimetest.NewSandboxID()[3:]})
	good := &runtime.RegistryAuth{ServerAddress: reg.Host, Username: "alice", Password: "s3cret-pw"}
	wrong := &runtime.RegistryAuth{ServerAddress: reg.Host, Username: "alice", Password: "guessed"}

	if err := rt.PullImage(ctx, ref, good, nil); err != nil {
		t.Fatalf("PullImage with the credential: %v", err)
	}
	img, err := rt.InspectImage(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	byDigest := ""
	for _, r := range img.Refs {
		if strings.HasPrefix(r, reg.Host+"/team/app@sha256:") {
			byDigest = r
		}
	}
	if byDigest == "" {
		t.Fatalf("the engine knows %s by no digest: %v", ref, img.Refs)
	}
	for _, tc := range []struct {
		name string
		ref  string
		auth *runtime.RegistryAuth
		want error
	}{
		{"TagGood", ref, good, nil},
		{"DigestGood", byDigest, good, nil},
		{"TagWrong", ref, wrong, runtime.ErrRegistryAuth},
		{"DigestWrong", byDigest, wrong, runtime.ErrRegistryAuth},
		{"DigestNone", byDigest, nil, runtime.ErrRegistryAuth},
		{"Missing", reg.Host + "/team/app:" + registrytest.RandomTag(), good, runtime.ErrNotInRegistry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rt.CheckAccess(ctx, tc.ref, tc.auth)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("CheckAccess(%s) = %v, want %v", tc.ref, err, tc.want)
			}
		})
	}
	// Why a pull is no check: the engine may answer this one from its
	// store without the registry seeing the credential (logged, not
	// asserted: that is the engine's business).
	t.Logf("PullImage by digest with a wrong credential, image present: %v", rt.PullImage(ctx, byDigest, wrong, nil))

	reg.Stop()
	if err := rt.CheckAccess(ctx, ref, good); !errors.Is(err, runtime.ErrRegistryUnavailable) {
		t.Errorf("CheckAccess with the registry gone = %v, want ErrRegistryUnavailable", err)
	}
}
