package daytona

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/service"
)

// homes are the sandbox accounts a Daytona sandbox may run as, with their
// home directories (which are also the work directory).
var homes = map[string]string{
	sandboxUser: "/home/daytona",
	legacyUser:  "/home/user",
	"root":      "/root",
}

// box is the sandbox a toolbox request is for: visible to the caller and
// running.
type box struct {
	c    service.Caller
	sb   service.Sandbox
	user string // the account every toolbox operation runs as
	home string // its home: the work directory
}

// resolve is path as the agent's file routes read it: "~" is the home and
// "~/x" is under it. Routes that hand a path to a command (mkdir, chmod,
// grep, find, git) resolve it first, since no shell expands it there;
// relative paths need nothing, commands start in the home.
func (b box) resolve(path string) string {
	if path == "~" || strings.HasPrefix(path, "~/") {
		return b.home + path[1:]
	}
	return path
}

// toolboxHandler is a toolbox route's handler.
type toolboxHandler func(w http.ResponseWriter, r *http.Request, b box) error

// toolbox resolves {id} for h: an unknown sandbox (or another owner's) is
// 404, one that is not running 409. Every toolbox call is activity: its
// idle time starts again (service.Touch, which writes at most once a
// minute per sandbox).
func (f *Facade) toolbox(h toolboxHandler) handler {
	return func(w http.ResponseWriter, r *http.Request, c service.Caller) error {
		sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
		if err != nil {
			return err
		}
		if sb.State != service.StateRunning {
			return errorf(http.StatusConflict, "sandbox %s is %s, not started", sb.ID, stateName(sb.State))
		}
		if err := f.svc.Touch(r.Context(), sb); err != nil {
			f.log.WarnContext(r.Context(), "daytona: activity not recorded", "sandbox", sb.ID, "err", err)
		}
		user := userOf(sb)
		return h(w, r, box{c: c, sb: sb, user: user, home: homes[user]})
	}
}

// maxExecOutput caps the output an execute or code-run answer holds (it is
// held in memory and sent as one JSON string).
const maxExecOutput = 16 << 20

// mergeStderr runs before every execute command: stderr joins stdout, so
// the result has both in the order they were written.
const mergeStderr = "exec 2>&1; "

// execute is POST /process/execute: the command as a bash script, as the
// sandbox user, in cwd (default the work directory) with envs added to the
// sandbox's env. A non-zero exit is 200 with its exit code. When timeout
// (seconds) passes the process group is killed and the answer is 408
// PROCESS_EXECUTION_TIMEOUT.
func (f *Facade) execute(w http.ResponseWriter, r *http.Request, b box) error {
	var body executeBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if strings.TrimSpace(body.Command) == "" {
		return badRequest("command is required")
	}
	timeout, err := seconds(body.Timeout)
	if err != nil {
		return err
	}
	res, err := f.run(r, b, service.ExecRequest{
		Cmd:     []string{"/bin/bash", "-c", mergeStderr + body.Command},
		Env:     body.Envs,
		Cwd:     body.Cwd,
		Timeout: timeout,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, executeResponse{ExitCode: res.ExitCode, Result: string(res.Stdout)})
	return nil
}

// codeRun is POST /process/code-run: the code in the language asked for
// (python by default), with execute's env, output and timeout rules; argv
// is appended (sys.argv[1:] in Python, process.argv.slice(1) in
// JavaScript and TypeScript, as on Daytona). Charts are not captured.
func (f *Facade) codeRun(w http.ResponseWriter, r *http.Request, b box) error {
	var body codeRunBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	run, ok := codeRunners[strings.ToLower(body.Language)]
	if !ok {
		return badRequest("language %q is not supported (python, javascript or typescript)", body.Language)
	}
	timeout, err := seconds(body.Timeout)
	if err != nil {
		return err
	}
	cmd := append(slices.Clip(run), body.Argv...)
	res, err := f.run(r, b, service.ExecRequest{Cmd: cmd, Env: body.Envs, Stdin: []byte(body.Code), Timeout: timeout})
	if err != nil {
		return err
	}
	out := codeRunResponse{ExitCode: res.ExitCode, Result: string(res.Stdout)}
	out.Artifacts.Charts = []any{}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// codeRunners are the commands code-run runs per language, the code on
// stdin and argv appended.
var codeRunners = map[string][]string{
	"":           {"/bin/sh", "-c", mergeStderr + `exec python3 -u - "$@"`, "python3"},
	"python":     {"/bin/sh", "-c", mergeStderr + `exec python3 -u - "$@"`, "python3"},
	"javascript": {"/bin/sh", "-c", mergeStderr + runNode, "node", nodeRunner("javascript")},
	"typescript": {"/bin/sh", "-c", mergeStderr + runNode, "node", nodeRunner("typescript")},
}

// runNode runs the program in $1 with node, argv after it.
const runNode = `command -v node >/dev/null || { echo "sandboxd: node is not installed in this sandbox's image" >&2; exit 127; }
r=$1; shift; exec node -e "$r" -- "$@"`

// nodeRunner is the program node runs for JavaScript and TypeScript: it
// reads the code from stdin and runs it as a CommonJS module of the
// working directory (require finds its node_modules, then the system's),
// with process.argv [node, ...argv] as on Daytona. TypeScript is
// transpiled first by the TypeScript compiler the image carries (Debian's
// node-typescript), without type checking, as Daytona's ts-node -T does; a
// syntax error is reported on stderr with exit code 1. (Node 18, bookworm's,
// has no built-in type stripping.)
func nodeRunner(lang string) string {
	return `const lang = ` + strconv.Quote(lang) + `;
const Module = require("module"), path = require("path");
let code = require("fs").readFileSync(0, "utf8");
const file = path.join(process.cwd(), lang === "typescript" ? "[code].ts" : "[code].js");
if (lang === "typescript") {
  let ts;
  try { ts = require("typescript"); } catch (e) {
    console.error("sandboxd: TypeScript needs the typescript module (Debian: node-typescript), which this sandbox's image lacks");
    process.exit(127);
  }
  const out = ts.transpileModule(code, { fileName: file, reportDiagnostics: true, compilerOptions: {
    module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020, esModuleInterop: true } });
  const errors = (out.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
  if (errors.length > 0) {
    console.error(ts.formatDiagnostics(errors, { getCanonicalFileName: (f) => f,
      getCurrentDirectory: () => process.cwd(), getNewLine: () => "\n" }));
    process.exit(1);
  }
  code = out.outputText;
}
const m = new Module(file, null);
m.filename = file;
m.paths = Module._nodeModulePaths(process.cwd());
m._compile(code, file);
`
}

// run runs req to completion as the box's user. A timeout that passed
// (the agent killed the process group) is 408 PROCESS_EXECUTION_TIMEOUT.
func (f *Facade) run(r *http.Request, b box, req service.ExecRequest) (*service.ExecResult, error) {
	req.User, req.MaxOutput = b.user, maxExecOutput
	res, err := f.svc.Exec(r.Context(), b.c, b.sb.ID, req)
	if err != nil && req.Timeout > 0 && r.Context().Err() == nil &&
		(errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded) {
		return nil, daemonError(http.StatusRequestTimeout, codeExecTimeout, "command timed out after %s", req.Timeout)
	}
	return res, err
}

// seconds converts a wire timeout in seconds; nil or 0 is none.
func seconds(s *float64) (time.Duration, error) {
	switch {
	case s == nil || *s == 0:
		return 0, nil
	case *s < 0 || math.IsNaN(*s) || *s > 24*3600:
		return 0, badRequest("timeout must be between 0 and 86400 seconds")
	}
	return time.Duration(*s * float64(time.Second)), nil
}

// versionInfo is GET /version: the daemon's version.
func (f *Facade) versionInfo(w http.ResponseWriter, _ *http.Request, _ box) error {
	writeJSON(w, http.StatusOK, map[string]string{"version": f.version})
	return nil
}

// homeDir is GET /user-home-dir: the sandbox user's home.
func (f *Facade) homeDir(w http.ResponseWriter, _ *http.Request, b box) error {
	writeJSON(w, http.StatusOK, dirResponse{Dir: b.home})
	return nil
}

// workDir is GET /work-dir: where commands run without a cwd, the home.
func (f *Facade) workDir(w http.ResponseWriter, _ *http.Request, b box) error {
	writeJSON(w, http.StatusOK, dirResponse{Dir: b.home})
	return nil
}

// agentFor returns the agent of a box's sandbox, for the calls the service
// does not wrap (sessions, the file routes).
func (f *Facade) agentFor(ctx context.Context, b box) (*agent.Client, error) {
	ac, err := f.svc.Agent(ctx, b.sb.ID)
	if err != nil {
		return nil, err
	}
	return ac, nil
}

// agentError maps an error of a direct agent call onto the service's
// sentinels, as the service does for the calls it wraps.
func agentError(err error) error {
	if err == nil {
		return nil
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return fmt.Errorf("%w: %w", service.ErrNotFound, err)
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		return fmt.Errorf("%w: %w", service.ErrInvalidArgument, err)
	case connect.CodeAlreadyExists:
		return fmt.Errorf("%w: %w", service.ErrConflict, err)
	case connect.CodeUnavailable:
		return fmt.Errorf("%w: %w", service.ErrUnavailable, err)
	}
	return err
}
