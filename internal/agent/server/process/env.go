package process

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/agent/server/account"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// defaultPath is PATH for processes when the agent itself has none (a
// container image that sets no PATH).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// environ builds a process environment the way envd does: PATH from the
// agent, HOME, USER and LOGNAME of u, then the service defaults, then the
// request's variables; a later entry overrides an earlier one. Nothing else
// of the agent's environment is inherited.
func environ(u account.User, defaults, req map[string]string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	env := []string{"PATH=" + path, "HOME=" + u.Home, "USER=" + u.Name, "LOGNAME=" + u.Name}
	for _, m := range []map[string]string{defaults, req} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			env = append(env, k+"="+m[k])
		}
	}
	return env // exec.Cmd keeps the last value of a duplicated key
}

// checkEnvs refuses what cannot be an environment variable: an empty
// name, a name holding '=' (A=B with value x would silently become A set to
// "B=x") and a NUL anywhere (the kernel would cut the string there). Names
// are otherwise free, as on envd; the daemon's own API is stricter.
func checkEnvs(envs map[string]string) error {
	for k, v := range envs {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: env %q: a name must be non-empty without '=' or NUL, a value without NUL", ErrInvalid, k)
		}
	}
	return nil
}

// workdir resolves the requested cwd for u: relative paths and "~" are under
// u's home, no cwd means the home. A requested cwd that is not a directory
// is ErrInvalid; a missing home is tolerated when no cwd was asked for (a
// user without a home directory still runs, in /).
func workdir(u account.User, cwd *string) (string, error) {
	dir, err := account.Resolve(u, ptrValue(cwd))
	if err != nil {
		return "", err
	}
	st, err := os.Stat(dir)
	switch {
	case err == nil && st.IsDir():
		return dir, nil
	case cwd == nil && errors.Is(err, fs.ErrNotExist):
		return "/", nil
	case err == nil:
		return "", fmt.Errorf("%w: cwd %q is not a directory", ErrInvalid, dir)
	default:
		return "", fmt.Errorf("%w: cwd %q: %v", ErrInvalid, dir, err)
	}
}

// credential returns the credential to run as u, or nil when that is the
// agent's own user (switching would need privileges the agent may lack,
// as in tests run by a normal user). The process gets u's primary group as
// its only supplementary group, not the agent's.
func credential(u account.User) *syscall.Credential {
	if int(u.UID) == os.Getuid() && int(u.GID) == os.Getgid() {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{u.GID}}
}

// launchFor turns a Start request acting as u into a launch.
func launchFor(u account.User, req *rpc.StartRequest, defaults map[string]string) (launch, error) {
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return launch{}, fmt.Errorf("%w: process.cmd is empty", ErrInvalid)
	}
	if err := checkEnvs(cfg.GetEnvs()); err != nil {
		return launch{}, err
	}
	dir, err := workdir(u, cfg.Cwd)
	if err != nil {
		return launch{}, err
	}
	return launch{
		config: cfg,
		tag:    req.Tag,
		path:   cfg.GetCmd(),
		args:   cfg.GetArgs(),
		env:    environ(u, defaults, cfg.GetEnvs()),
		dir:    dir,
		cred:   credential(u),
		pty:    req.Pty,
		// Older SDKs never send stdin and expect a pipe: unset means true.
		stdin: req.Stdin == nil || req.GetStdin(),
	}, nil
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
