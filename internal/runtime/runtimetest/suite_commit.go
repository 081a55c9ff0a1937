package runtimetest

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// committer is a runtime that captures its sandboxes as images
// (runtime.Images' Commit; the oci runtime has Commit alone, the engine
// keeping its images).
type committer interface {
	Commit(ctx context.Context, sandboxID, ref string, cfg runtime.ImageConfig) (runtime.Image, error)
}

// testCommit: what a sandbox did to its file system (a file added, one
// of the image's changed, one deleted, a directory of the image removed
// and made again, a symlink, a hard link, a setuid file) is what a
// sandbox of its commit sees, and nothing else of it (its host name is
// its own): the same on every runtime that commits.
func (s *suite) testCommit(t *testing.T) {
	rt, _ := s.newRuntime(t)
	c, ok := rt.(committer)
	remove := s.cfg.RemoveImage
	if imgs, ok := rt.(runtime.Images); ok {
		// The runtime's own removal: what its commit made goes with it.
		remove = func(ref string) {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if err := imgs.RemoveImage(ctx, ref); err != nil {
				t.Errorf("RemoveImage(%s): %v", ref, err)
			}
		}
	}
	if !ok || remove == nil {
		t.Skip("the runtime does not commit sandboxes (or removes no image: Config.RemoveImage)")
	}
	id := NewSandboxID()
	spec := s.spec(id)
	s.create(t, rt, spec)
	ac := agentClient(t, rt, id, spec.AgentToken)
	if res := sh(t, ac, `set -e
		echo added > /home/added
		echo 'extra:x:4242:' >> /etc/group
		rm /usr/bin/cal
		rm -rf /usr/sbin && mkdir /usr/sbin && echo only > /usr/sbin/only
		ln -s /home/added /home/link
		ln /home/added /home/hard
		echo s > /home/suid && chmod 4755 /home/suid`); res.ExitCode != 0 {
		t.Fatalf("the changes: exit %d, %s", res.ExitCode, res.Stderr)
	}
	ref := "sandboxd/runtimetest-commit:" + id
	t.Cleanup(func() { remove(ref) })
	if _, err := c.Commit(opCtx(t), id, ref, runtime.ImageConfig{Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	id2 := NewSandboxID()
	spec2 := s.spec(id2)
	spec2.Image = ref
	s.create(t, rt, spec2)
	ac2 := agentClient(t, rt, id2, spec2.AgentToken)
	res := sh(t, ac2, `cat /home/added; tail -n 1 /etc/group; ls /usr/bin/cal 2>/dev/null || echo no cal; ls /usr/sbin; readlink /home/link
		[ "$(stat -c %i /home/added)" = "$(stat -c %i /home/hard)" ] && stat -c %h /home/hard; stat -c %a /home/suid`)
	if want := "added\nextra:x:4242:\nno cal\nonly\n/home/added\n2\n4755\n"; string(res.Stdout) != want {
		t.Errorf("in a sandbox of the commit:\n%q (stderr %q)\nwant\n%q", res.Stdout, res.Stderr, want)
	}
	h1, h2 := sh(t, ac, "hostname").Stdout, sh(t, ac2, "hostname").Stdout
	if strings.TrimSpace(string(h2)) == "" || string(h1) == string(h2) {
		t.Errorf("the sandbox of the commit is named %q, the committed one %q: want a name of its own", h2, h1)
	}
}
