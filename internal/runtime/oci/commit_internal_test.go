package oci

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/internal/runtime"
)

// TestImportChanges_HostileEnvKeys: an env key with a line break (or
// anything that ends the ENV word) is refused, not spliced into the
// instructions docker import applies.
func TestImportChanges_HostileEnvKeys(t *testing.T) {
	for _, kv := range []string{"A\nUSER 0=x", "A\rB=x", "A B=x", "=x", `A"=x`, "A$B=x"} {
		got, err := importChanges(runtime.ImageConfig{Env: []string{kv}})
		if !errors.Is(err, runtime.ErrInvalidSpec) {
			t.Errorf("env %q: importChanges = %q, %v; want ErrInvalidSpec", kv, got, err)
		}
	}
	if got, err := importChanges(runtime.ImageConfig{Env: []string{"PATH=/bin", "lower_1=a b"}}); err != nil || len(got) != 2 {
		t.Errorf("plain env: %q, %v", got, err)
	}
}
