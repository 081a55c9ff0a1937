package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/clientconf"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

const (
	testToken = "sbx_0badc0de_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" // well formed: a checkout's file must hold one of ours
	webID     = "sb-0123456789abcdef"
)

// fakeAPI is an in-memory stand-in for the daemon's /v1 routes, enough to
// drive the CLI. It checks the bearer token and records request bodies.
type fakeAPI struct {
	t      *testing.T
	mu     sync.Mutex
	boxes  map[string]*sandboxd.Sandbox // by id
	files  map[string][]byte            // by id + ":" + path
	bodies map[string]string            // "METHOD /path" → last body
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	t.Helper()
	f := &fakeAPI{
		t: t,
		boxes: map[string]*sandboxd.Sandbox{webID: {
			ID: webID, Name: "web", Image: "sandboxd/base:bookworm", State: sandboxd.StateRunning,
			CPU: 1, MemoryMB: 512, Tags: map[string]string{"team": "ml"},
			CreatedAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		}},
		files:  map[string][]byte{},
		bodies: map[string]string{},
	}
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	return f, srv
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":%q,"retryable":false}}`, code, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// lookup finds a sandbox by id or name; the caller holds f.mu.
func (f *fakeAPI) lookup(ref string) *sandboxd.Sandbox {
	if sb, ok := f.boxes[ref]; ok {
		return sb
	}
	for _, sb := range f.boxes {
		if sb.Name == ref {
			return sb
		}
	}
	return nil
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Image, Name string
			Tags        map[string]string
		}
		json.Unmarshal([]byte(f.bodies["POST /v1/sandboxes"]), &req)
		f.mu.Lock()
		defer f.mu.Unlock()
		if req.Name != "" && f.lookup(req.Name) != nil {
			apiError(w, 409, "name_conflict", fmt.Sprintf("a sandbox named %q already exists", req.Name))
			return
		}
		sb := &sandboxd.Sandbox{ID: fmt.Sprintf("sb-%016x", len(f.boxes)+100), Name: req.Name, Image: req.Image, State: sandboxd.StateRunning, Tags: req.Tags}
		f.boxes[sb.ID] = sb
		writeJSON(w, 201, sb)
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		// Two pages, to exercise the CLI's paging.
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.URL.Query().Get("page_token") == "" {
			writeJSON(w, 200, map[string]any{"items": []any{f.boxes[webID]}, "next_page_token": "p2"})
			return
		}
		writeJSON(w, 200, map[string]any{"items": []any{&sandboxd.Sandbox{ID: "sb-00000000000000aa", State: sandboxd.StateStopped, Image: "img"}}})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sb := f.lookup(r.PathValue("id"))
		if sb == nil {
			apiError(w, 404, "not_found", fmt.Sprintf("sandbox %q", r.PathValue("id")))
			return
		}
		writeJSON(w, 200, sb)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.boxes[r.PathValue("id")]; !ok {
			apiError(w, 404, "not_found", fmt.Sprintf("sandbox %q", r.PathValue("id")))
			return
		}
		delete(f.boxes, r.PathValue("id"))
		w.WriteHeader(204)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/stop", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sb, ok := f.boxes[r.PathValue("id")] // ids only: the CLI resolves names
		if !ok {
			apiError(w, 404, "not_found", "by id only")
			return
		}
		sb.State = sandboxd.StateStopped
		writeJSON(w, 200, sb)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sb, ok := f.boxes[r.PathValue("id")]
		if !ok {
			apiError(w, 404, "not_found", "by id only")
			return
		}
		sb.State = sandboxd.StatePaused
		writeJSON(w, 200, sb)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/resume", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sb, ok := f.boxes[r.PathValue("id")]
		if !ok {
			apiError(w, 404, "not_found", "by id only")
			return
		}
		restarted := sb.State == sandboxd.StateStopped
		sb.State = sandboxd.StateRunning
		writeJSON(w, 200, sandboxd.Resumed{Sandbox: *sb, ProcessesRestarted: restarted})
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			apiError(w, 400, "invalid_argument", err.Error())
			return
		}
		f.mu.Lock()
		f.files[r.PathValue("id")+":"+r.URL.Query().Get("path")] = b
		f.mu.Unlock()
		w.WriteHeader(204)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.files[r.PathValue("id")+":"+r.URL.Query().Get("path")]
		f.mu.Unlock()
		if !ok {
			apiError(w, 404, "not_found", "no such file")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.Write(b)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/ports", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxd.ExposePortRequest
		json.Unmarshal([]byte(f.bodies[r.Method+" "+r.URL.Path]), &req)
		writeJSON(w, 200, sandboxd.Port{Port: req.Port, Protocol: req.Protocol, URL: fmt.Sprintf("http://%d-%s.localhost:7070", req.Port, r.PathValue("id"))})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec/stream", f.execStream)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			apiError(w, 401, "unauthenticated", "missing or unknown token")
			return
		}
		if r.Method == "POST" {
			b, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			f.bodies[r.Method+" "+r.URL.Path] = string(b)
			f.mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	})
}

// execStream runs a pretend command: it echoes stdin to stdout until
// stdin is closed, writes its argv to stderr, and exits with the code in
// the environment variable CODE.
func (f *fakeAPI) execStream(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	send := func(v map[string]any) {
		b, _ := json.Marshal(v)
		conn.Write(ctx, websocket.MessageText, b)
	}
	var start struct {
		Cmd []string          `json:"cmd"`
		Env map[string]string `json:"env"`
		Cwd string            `json:"cwd"`
	}
	_, b, err := conn.Read(ctx)
	if err != nil || json.Unmarshal(b, &start) != nil {
		return
	}
	send(map[string]any{"type": "started", "pid": 1})
	send(map[string]any{"type": "stderr", "data": base64.StdEncoding.EncodeToString(
		[]byte(strings.Join(start.Cmd, " ") + " in " + start.Cwd + "\n"))})
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			send(map[string]any{"type": "stdout", "data": base64.StdEncoding.EncodeToString(b)})
			continue
		}
		if strings.Contains(string(b), `"stdin_close"`) {
			break
		}
	}
	code := 0
	fmt.Sscan(start.Env["CODE"], &code)
	send(map[string]any{"type": "exit", "exit_code": code})
	conn.Close(websocket.StatusNormalClosure, "")
}

// result is the outcome of one sbx run.
type result struct {
	code           int
	stdout, stderr string
}

// sbx runs the CLI against srv with SBX_TOKEN set, from a working
// directory of its own.
func sbx(t *testing.T, srv *httptest.Server, stdin string, args ...string) result {
	t.Helper()
	return sbxEnv(t, map[string]string{"SBX_API_URL": srv.URL, "SBX_TOKEN": testToken}, t.TempDir(), stdin, args...)
}

func sbxEnv(t *testing.T, env map[string]string, wd, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &cli{
		stdin:  strings.NewReader(stdin),
		stdout: &stdout,
		stderr: &stderr,
		getenv: func(k string) string { return env[k] },
		getwd:  func() (string, error) { return wd, nil },
		clientOpts: []sandboxd.Option{sandboxd.WithRetryPolicy(sandboxd.RetryPolicy{
			MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		})},
	}
	code := c.run(t.Context(), args)
	return result{code, stdout.String(), stderr.String()}
}

func TestRun_ExitCodes(t *testing.T) {
	_, srv := newFakeAPI(t)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string // exact; "" means empty
	}{
		{"help", nil, exitOK, ""},
		{"unknown command", []string{"launch"}, exitUsage, "sbx: unknown command \"launch\" (see 'sbx --help')\n"},
		{"unknown flag", []string{"ls", "--colour"}, exitUsage, "sbx: unknown flag: --colour (see 'sbx ls --help')\n"},
		{"missing arg", []string{"get"}, exitUsage, "sbx: want one sandbox id or name (see 'sbx get --help')\n"},
		{"extra arg", []string{"get", "a", "b"}, exitUsage, "sbx: want one sandbox id or name (see 'sbx get --help')\n"},
		{"bad env", []string{"create", "--env", "NOEQUALS"}, exitUsage, "sbx: --env \"NOEQUALS\": want KEY=VALUE (see 'sbx create --help')\n"},
		{"bad duration", []string{"create", "--timeout", "soon"}, exitUsage, ""},
		{"exec without command", []string{"exec", "web"}, exitUsage, ""},
		{"cp two remotes", []string{"cp", "a:/x", "b:/y"}, exitUsage, ""},
		{"bad port", []string{"ports", "expose", "web", "http"}, exitUsage, ""},
		{"not found", []string{"get", "missing"}, exitNotFound, "sbx: not found: sandbox \"missing\"\n"},
		{"rm not found", []string{"rm", "sb-00000000000000ff"}, exitNotFound, "sbx: not found: sandbox \"sb-00000000000000ff\"\n"},
		{"rm -f not found", []string{"rm", "-f", "sb-00000000000000ff"}, exitOK, ""},
		{"conflict", []string{"create", "--name", "web"}, exitConflict, "sbx: name conflict: a sandbox named \"web\" already exists\n"},
		{"ok", []string{"get", "web"}, exitOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sbx(t, srv, "", tt.args...)
			if got.code != tt.wantCode {
				t.Errorf("sbx %v: exit %d, want %d (stderr %q)", tt.args, got.code, tt.wantCode, got.stderr)
			}
			if tt.wantStderr != "" && got.stderr != tt.wantStderr {
				t.Errorf("sbx %v: stderr %q, want %q", tt.args, got.stderr, tt.wantStderr)
			}
			if tt.wantCode != exitOK && strings.Count(got.stderr, "\n") != 1 {
				t.Errorf("sbx %v: stderr %q, want one line", tt.args, got.stderr)
			}
		})
	}
}

func TestRun_Unauthenticated(t *testing.T) {
	_, srv := newFakeAPI(t)
	got := sbxEnv(t, map[string]string{"SBX_API_URL": srv.URL}, t.TempDir(), "", "get", "web")
	if got.code != exitAuth {
		t.Errorf("exit %d, want %d", got.code, exitAuth)
	}
	if !strings.HasPrefix(got.stderr, "sbx: unauthenticated: missing or unknown token (no token: set SBX_TOKEN") {
		t.Errorf("stderr = %q", got.stderr)
	}
	got = sbxEnv(t, map[string]string{"SBX_API_URL": srv.URL, "SBX_TOKEN": "wrong"}, t.TempDir(), "", "get", "web")
	if got.code != exitAuth || got.stderr != "sbx: unauthenticated: missing or unknown token\n" {
		t.Errorf("wrong token: exit %d stderr %q", got.code, got.stderr)
	}
}

func TestRun_DaemonDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there now
	got := sbx(t, srv, "", "ls")
	if got.code != exitError || !strings.HasPrefix(got.stderr, "sbx: cannot reach sandboxd at "+srv.URL) {
		t.Errorf("exit %d stderr %q", got.code, got.stderr)
	}
}

func TestCreate_Request(t *testing.T) {
	f, srv := newFakeAPI(t)
	got := sbx(t, srv, "", "create", "--image", "alpine", "--name", "api", "--cpu", "2", "--memory", "1024",
		"-e", "A=1", "--env", "B=x=y", "--tag", "team=ml", "--tag", "env=dev", "--timeout", "10m", "--network")
	if got.code != 0 {
		t.Fatalf("exit %d: %s", got.code, got.stderr)
	}
	if !sandboxd.IsSandboxID(strings.TrimSpace(got.stdout)) {
		t.Errorf("stdout = %q, want a sandbox id", got.stdout)
	}
	var body, want any
	json.Unmarshal([]byte(f.bodies["POST /v1/sandboxes"]), &body)
	json.Unmarshal([]byte(`{"image":"alpine","name":"api","cpu":2,"memory_mb":1024,
		"env":{"A":"1","B":"x=y"},"tags":{"team":"ml","env":"dev"},"timeout_s":600,"network":true}`), &want)
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("create body (-want +got):\n%s", diff)
	}
}

// TestCreate_Timeout: no --timeout leaves the daemon's default (no
// timeout_s); --timeout 0 asks for none (timeout_s 0).
func TestCreate_Timeout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `{}`},
		{[]string{"--timeout", "0"}, `{"timeout_s":0}`},
		{[]string{"--timeout=0s"}, `{"timeout_s":0}`},
		{[]string{"--timeout", "90s"}, `{"timeout_s":90}`},
	} {
		f, srv := newFakeAPI(t)
		got := sbx(t, srv, "", append([]string{"create"}, tc.args...)...)
		if got.code != 0 {
			t.Fatalf("%q: exit %d: %s", tc.args, got.code, got.stderr)
		}
		var body, want any
		json.Unmarshal([]byte(f.bodies["POST /v1/sandboxes"]), &body)
		json.Unmarshal([]byte(tc.want), &want)
		if diff := cmp.Diff(want, body); diff != "" {
			t.Errorf("%q: create body (-want +got):\n%s", tc.args, diff)
		}
	}
}

func TestJSON_PrintsAPIObject(t *testing.T) {
	_, srv := newFakeAPI(t)
	got := sbx(t, srv, "", "get", "--json", "web")
	if got.code != 0 {
		t.Fatalf("exit %d: %s", got.code, got.stderr)
	}
	var sb map[string]any
	if err := json.Unmarshal([]byte(got.stdout), &sb); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, got.stdout)
	}
	want := map[string]any{
		"id": webID, "name": "web", "image": "sandboxd/base:bookworm", "state": "running",
		"cpu": 1.0, "memory_mb": 512.0, "tags": map[string]any{"team": "ml"}, "network": false,
		"created_at": "2026-12-02T10:00:00Z",
	}
	if diff := cmp.Diff(want, sb); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}

	got = sbx(t, srv, "", "ls", "--json")
	var list struct{ Items []sandboxd.Sandbox }
	if err := json.Unmarshal([]byte(got.stdout), &list); err != nil || len(list.Items) != 2 {
		t.Errorf("ls --json = %s (err %v), want two items across both pages", got.stdout, err)
	}
}

func TestLs_Table(t *testing.T) {
	_, srv := newFakeAPI(t)
	got := sbx(t, srv, "", "ls")
	lines := strings.Split(strings.TrimSpace(got.stdout), "\n")
	if got.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") ||
		!strings.HasPrefix(lines[1], webID) || !strings.HasPrefix(lines[2], "sb-00000000000000aa") {
		t.Errorf("exit %d, stdout:\n%s", got.code, got.stdout)
	}
}

func TestStop_ResolvesName(t *testing.T) {
	_, srv := newFakeAPI(t)
	got := sbx(t, srv, "", "stop", "web")
	if got.code != 0 || got.stdout != webID+"\n" {
		t.Errorf("exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
}

func TestPauseResume_ResolvesNameAndSaysRestarted(t *testing.T) {
	_, srv := newFakeAPI(t)
	for _, verb := range []string{"pause", "resume"} {
		if got := sbx(t, srv, "", verb, "web"); got.code != 0 || got.stdout != webID+"\n" || got.stderr != "" {
			t.Errorf("%s: exit %d stdout %q stderr %q", verb, got.code, got.stdout, got.stderr)
		}
	}
	sbx(t, srv, "", "stop", "web")
	got := sbx(t, srv, "", "resume", "web")
	if got.code != 0 || !strings.Contains(got.stderr, "processes restarted") {
		t.Errorf("resume of a stopped sandbox: exit %d stderr %q", got.code, got.stderr)
	}
}

func TestExec_StreamsAndExitCode(t *testing.T) {
	_, srv := newFakeAPI(t)
	got := sbx(t, srv, "hello from stdin", "exec", "web", "-e", "CODE=7", "-w", "/work", "--", "cat", "-n")
	if got.code != 7 {
		t.Errorf("exit %d, want the command's 7 (stderr %q)", got.code, got.stderr)
	}
	if got.stdout != "hello from stdin" {
		t.Errorf("stdout = %q, want stdin echoed", got.stdout)
	}
	if got.stderr != "cat -n in /work\n" {
		t.Errorf("stderr = %q, want the command's own stderr only", got.stderr)
	}

	got = sbx(t, srv, "", "exec", "--json", "web", "--", "true")
	var res map[string]any
	if err := json.Unmarshal([]byte(got.stdout), &res); err != nil || got.code != 0 {
		t.Fatalf("exit %d stdout %q: %v", got.code, got.stdout, err)
	}
	if res["exit_code"] != 0.0 || res["stderr"] != "true in \n" {
		t.Errorf("exec --json = %v", res)
	}
}

func TestParseCopy(t *testing.T) {
	tests := []struct {
		src, dst string
		from, to endpoint
		wantErr  bool
	}{
		{src: "./a.txt", dst: "web:/tmp/a.txt", from: endpoint{path: "./a.txt"}, to: endpoint{ref: "web", path: "/tmp/a.txt"}},
		{src: "sb-0123456789abcdef:/etc/hosts", dst: ".", from: endpoint{ref: "sb-0123456789abcdef", path: "/etc/hosts"}, to: endpoint{path: "."}},
		{src: "-", dst: "web:/in", from: endpoint{}, to: endpoint{ref: "web", path: "/in"}},
		{src: "web:/out", dst: "-", from: endpoint{ref: "web", path: "/out"}, to: endpoint{}},
		{src: "./odd:name", dst: "web:/x", from: endpoint{path: "./odd:name"}, to: endpoint{ref: "web", path: "/x"}},
		{src: "/abs/with:colon", dst: "web:rel/path", from: endpoint{path: "/abs/with:colon"}, to: endpoint{ref: "web", path: "rel/path"}},
		{src: "a.txt", dst: "b.txt", wantErr: true},   // both local
		{src: "web:/a", dst: "web:/b", wantErr: true}, // both remote
		{src: "-", dst: "-", wantErr: true},           // both stdio
		{src: "web:", dst: "x", wantErr: true},        // no remote path
		{src: ":/x", dst: "web:/y", wantErr: true},    // no sandbox before the colon
		{src: "", dst: "web:/y", wantErr: true},       // empty
		{src: "-", dst: "web:/dir/", wantErr: true},   // stdin needs a file name
	}
	for _, tt := range tests {
		from, to, err := parseCopy(tt.src, tt.dst)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseCopy(%q, %q) error = %v, want error %t", tt.src, tt.dst, err, tt.wantErr)
			continue
		}
		if err == nil && (from != tt.from || to != tt.to) {
			t.Errorf("parseCopy(%q, %q) = %+v, %+v; want %+v, %+v", tt.src, tt.dst, from, to, tt.from, tt.to)
		}
	}
}

func TestCp_RoundTrip(t *testing.T) {
	f, srv := newFakeAPI(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "in.bin")
	content := bytes.Repeat([]byte("sandbox "), 10000)
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}

	// Upload into a remote directory: the file keeps its name.
	if got := sbx(t, srv, "", "cp", src, "web:/srv/"); got.code != 0 {
		t.Fatalf("upload: exit %d: %s", got.code, got.stderr)
	}
	if !bytes.Equal(f.files[webID+":/srv/in.bin"], content) {
		t.Fatalf("daemon has %d bytes at /srv/in.bin, want %d", len(f.files[webID+":/srv/in.bin"]), len(content))
	}

	// Download into a local directory.
	outDir := filepath.Join(dir, "out")
	os.Mkdir(outDir, 0o755)
	got := sbx(t, srv, "", "cp", "--json", "web:/srv/in.bin", outDir)
	if got.code != 0 {
		t.Fatalf("download: exit %d: %s", got.code, got.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(outDir, "in.bin")); !bytes.Equal(b, content) {
		t.Errorf("downloaded %d bytes, want %d", len(b), len(content))
	}
	var summary map[string]any
	json.Unmarshal([]byte(got.stdout), &summary)
	if summary["bytes"] != float64(len(content)) || summary["source"] != "web:/srv/in.bin" {
		t.Errorf("--json summary = %s", got.stdout)
	}
	if entries, _ := os.ReadDir(outDir); len(entries) != 1 {
		t.Errorf("out dir has %d entries, want 1 (no temporary file left)", len(entries))
	}

	// Standard input and output.
	if got := sbx(t, srv, "from stdin", "cp", "-", "web:/s"); got.code != 0 {
		t.Fatalf("upload from stdin: exit %d: %s", got.code, got.stderr)
	}
	if got := sbx(t, srv, "", "cp", "web:/s", "-"); got.code != 0 || got.stdout != "from stdin" {
		t.Errorf("download to stdout: exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}

	// A missing remote file leaves nothing behind locally.
	if got := sbx(t, srv, "", "cp", "web:/nope", filepath.Join(dir, "nope")); got.code != exitNotFound {
		t.Errorf("missing file: exit %d, want %d", got.code, exitNotFound)
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); !os.IsNotExist(err) {
		t.Errorf("local file created for a failed download")
	}
}

func TestPorts_Expose(t *testing.T) {
	f, srv := newFakeAPI(t)
	got := sbx(t, srv, "", "ports", "expose", "web", "8080", "--protocol", "http", "--public")
	if got.code != 0 || got.stdout != "http://8080-"+webID+".localhost:7070\n" {
		t.Fatalf("exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	if body := f.bodies["POST /v1/sandboxes/"+webID+"/ports"]; body != `{"port":8080,"protocol":"http","public":true}` {
		t.Errorf("body = %s", body)
	}
}

func TestToken_Discovery(t *testing.T) {
	_, srv := newFakeAPI(t)
	checkout := t.TempDir()
	deep := filepath.Join(checkout, "a", "b", "c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(checkout, ".sandboxd"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(checkout, ".sandboxd", "admin.token"), []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	os.WriteFile(filepath.Join(dataDir, "admin.token"), []byte(testToken), 0o600)

	tests := []struct {
		name string
		env  map[string]string
		wd   string
		want int
	}{
		{"walks up to the checkout", map[string]string{}, deep, exitOK},
		{"SBX_TOKEN wins", map[string]string{"SBX_TOKEN": "wrong"}, deep, exitAuth},
		{"SBX_DATA_DIR", map[string]string{"SBX_DATA_DIR": dataDir}, t.TempDir(), exitOK},
		{"SBX_DATA_DIR without a token", map[string]string{"SBX_DATA_DIR": t.TempDir()}, deep, exitAuth},
		{"nowhere", map[string]string{}, t.TempDir(), exitAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.env["SBX_API_URL"] = srv.URL
			if got := sbxEnv(t, tt.env, tt.wd, "", "get", "web"); got.code != tt.want {
				t.Errorf("exit %d, want %d (stderr %q)", got.code, tt.want, got.stderr)
			}
		})
	}
}

// TestToken_FlagsAsSandboxdMCP: sbx takes sandboxd mcp's --url and
// --token-file (package clientconf, one set of rules for both): the flags
// win over the environment, and a --token-file that is not there is
// clientconf's error, exit 1.
func TestToken_FlagsAsSandboxdMCP(t *testing.T) {
	_, srv := newFakeAPI(t)
	file := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(file, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SBX_API_URL": "http://127.0.0.1:1", "SBX_TOKEN": "wrong"}
	if got := sbxEnv(t, env, t.TempDir(), "", "--url", srv.URL, "--token-file", file, "get", "web"); got.code != exitOK {
		t.Errorf("--url and --token-file over the environment: exit %d (stderr %q), want 0", got.code, got.stderr)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	_, want := clientconf.Resolve(clientconf.Flags{TokenFile: missing}, clientconf.Env{Getenv: func(string) string { return "" }})
	got := sbxEnv(t, env, t.TempDir(), "", "--token-file", missing, "get", "web")
	if want == nil || got.code != exitError || got.stderr != "sbx: "+want.Error()+"\n" {
		t.Errorf("a missing --token-file: exit %d, stderr %q; want %d and %q", got.code, got.stderr, exitError, want)
	}
}

func TestShell_NeedsTerminal(t *testing.T) {
	_, srv := newFakeAPI(t)
	got := sbx(t, srv, "", "shell", "web")
	if got.code != exitUsage || !strings.Contains(got.stderr, "not a terminal") {
		t.Errorf("exit %d stderr %q", got.code, got.stderr)
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{exitStatus{42}, 42},
		{exitStatus{-1}, exitError},
		{fmt.Errorf("x: %w", &sandboxd.APIError{Code: sandboxd.CodeNotFound}), exitNotFound},
		{&sandboxd.APIError{Code: sandboxd.CodeHostnameConflict}, exitConflict},
		{&sandboxd.APIError{Code: sandboxd.CodePermissionDenied}, exitAuth},
		{&sandboxd.APIError{Code: sandboxd.CodeInvalidArgument}, exitUsage},
		{&sandboxd.APIError{Code: sandboxd.CodeInternal}, exitError},
		{io.ErrUnexpectedEOF, exitError},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// TestCp_DownloadHonoursUmask: a single file downloaded to the user's
// machine gets 0666 less the process's umask, like the user's other new
// files, not a fixed 0644 (which a umask of 077 must not widen).
func TestCp_DownloadHonoursUmask(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.files[webID+":/srv/secret.txt"] = []byte("private")
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	out := filepath.Join(t.TempDir(), "secret.txt")
	if got := sbx(t, srv, "", "cp", "web:/srv/secret.txt", out); got.code != 0 {
		t.Fatalf("download: exit %d: %s", got.code, got.stderr)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("downloaded file mode %v under umask 077, want %v", got, want)
	}
}
