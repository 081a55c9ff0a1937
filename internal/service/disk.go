package service

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
)

// Disk is a sandbox's root file system, in bytes, as df inside it reports
// it: what the sandbox's own writes use and what its file system holds.
type Disk struct {
	Used, Total uint64
}

// Bounds of the df DiskUsage runs: it answers in milliseconds; a sandbox
// too busy to run it in time reports an error rather than holding the
// caller, and nothing it prints can grow the daemon's memory.
const (
	dfTimeout   = 3 * time.Second
	dfMaxOutput = 4 << 10
)

// DiskUsage reports the root file system of a running sandbox by running
// `df -P -k /` in it through the agent (as the sandbox's default user;
// df needs no privilege). Whatever answers is untrusted: the output is
// bounded and parsed strictly, and a sandbox without df, or whose df
// prints nonsense, is an error the caller may treat as "unknown".
// ErrNotFound and ErrConflict (not running) as for Exec.
func (s *Service) DiskUsage(ctx context.Context, c Caller, idOrName string) (Disk, error) {
	ac, err := s.runningAgent(ctx, c, idOrName)
	if err != nil {
		return Disk{}, err
	}
	res, err := ac.Exec(ctx, agent.ExecRequest{Cmd: []string{"df", "-P", "-k", "/"}, Timeout: dfTimeout, MaxOutput: dfMaxOutput, LogAs: agent.LogOff})
	if err != nil {
		return Disk{}, agentErr(err)
	}
	if res.ExitCode != 0 || res.Truncated {
		return Disk{}, fmt.Errorf("df in sandbox %s: exit %d (truncated %v)", idOrName, res.ExitCode, res.Truncated)
	}
	return parseDF(res.Stdout)
}

// parseDF reads POSIX `df -P -k` output: a header, then one line
// "filesystem 1024-blocks used available capacity mountpoint" (the
// file system name may hold spaces, so fields are taken from the end).
func parseDF(out []byte) (Disk, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	if !sc.Scan() || !strings.Contains(sc.Text(), "Used") {
		return Disk{}, fmt.Errorf("df: no header in %q", out)
	}
	if !sc.Scan() {
		return Disk{}, fmt.Errorf("df: no file system line in %q", out)
	}
	f := strings.Fields(sc.Text())
	if len(f) < 6 {
		return Disk{}, fmt.Errorf("df: short line %q", sc.Text())
	}
	n := len(f)
	total, err1 := strconv.ParseUint(f[n-5], 10, 64)
	used, err2 := strconv.ParseUint(f[n-4], 10, 64)
	if err1 != nil || err2 != nil || used > total || total > 1<<44 { // 16 EiB in KiB: nothing real is larger
		return Disk{}, fmt.Errorf("df: bad sizes in %q", sc.Text())
	}
	return Disk{Used: used * 1024, Total: total * 1024}, nil
}
