package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// The MCP server, end to end: the official Go MCP client against
// `sandboxd mcp` (a subprocess on stdio) and against the daemon's /mcp
// (streamable HTTP), each driving a real sandbox on the shared daemon.

// mcpTools are the tools both transports must list.
var mcpTools = []string{"create_sandbox", "destroy_sandbox", "exec", "expose_port", "list_directory", "list_sandboxes", "read_file", "write_file"}

// progressLog records the progress notifications a client received.
type progressLog struct {
	mu   sync.Mutex
	msgs []string
	seen chan string // each message, as it arrives (buffered, never blocks the client)
}

func newProgressLog() *progressLog { return &progressLog{seen: make(chan string, 1024)} }

func (p *progressLog) handler(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.msgs = append(p.msgs, req.Params.Message)
	p.mu.Unlock()
	select {
	case p.seen <- req.Params.Message:
	default:
	}
}

// waitFor returns what was streamed once ok holds for it, or what was
// streamed when ctx ends.
func (p *progressLog) waitFor(ctx context.Context, ok func(string) bool) string {
	for {
		p.mu.Lock()
		all := strings.Join(p.msgs, "")
		p.mu.Unlock()
		if ok(all) {
			return all
		}
		select {
		case <-p.seen:
		case <-ctx.Done():
			return all
		}
	}
}

// mcpClient returns an MCP client that records progress in log.
func mcpClient(log *progressLog) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "sandboxd-e2e", Version: "test"},
		&mcp.ClientOptions{ProgressNotificationHandler: log.handler})
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connectHTTP connects an MCP client to d's /mcp with token.
func connectHTTP(ctx context.Context, t *testing.T, d *daemonProcess, token string, log *progressLog) *mcp.ClientSession {
	t.Helper()
	tr := &mcp.StreamableClientTransport{
		Endpoint:   d.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}},
	}
	cs, err := mcpClient(log).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect to %s/mcp: %v", d.URL(), err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// connectStdio starts `sandboxd mcp` pointed at d with token and
// connects an MCP client to it.
func connectStdio(ctx context.Context, t *testing.T, d *daemonProcess, token string, log *progressLog) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(env.dt.Bins.Sandboxd, "mcp")
	cmd.Env = append(hermeticEnv(), "SBX_API_URL="+d.URL(), "SBX_TOKEN="+token)
	cmd.Dir = t.TempDir() // no .sandboxd/admin.token above it to fall back on
	cs, err := mcpClient(log).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start sandboxd mcp: %v", err)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Logf("sandboxd mcp: close: %v", err)
		}
	})
	return cs
}

// call calls a tool and decodes its structured result into out (when
// not nil). It fails t on a protocol error; a tool error is returned as
// its text with isErr set.
func callTool(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) (text string, isErr bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): protocol error: %v", name, args, err)
	}
	text = resultText(res)
	if res.IsError {
		return text, true
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return text, false
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// mustCall is callTool for a call that must succeed.
func mustCall(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	if text, isErr := callTool(ctx, t, cs, name, args, out); isErr {
		t.Fatalf("%s(%v): tool error: %s", name, args, text)
	}
}

// mcpSandboxFlow runs every tool once through cs: list the tools, create
// a sandbox, exec with streamed output, write then read a file, list its
// directory, expose a port and fetch it, destroy. c (the SDK, same token)
// destroys the sandbox at the end should the flow fail halfway.
func mcpSandboxFlow(ctx context.Context, t *testing.T, d *daemonProcess, token string, cs *mcp.ClientSession, log *progressLog) {
	t.Helper()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("list tools: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s has no description or input schema", tool.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, mcpTools) {
		t.Fatalf("tools %v, want %v", names, mcpTools)
	}

	var sb struct {
		ID        string
		State     string
		ExpiresAt string `json:"expires_at"`
	}
	mustCall(ctx, t, cs, "create_sandbox", map[string]any{
		"image": busyboxImage, "cpu": 0.25, "memory_mb": 128, "timeout_s": 600, "env": map[string]string{"GREETING": "hello"},
	}, &sb)
	c := sandboxd.New(d.URL(), token)
	destroyAtEnd(t, c, sb.ID)
	if !sandboxd.IsSandboxID(sb.ID) || sb.State != "running" || sb.ExpiresAt == "" {
		t.Fatalf("create_sandbox answered %+v; want a running sandbox with an expiry", sb)
	}

	var listed struct {
		Sandboxes []struct{ ID string }
	}
	mustCall(ctx, t, cs, "list_sandboxes", nil, &listed)
	if !slices.ContainsFunc(listed.Sandboxes, func(s struct{ ID string }) bool { return s.ID == sb.ID }) {
		t.Errorf("list_sandboxes does not list %s: %+v", sb.ID, listed)
	}

	// Streamed output: the command prints, then waits for a file that
	// this test writes only once the first line has arrived as a
	// progress notification, so the notification came before the result.
	type execResult struct {
		ExitCode  int `json:"exit_code"`
		Stdout    string
		Stderr    string
		TimedOut  bool `json:"timed_out"`
		Truncated bool
	}
	done := make(chan struct{})
	var res *mcp.CallToolResult
	var callErr error
	go func() {
		defer close(done)
		params := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
			"sandbox":   sb.ID,
			"command":   `echo "first $GREETING"; echo oops >&2; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second; exit 3`,
			"timeout_s": 120,
		}}
		params.SetProgressToken("exec-1")
		res, callErr = cs.CallTool(ctx, params)
	}()
	waitProgress(ctx, t, log, "first hello", done)
	mustCall(ctx, t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "/tmp/go", "content": ""}, nil)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("exec did not return after /tmp/go was written")
	}
	if callErr != nil || res.IsError {
		t.Fatalf("exec: %v %s", callErr, resultText(res))
	}
	var er execResult
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &er); err != nil {
		t.Fatal(err)
	}
	if er.ExitCode != 3 || er.Stdout != "first hello\nsecond\n" || er.Stderr != "oops\n" || er.TimedOut {
		t.Errorf("exec result %+v; want exit 3, both lines, stderr oops", er)
	}
	// The client hands notifications to the handler apart from the
	// result, so the last ones may land just after it: wait for them.
	streamed := log.waitFor(ctx, func(s string) bool { return strings.Contains(s, "[stderr] oops") && strings.Contains(s, "second") })
	if !strings.Contains(streamed, "[stderr] oops") || !strings.Contains(streamed, "second") {
		t.Errorf("streamed %q; want stdout and [stderr]-tagged stderr", streamed)
	}

	content := "line one\nünïcode ✓\n"
	var wrote struct{ Bytes int }
	mustCall(ctx, t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "/tmp/dir/note.txt", "content": content}, &wrote)
	if wrote.Bytes != len(content) {
		t.Errorf("write_file wrote %d bytes, want %d", wrote.Bytes, len(content))
	}
	var read struct {
		Content   string
		Size      int64
		Truncated bool
	}
	mustCall(ctx, t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "/tmp/dir/note.txt"}, &read)
	if read.Content != content || read.Truncated {
		t.Errorf("read_file: %+v, want %q", read, content)
	}
	var dir struct {
		Entries []struct {
			Name, Type string
			Size       int64
		}
	}
	mustCall(ctx, t, cs, "list_directory", map[string]any{"sandbox": sb.ID, "path": "/tmp/dir"}, &dir)
	if len(dir.Entries) != 1 || dir.Entries[0].Name != "note.txt" || dir.Entries[0].Type != "file" || dir.Entries[0].Size != int64(len(content)) {
		t.Errorf("list_directory: %+v", dir)
	}

	// A command past its timeout is killed; what it printed is kept.
	var slow execResult
	mustCall(ctx, t, cs, "exec", map[string]any{"sandbox": sb.ID, "command": "echo started; exec sleep 600", "timeout_s": 10}, &slow)
	if !slow.TimedOut || slow.ExitCode != -1 || slow.Stdout != "started\n" {
		t.Errorf("exec past its timeout: %+v; want timed_out, exit -1, its output", slow)
	}
	var left string
	if err := waitFor(time.Minute, func() bool {
		r, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "ps -o args | grep -c '^sleep 60[0]' || true"})
		if err != nil {
			left = err.Error()
			return false
		}
		left = strings.TrimSpace(r.Stdout)
		return left == "0"
	}); err != nil {
		t.Errorf("the timed-out command is not killed: %s", left)
	}

	// Binary content goes both ways in base64; as text it is refused
	// with what to do instead.
	bin := base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff, 'x'})
	mustCall(ctx, t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "/tmp/bin", "content": bin, "encoding": "base64"}, nil)
	if text, isErr := callTool(ctx, t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "/tmp/bin"}, nil); !isErr || !strings.Contains(text, `encoding "base64"`) {
		t.Errorf("read_file of a binary file as text: %v %q; want a tool error naming base64", isErr, text)
	}
	var readBin struct{ Content string }
	mustCall(ctx, t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "/tmp/bin", "encoding": "base64"}, &readBin)
	if readBin.Content != bin {
		t.Errorf("read_file base64: %q, want %q", readBin.Content, bin)
	}
	if text, isErr := callTool(ctx, t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "/tmp/none"}, nil); !isErr || !strings.Contains(text, "(not_found)") || !strings.Contains(text, "list_directory") {
		t.Errorf("read_file of a missing file: %v %q; want not_found and what to do", isErr, text)
	}

	// Output past the bound is cut in the middle, said so.
	var big execResult
	mustCall(ctx, t, cs, "exec", map[string]any{"sandbox": sb.ID, "command": "i=0; while [ $i -lt 2000 ]; do echo line-$i-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; i=$((i+1)); done"}, &big)
	if !big.Truncated || len(big.Stdout) > 34<<10 || !strings.HasPrefix(big.Stdout, "line-0-") || !strings.HasSuffix(big.Stdout, "line-1999-"+strings.Repeat("a", 50)+"\n") || !strings.Contains(big.Stdout, "bytes of output left out") {
		t.Errorf("exec of 120 KB of output: truncated %v, %d bytes returned, head %.20q, tail %q", big.Truncated, len(big.Stdout), big.Stdout, big.Stdout[max(0, len(big.Stdout)-80):])
	}

	mustCall(ctx, t, cs, "exec", map[string]any{"sandbox": sb.ID,
		"command": "mkdir -p /www && echo from-mcp > /www/index.html && httpd -p 8080 -h /www >/dev/null 2>&1"}, nil)
	var port struct {
		Port int
		URL  string
	}
	mustCall(ctx, t, cs, "expose_port", map[string]any{"sandbox": sb.ID, "port": 8080}, &port)
	wantHost := "8080-" + sb.ID + ".localhost"
	if port.Port != 8080 || !strings.Contains(port.URL, wantHost) {
		t.Fatalf("expose_port: %+v, want a URL on %s", port, wantHost)
	}
	fetchPreview(ctx, t, d, port.URL, token, "from-mcp\n")

	var gone struct {
		ID        string
		Destroyed bool
	}
	mustCall(ctx, t, cs, "destroy_sandbox", map[string]any{"sandbox": sb.ID}, &gone)
	if gone.ID != sb.ID || !gone.Destroyed {
		t.Errorf("destroy_sandbox: %+v", gone)
	}
	if _, err := c.GetSandbox(ctx, sb.ID); !isNotFound(err) {
		t.Errorf("after destroy_sandbox, GetSandbox: %v; want not found", err)
	}
}

// waitProgress waits for a progress message containing want; done
// closing first (the call returned) fails t.
func waitProgress(ctx context.Context, t *testing.T, log *progressLog, want string, done <-chan struct{}) {
	t.Helper()
	for {
		select {
		case msg := <-log.seen:
			if strings.Contains(msg, want) {
				return
			}
		case <-done:
			t.Fatalf("the call returned before a progress notification carried %q", want)
		case <-ctx.Done():
			t.Fatalf("no progress notification carried %q", want)
		}
	}
}

// fetchPreview GETs a preview URL through d's listener (its host is a
// *.localhost name) with the token, until it answers want.
func fetchPreview(ctx context.Context, t *testing.T, d *daemonProcess, url, token, want string) {
	t.Helper()
	addr := strings.TrimPrefix(d.URL(), "http://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	var last string
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == want {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("GET %s never answered %q: last %s", url, want, last)
}

func TestMCP_HTTP_Tools(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 4*time.Minute)
	log := newProgressLog()
	cs := connectHTTP(ctx, t, d, d.Token(), log)
	mcpSandboxFlow(ctx, t, d, d.Token(), cs, log)
}

func TestMCP_Stdio_Tools(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 4*time.Minute)
	log := newProgressLog()
	cs := connectStdio(ctx, t, d, d.Token(), log)
	mcpSandboxFlow(ctx, t, d, d.Token(), cs, log)
}

// /mcp is behind the API's token check: no token, a malformed one and
// a well-formed token nobody holds are refused with 401 before any MCP
// is read, whatever the method; the MCP client cannot connect.
func TestMCP_HTTP_RefusesWithoutAValidToken(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, time.Minute)
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for name, hdr := range map[string]string{
		"no token":        "",
		"not a token":     "Bearer nope",
		"a wrong token":   "Bearer sbx_00000000_" + strings.Repeat("0", 64),
		"another scheme":  "Basic " + d.Token(),
		"a revoked token": "Bearer " + revokedToken(ctx, t, d),
	} {
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			req, _ := http.NewRequestWithContext(ctx, method, d.URL()+"/mcp", strings.NewReader(initialize))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if hdr != "" {
				req.Header.Set("Authorization", hdr)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"unauthenticated"`) {
				t.Errorf("%s %s: %d %s; want 401 unauthenticated", name, method, resp.StatusCode, body)
			}
		}
	}
	tr := &mcp.StreamableClientTransport{Endpoint: d.URL() + "/mcp"}
	if cs, err := mcpClient(newProgressLog()).Connect(ctx, tr, nil); err == nil {
		cs.Close()
		t.Error("an MCP client without a token connected to /mcp")
	}
}

// revokedToken makes a user token and revokes it.
func revokedToken(ctx context.Context, t *testing.T, d *daemonProcess) string {
	t.Helper()
	admin := newClient(d, true)
	tok, err := admin.CreateToken(ctx, sandboxd.CreateTokenRequest{Name: "mcp-revoked", Role: sandboxd.RoleUser, Owner: "mcp-revoked"})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	return tok.Secret
}

// Another tenant's sandbox is invisible through MCP on both transports:
// list_sandboxes leaves it out, and every tool that names it fails with
// the very text a sandbox id nobody has gets, so the error does not tell
// that it exists; it is untouched afterwards.
func TestMCP_OtherTenantsSandboxIsInvisible(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	admin := newClient(d, true)
	tok, err := admin.CreateToken(ctx, sandboxd.CreateTokenRequest{Name: "mcp-mallory", Role: sandboxd.RoleUser, Owner: "mcp-mallory-" + fmt.Sprint(time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.RevokeToken(context.Background(), tok.ID) })
	victim := createTestSandbox(ctx, t, admin, sandboxd.CreateRequest{Name: "mcp-victim-" + fmt.Sprint(time.Now().UnixNano())})
	if _, err := admin.Exec(ctx, victim.ID, sandboxd.ExecRequest{Command: "echo secret > /tmp/secret"}); err != nil {
		t.Fatal(err)
	}
	const nobody = "sb-0123456789abcdef"

	for transport, connect := range map[string]func(context.Context, *testing.T, *daemonProcess, string, *progressLog) *mcp.ClientSession{
		"http": connectHTTP, "stdio": connectStdio,
	} {
		t.Run(transport, func(t *testing.T) {
			cs := connect(ctx, t, d, tok.Secret, newProgressLog())
			var listed struct {
				Sandboxes []struct{ ID string }
			}
			mustCall(ctx, t, cs, "list_sandboxes", nil, &listed)
			for _, s := range listed.Sandboxes {
				if s.ID == victim.ID {
					t.Errorf("list_sandboxes shows another tenant's sandbox %s", victim.ID)
				}
			}
			for _, tc := range []struct {
				tool string
				args map[string]any
			}{
				{"exec", map[string]any{"command": "cat /tmp/secret"}},
				{"read_file", map[string]any{"path": "/tmp/secret"}},
				{"write_file", map[string]any{"path": "/tmp/secret", "content": "pwned"}},
				{"list_directory", map[string]any{"path": "/tmp"}},
				{"expose_port", map[string]any{"port": 8080, "public": true}},
				{"destroy_sandbox", map[string]any{}},
			} {
				texts := map[string]string{}
				for _, id := range []string{victim.ID, nobody, victim.Name} {
					args := map[string]any{"sandbox": id}
					for k, v := range tc.args {
						args[k] = v
					}
					text, isErr := callTool(ctx, t, cs, tc.tool, args, nil)
					if !isErr {
						t.Fatalf("%s on %s succeeded for another tenant: %s", tc.tool, id, text)
					}
					if strings.Contains(text, "secret\n") || strings.Contains(text, "sandboxd/") || strings.Contains(text, "internal/") {
						t.Errorf("%s on %s: %q leaks", tc.tool, id, text)
					}
					texts[id] = strings.ReplaceAll(text, id, "<id>")
				}
				t.Logf("%s: %s", tc.tool, texts[nobody])
				if !strings.Contains(texts[nobody], "(not_found)") || !strings.Contains(texts[nobody], "list_sandboxes") {
					t.Errorf("%s on an unknown id: %q; want not_found and what to do", tc.tool, texts[nobody])
				}
				if texts[victim.ID] != texts[nobody] {
					t.Errorf("%s: another tenant's sandbox reads %q, an unknown id %q: the difference tells it exists", tc.tool, texts[victim.ID], texts[nobody])
				}
				if texts[victim.Name] != texts[nobody] {
					t.Errorf("%s: another tenant's sandbox name reads %q, an unknown id %q", tc.tool, texts[victim.Name], texts[nobody])
				}
			}
		})
	}
	res, err := admin.Exec(ctx, victim.ID, sandboxd.ExecRequest{Command: "cat /tmp/secret"})
	if err != nil || res.Stdout != "secret\n" {
		t.Fatalf("the victim's sandbox after the attempts: %+v %v; want it untouched", res, err)
	}
}

// Bad arguments are tool errors that say what to fix, checked before
// any call to the daemon; a command's failure is not an error.
func TestMCP_ToolErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := testContext(t, 2*time.Minute)
	cs := connectHTTP(ctx, t, d, d.Token(), newProgressLog())
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"exec", map[string]any{"sandbox": "", "command": "true"}, "sandbox is empty"},
		{"exec", map[string]any{"sandbox": "sb-0123456789abcdef", "command": strings.Repeat("x", 70<<10)}, "at most 65536"},
		{"read_file", map[string]any{"sandbox": "sb-0123456789abcdef", "path": "/x", "encoding": "hex"}, `want "text" or "base64"`},
		{"write_file", map[string]any{"sandbox": "sb-0123456789abcdef", "path": "/x", "content": strings.Repeat("x", 1<<20+1)}, "at most 1048576"},
		{"expose_port", map[string]any{"sandbox": "sb-0123456789abcdef", "port": 70000}, "1 to 65535"},
		{"create_sandbox", map[string]any{"image": busyboxImage, "template": "t"}, "not both"},
		{"create_sandbox", map[string]any{"image": "sandboxd/does-not-exist:nope", "cpu": 0.25, "memory_mb": 128}, "create_sandbox failed ("},
	} {
		text, isErr := callTool(ctx, t, cs, tc.tool, tc.args, nil)
		t.Logf("%s: %s", tc.tool, text)
		if !isErr || !strings.Contains(text, tc.want) {
			t.Errorf("%s(%.80v): %v %q; want a tool error containing %q", tc.tool, tc.args, isErr, text, tc.want)
		}
		for _, leak := range []string{"sandboxd: ", "apierr", "mcp.", ": %!"} {
			if strings.Contains(text, leak) {
				t.Errorf("%s: %q carries %q", tc.tool, text, leak)
			}
		}
	}
}
