package v1

import (
	"net/http"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/service"
)

// maxExecOutput caps each of stdout and stderr in a buffered exec answer:
// the whole answer is held in memory and sent as JSON text. Larger outputs
// belong on exec/stream or in a file.
const maxExecOutput = 1 << 20

// timedOutExitCode is the exit code of a command that timeout_s killed:
// 124, as coreutils timeout(1) reports it, so that clients unaware of
// timed_out still see a failure they recognise.
const timedOutExitCode = 124

// exec runs a command to completion: exactly one of cmd (argv) and command
// (a shell line). Output beyond maxExecOutput per stream is dropped and
// truncated set. When timeout_s passes the agent kills the command and the
// answer is 200 with timed_out set and exit code 124 (the output up to then
// is not available yet: the service reports a timeout as an error).
// Closing the request kills the command too.
func (s *server) exec(w http.ResponseWriter, r *http.Request) error {
	var body execRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	req := service.ExecRequest{
		Cmd:       body.Cmd,
		Command:   body.Command,
		Env:       body.Env,
		Cwd:       body.Cwd,
		User:      body.User,
		Timeout:   seconds(body.TimeoutS),
		MaxOutput: maxExecOutput,
	}
	if body.Stdin != nil {
		req.Stdin = []byte(*body.Stdin)
	}
	res, err := s.svc.Exec(r.Context(), caller(r), r.PathValue("id"), req)
	if req.Timeout > 0 && err != nil && execTimedOut(err) && r.Context().Err() == nil {
		writeJSON(w, http.StatusOK, execResult{ExitCode: timedOutExitCode, DurationMS: req.Timeout.Milliseconds(), TimedOut: true})
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, execResult{
		ExitCode:   shellExitCode(res.ExitCode, res.Exited, res.Status),
		Stdout:     string(res.Stdout), // encoding/json turns invalid UTF-8 into U+FFFD
		Stderr:     string(res.Stderr),
		DurationMS: res.Duration.Milliseconds(),
		Truncated:  res.Truncated,
	})
	return nil
}

// shellExitCode is the exit code the API reports: the process's own when
// it exited, else 128 plus the number of the signal that killed it, as
// shells report it (137 for SIGKILL), so `sbx exec` exits the way the same
// command would in a local shell. The agent (envd's wire) says -1 and
// "signal: killed".
func shellExitCode(code int, exited bool, status string) int {
	if exited || code >= 0 {
		return code
	}
	name, ok := strings.CutPrefix(status, "signal: ")
	if !ok {
		return code
	}
	for sig := syscall.Signal(1); sig < 32; sig++ {
		if sig.String() == name {
			return 128 + int(sig)
		}
	}
	return code
}
