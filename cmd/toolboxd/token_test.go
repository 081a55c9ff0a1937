package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/agent/handoff"
)

// TestTakeTokenFile_ReadsAndRemovesTheDaemons: the file the daemon
// writes (root's, 0400) is read and removed; none at all is no token and
// no error.
func TestTakeTokenFile_ReadsAndRemovesTheDaemons(t *testing.T) {
	dir := t.TempDir()
	if err := handoff.WriteTokenFile(dir, []byte("tok-123")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, handoff.TokenFileName)
	if os.Getuid() != 0 {
		t.Skip("the daemon's file is root's: run as root")
	}
	got, err := takeTokenFile(path)
	if err != nil || got != "tok-123" {
		t.Fatalf("takeTokenFile = %q, %v", got, err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the token file is still there: %v", err)
	}
	if got, err := takeTokenFile(path); got != "" || err != nil {
		t.Errorf("no file: %q, %v; want nothing", got, err)
	}
}

// TestTakeTokenFile_RefusesAPlantedFile: a token file the daemon did
// not write (a symlink to one the sandbox controls, a FIFO that would
// block, a hard link, another owner, a readable mode, an oversized or
// empty file) is refused, never read as the token, and left alone.
func TestTakeTokenFile_RefusesAPlantedFile(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the owner check is against root")
	}
	for name, plant := range map[string]func(dir, path string) error{
		"symlink": func(dir, path string) error {
			if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("known"), 0o400); err != nil {
				return err
			}
			return os.Symlink(filepath.Join(dir, "mine"), path)
		},
		"fifo": func(_, path string) error { return syscall.Mkfifo(path, 0o400) },
		"hardlink": func(dir, path string) error {
			if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("known"), 0o400); err != nil {
				return err
			}
			return os.Link(filepath.Join(dir, "mine"), path)
		},
		"other owner": func(_, path string) error {
			if err := os.WriteFile(path, []byte("known"), 0o400); err != nil {
				return err
			}
			return os.Chown(path, 1000, 1000)
		},
		"readable by others": func(_, path string) error { return writeMode(path, "known", 0o444) },
		"empty":              func(_, path string) error { return writeMode(path, "", 0o400) },
		"oversized": func(_, path string) error {
			return writeMode(path, strings.Repeat("k", handoff.MaxToken+1), 0o400)
		},
		"directory": func(_, path string) error { return os.Mkdir(path, 0o500) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, handoff.TokenFileName)
			if err := plant(dir, path); err != nil {
				t.Fatal(err)
			}
			got, err := takeTokenFile(path)
			if got != "" || err == nil {
				t.Fatalf("takeTokenFile = %q, %v; want a refusal", got, err)
			}
			if _, lerr := os.Lstat(path); lerr != nil {
				t.Errorf("the refused file was removed: %v", lerr)
			}
		})
	}
}

func writeMode(path, content string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode) // past the umask
}

// An empty token variable (images committed before the token left the
// environment carry it blank) is no token: takeToken returns at once,
// without executing the agent again, and leaves the variable unset.
func TestTakeToken_EmptyVariableIsNoToken(t *testing.T) {
	t.Setenv(envToken, "")
	token, err := takeToken()
	if token != "" || err != nil {
		t.Fatalf("takeToken() = %q, %v; want no token and no re-exec", token, err)
	}
	if _, ok := os.LookupEnv(envToken); ok {
		t.Error("the empty variable is still set")
	}
}
