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
)

// envTokenFD names the descriptor the token is handed over on after the
// re-exec (see takeToken).
const envTokenFD = "SANDBOXD_AGENT_TOKEN_FD"

// takeToken returns the agent token and leaves no trace of it in the
// environment. os.Unsetenv alone is not enough: the kernel keeps the
// environment a process was exec'd with and shows it in /proc/<pid>/environ
// for its whole life. So when the token arrives in the environment, the
// agent writes it to a pipe and re-executes itself (PID 1 stays PID 1)
// with the pipe's read end inherited and the variable removed; the new
// image reads the token from the pipe. If the re-exec fails the token is
// still taken from the environment (and unset), and the failure returned
// alongside it for logging.
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
	if !ok {
		return "", nil
	}
	os.Unsetenv(envToken)
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
