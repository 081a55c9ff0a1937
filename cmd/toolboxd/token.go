package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/agent/handoff"
)

// The agent token reaches the agent one of three ways, none of which
// leaves it where anything in the sandbox can read it:
//
//   - with the agent socket, over the handoff socket (runc-class
//     sandboxes of both runtimes: package agent/handoff): the agent has
//     it once it took its socket, before it serves;
//   - in the file handoff.TokenFileName of the socket directory (gVisor
//     sandboxes, which have no handoff): takeTokenFile reads it and
//     removes it before the agent serves, and refuses a file the daemon
//     did not write;
//   - in the environment (envToken), for a sandbox created before the
//     token moved to the two above: its container's configuration still
//     carries the variable, and its agent, started again by a newer
//     daemon, takes it from there (takeToken).
//
// Only the last makes the agent execute itself twice.

// envTokenFD names the descriptor the token is handed over on after the
// re-exec (see takeToken).
const envTokenFD = "SANDBOXD_AGENT_TOKEN_FD"

// takeToken returns the agent token the environment carries ("" when it
// carries none) and leaves no trace of it in the environment.
// os.Unsetenv alone is not enough: the kernel keeps the environment a
// process was exec'd with and shows it in /proc/<pid>/environ for its
// whole life. So when the token arrives in the environment, the agent
// writes it to a pipe and re-executes itself (PID 1 stays PID 1) with the
// pipe's read end inherited and the variable removed; the new image reads
// the token from the pipe. If the re-exec fails the token is still taken
// from the environment (and unset), and the failure returned alongside it
// for logging.
func takeToken() (string, error) {
	if fdStr, ok := os.LookupEnv(envTokenFD); ok {
		os.Unsetenv(envTokenFD)
		fd, err := strconv.Atoi(fdStr)
		if err != nil {
			return "", fmt.Errorf("%s=%q: %w", envTokenFD, fdStr, err)
		}
		f := os.NewFile(uintptr(fd), "token")
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}
	token, ok := os.LookupEnv(envToken)
	os.Unsetenv(envToken)
	if !ok || token == "" {
		// An empty variable is no token: images committed before the
		// token left the environment carry it blank, and it holds
		// nothing to hide, so no re-exec.
		return "", nil
	}
	return token, reexecWithout(token)
}

// reexecWithout replaces the process image with itself, handing token over
// on an inherited pipe. It returns only on failure.
func reexecWithout(token string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	// A pipe holds 64 KiB without a reader; a token is far smaller.
	if _, err := io.WriteString(w, token); err != nil {
		w.Close()
		return err
	}
	w.Close()
	fd := int(r.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil { // keep it across exec
		return err
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, envToken+"=") || strings.HasPrefix(kv, envTokenFD+"=")
	})
	env = append(env, envTokenFD+"="+strconv.Itoa(fd))
	err = syscall.Exec("/proc/self/exe", os.Args, env)
	return errors.Join(errors.New("re-exec to drop the token from the environment"), err)
}

// errBadTokenFile is a token file the daemon did not write as it does.
var errBadTokenFile = errors.New("the agent token file is not the daemon's: refused")

// takeTokenFile reads the token file at path and removes it; "" and no
// error when there is none. The daemon writes it as root, mode 0400, a
// regular file with one link and a token of at most handoff.MaxToken
// bytes, in a directory that nothing in the sandbox has run in since it
// cleared it; anything else (a symlink, a FIFO, a hard link, another
// owner, a wider mode, an empty or oversized file) is refused with
// errBadTokenFile and left where it is, and the agent does not start. The
// file is checked through the descriptor it is read from: nothing can be
// swapped between the check and the read. A token that cannot be removed
// is an error too: it would stay readable beside the agent.
func takeTokenFile(path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return "", nil
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return "", fmt.Errorf("%s: %w (a symlink)", path, errBadTokenFile)
		}
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "", fmt.Errorf("%s: %w (not a regular file)", path, errBadTokenFile)
	case st.Uid != 0 || st.Mode&0o077 != 0:
		return "", fmt.Errorf("%s: %w (owner %d, mode %#o)", path, errBadTokenFile, st.Uid, st.Mode&0o7777)
	case st.Nlink != 1:
		return "", fmt.Errorf("%s: %w (%d links)", path, errBadTokenFile, st.Nlink)
	case st.Size <= 0 || st.Size > handoff.MaxToken:
		return "", fmt.Errorf("%s: %w (%d bytes)", path, errBadTokenFile, st.Size)
	}
	b, err := io.ReadAll(io.LimitReader(f, handoff.MaxToken+1))
	if err != nil {
		return "", err
	}
	if len(b) == 0 || len(b) > handoff.MaxToken {
		return "", fmt.Errorf("%s: %w (%d bytes read)", path, errBadTokenFile, len(b))
	}
	if err := os.Remove(path); err != nil {
		return "", fmt.Errorf("remove the agent token file: %w", err)
	}
	return string(b), nil
}
