package e2b_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	"github.com/sandboxd/sandboxd/internal/gen/envd/filesystem/filesystemconnect"
	procrpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
	"github.com/sandboxd/sandboxd/internal/service"
)

// envdHeaders adds E2B's single-host routing headers, as the SDKs send them.
type envdHeaders struct {
	id, port, token string
}

func (e envdHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", e.id)
	r.Header.Set("E2b-Sandbox-Port", e.port)
	if e.token != "" {
		r.Header.Set("X-Access-Token", e.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// envdClients are Connect clients speaking JSON (as the JS SDK does) to
// sandbox id through the facade.
func envdClients(h *harness, id, token string) (processconnect.ProcessClient, filesystemconnect.FilesystemClient) {
	hc := &http.Client{Transport: envdHeaders{id: id, port: "49983", token: token}}
	return processconnect.NewProcessClient(hc, h.url, connect.WithProtoJSON()),
		filesystemconnect.NewFilesystemClient(hc, h.url, connect.WithProtoJSON())
}

func TestEnvd_UnaryAndStreamThroughTheFacade(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	proc, fs := envdClients(h, c.SandboxID, c.EnvdAccessToken)

	st, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/etc/hostname"}))
	if err == nil && st.Msg.GetEntry().GetType() != fsrpc.FileType_FILE_TYPE_FILE {
		t.Errorf("stat: %v", st.Msg)
	}
	if _, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/no/such/file"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("stat of a missing file: %v, want not_found", err)
	}
	// The default user is E2B's `user`: relative paths resolve in /home/user.
	home, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "."}))
	if err != nil {
		t.Fatalf("stat .: %v", err)
	}
	if home.Msg.GetEntry().GetPath() != "/home/user" || home.Msg.GetEntry().GetOwner() != "user" {
		t.Errorf("stat . as the default user: %v", home.Msg.GetEntry())
	}

	stream, err := proc.Start(t.Context(), connect.NewRequest(&procrpc.StartRequest{
		Process: &procrpc.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi; whoami"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var (
		kinds  []string
		stdout strings.Builder
		exit   *procrpc.ProcessEvent_EndEvent
	)
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().GetEvent().(type) {
		case *procrpc.ProcessEvent_Start:
			kinds = append(kinds, "start")
		case *procrpc.ProcessEvent_Data:
			stdout.Write(ev.Data.GetStdout())
		case *procrpc.ProcessEvent_End:
			kinds = append(kinds, "end")
			exit = ev.End
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(kinds) != 2 || kinds[0] != "start" || kinds[1] != "end" || exit.GetExitCode() != 0 {
		t.Errorf("events %v, exit %v", kinds, exit)
	}
	if stdout.String() != "hi\nuser\n" {
		t.Errorf("stdout %q", stdout.String())
	}
}

func TestEnvd_SecureSandboxNeedsItsAccessToken(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	other := h.create(t, map[string]any{"templateID": "base", "metadata": map[string]string{"other": "1"}})
	if c.EnvdAccessToken == "" || c.TrafficAccessToken == nil || other.TrafficAccessToken != nil {
		t.Fatalf("tokens: %+v and %+v", c, other)
	}
	for name, token := range map[string]string{"none": "", "wrong": "x", "another sandbox's": other.EnvdAccessToken} {
		_, fs := envdClients(h, c.SandboxID, token)
		_, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/"}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s token: %v, want unauthenticated", name, err)
		}
	}
	// /health needs no token (the SDK's isRunning).
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", c.SandboxID)
	if resp := doReq(t, req); resp.status != http.StatusNoContent {
		t.Errorf("health: %d %s", resp.status, resp.body)
	}

	// Other ports of a sandbox with allowPublicTraffic=false want the
	// traffic token (nothing listens on 8080: past the check it is 502).
	port := func(token string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/", nil)
		req.Header.Set("E2b-Sandbox-Id", c.SandboxID)
		req.Header.Set("E2b-Sandbox-Port", "8080")
		if token != "" {
			req.Header.Set("E2B-Traffic-Access-Token", token)
		}
		return doReq(t, req).status
	}
	if got := port(""); got != http.StatusForbidden {
		t.Errorf("port 8080 without the traffic token: %d, want 403 (E2B's)", got)
	}
	if got := port(*c.TrafficAccessToken); got != http.StatusBadGateway {
		t.Errorf("port 8080 with the traffic token: %d, want 502", got)
	}
}

func TestEnvd_InsecureV1Sandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	resp := h.do(t, h.admin, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "secure": false})
	if resp.status != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	var c created
	decode(t, resp.body, &c)
	h.cleanup(t, c.SandboxID)
	if c.EnvdAccessToken != "" {
		t.Errorf("an insecure sandbox got an access token")
	}
	_, fs := envdClients(h, c.SandboxID, "")
	if _, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/"})); err != nil {
		t.Errorf("stat without a token: %v", err)
	}
}

func TestEnvd_SandboxNotRunningIs502(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+c.SandboxID+"/pause", nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
	for _, id := range []string{c.SandboxID, "sb-00000000deadbeef"} {
		proc, fs := envdClients(h, id, c.EnvdAccessToken)
		if _, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: "/"})); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("%s: unary: %v, want unavailable", id, err)
		}
		stream, err := proc.Start(t.Context(), connect.NewRequest(&procrpc.StartRequest{Process: &procrpc.ProcessConfig{Cmd: "true"}}))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
		}
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("%s: stream: %v, want unavailable", id, err)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/health", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		if resp := doReq(t, req); resp.status != http.StatusBadGateway {
			t.Errorf("%s: health: %d, want 502", id, resp.status)
		}
	}
}

func TestCodeInterpreter_ExecuteThroughPort49999(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "code-interpreter-v1"})

	execute := func(code string) []map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/execute", jsonBody(t, map[string]any{"code": code}))
		req.Header.Set("E2b-Sandbox-Id", c.SandboxID)
		req.Header.Set("E2b-Sandbox-Port", "49999")
		req.Header.Set("X-Access-Token", c.EnvdAccessToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("execute: %d", resp.StatusCode)
		}
		var events []map[string]any
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev map[string]any
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			events = append(events, ev)
		}
		return events
	}
	result := func(events []map[string]any) any {
		for _, ev := range events {
			if ev["type"] == "result" {
				return ev["text"]
			}
		}
		return nil
	}
	execute("x = 41")
	if got := result(execute("x + 1")); got != "42" {
		t.Errorf("x + 1 = %v, want 42", got)
	}

	// After pause and resume the server runs again (state starts afresh).
	if resp := h.do(t, h.admin, http.MethodPost, "/sandboxes/"+c.SandboxID+"/pause", nil); resp.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", resp.status, resp.body)
	}
	if resp := h.do(t, h.admin, http.MethodPost, "/v2/sandboxes/"+c.SandboxID+"/connect", nil); resp.status != http.StatusCreated {
		t.Fatalf("connect: %d %s", resp.status, resp.body)
	}
	if got := result(execute("1 + 1")); got != "2" {
		t.Errorf("after resume, 1 + 1 = %v", got)
	}
}

// TestEnvd_NativeSandboxPortsStayBehindTheIngress: E2B's "other ports are
// public" applies to sandboxes made through the E2B API only. A sandbox of
// the native API is reached on its ports through its preview URL, where
// exposure and private-port auth hold; the E2B headers must not bypass
// them.
func TestEnvd_NativeSandboxPortsStayBehindTheIngress(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "owner", Image: "sandboxd/busybox:latest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.svc.Destroy(context.Background(), service.Caller{Admin: true}, c.ID) })
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, h.url+"/", nil)
	req.Header.Set("E2b-Sandbox-Id", c.ID)
	req.Header.Set("E2b-Sandbox-Port", "5432")
	if got := doReq(t, req).status; got != http.StatusUnauthorized {
		t.Errorf("port 5432 of a native sandbox through E2B headers: %d, want 401", got)
	}
}

// TestEnvd_AnotherTenantsNameAnswersLikeNoSandbox: envd routing takes ids
// only. A name in E2b-Sandbox-Id used to be looked up across every owner,
// so GET /health answered 204 for a name another tenant holds and 502 for
// one nobody does: an existence oracle. Now both answer alike, on the REST
// and the Connect paths, and the sandbox's own id still routes.
func TestEnvd_AnotherTenantsNameAnswersLikeNoSandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	sb, err := h.svc.CreateSandbox(t.Context(), service.CreateRequest{Owner: "bob", Name: "secret-web", Image: "sandboxd/busybox:latest"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.svc.Destroy(context.Background(), service.Caller{Admin: true}, sb.ID) })
	ask := func(id, method, path string) response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, h.url+path, strings.NewReader("{}"))
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("Content-Type", "application/json")
		return doReq(t, req)
	}
	if got := ask(sb.ID, http.MethodGet, "/health").status; got != http.StatusNoContent {
		t.Fatalf("GET /health by the sandbox's id: %d, want 204", got)
	}
	for _, rq := range []struct{ method, path string }{
		{http.MethodGet, "/health"},
		{http.MethodPost, "/filesystem.Filesystem/Stat"},
	} {
		held, none := ask("secret-web", rq.method, rq.path), ask("no-such-web", rq.method, rq.path)
		want := strings.ReplaceAll(string(none.body), "no-such-web", "secret-web")
		if held.status != none.status || string(held.body) != want {
			t.Errorf("%s %s: another tenant's name answers %d %s, a name nobody holds %d %s; want the same",
				rq.method, rq.path, held.status, held.body, none.status, none.body)
		}
		if held.status != http.StatusBadGateway {
			t.Errorf("%s %s by a name: %d, want 502 like a sandbox that is not there", rq.method, rq.path, held.status)
		}
	}
}

// sdkSignature signs a /files URL as the SDK does (src/sandbox/signature.ts).
func sdkSignature(path, op, user, token, exp string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != "" {
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// TestEnvd_SignedFileURLs: uploadUrl()/downloadUrl() of a secure sandbox
// carry a signature instead of X-Access-Token. A valid one passes, with the
// user it signs (never one an Authorization header picks); an expired,
// tampered or missing one is 401 in envd's shape.
func TestEnvd_SignedFileURLs(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	const path = "/tmp/signed.txt"
	future := strconv.FormatInt(time.Now().Unix()+300, 10)
	past := strconv.FormatInt(time.Now().Unix()-5, 10)
	fileURL := func(op, path, user, exp, sig string) string {
		q := url.Values{"path": {path}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		if sig == "" {
			sig = sdkSignature(path, op, user, c.EnvdAccessToken, exp)
		}
		q.Set("signature", sig)
		return h.url + "/files?" + q.Encode()
	}
	send := func(method, u string, body io.Reader, hdr map[string]string) response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, u, body)
		req.Header.Set("E2b-Sandbox-Id", c.SandboxID)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return doReq(t, req)
	}

	up := send(http.MethodPost, fileURL("write", path, "", future, ""), strings.NewReader("signed"),
		map[string]string{"Content-Type": "application/octet-stream", "Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))})
	if up.status != http.StatusOK {
		t.Fatalf("signed upload: %d %s", up.status, up.body)
	}
	if down := send(http.MethodGet, fileURL("read", path, "", "", ""), nil, nil); down.status != http.StatusOK || string(down.body) != "signed" {
		t.Errorf("signed download: %d %q", down.status, down.body)
	}
	// The default user wrote it, whatever Authorization said.
	_, fs := envdClients(h, c.SandboxID, c.EnvdAccessToken)
	st, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: path}))
	if err != nil || st.Msg.GetEntry().GetOwner() != "user" {
		t.Errorf("owner of the signed upload: %v %v, want user", st.Msg.GetEntry(), err)
	}

	for name, u := range map[string]string{
		"expired":        fileURL("read", path, "", past, ""),
		"another path":   fileURL("read", "/etc/shadow", "", "", sdkSignature(path, "read", "", c.EnvdAccessToken, "")),
		"another user":   fileURL("read", path, "root", "", sdkSignature(path, "read", "", c.EnvdAccessToken, "")),
		"forged":         fileURL("read", path, "", "", sdkSignature(path, "read", "", "guess", "")),
		"write for read": fileURL("read", path, "", "", sdkSignature(path, "write", "", c.EnvdAccessToken, "")),
		"unsigned":       h.url + "/files?path=" + url.QueryEscape(path),
	} {
		resp := send(http.MethodGet, u, nil, nil)
		wantError(t, resp, http.StatusUnauthorized)
		if strings.Contains(string(resp.body), "signed") && !strings.Contains(string(resp.body), "message") {
			t.Errorf("%s: leaked the file: %s", name, resp.body)
		}
	}
}

// TestEnvd_SignedFileURLsNameNoSandbox: the SDK builds uploadUrl() and
// downloadUrl() on E2B_SANDBOX_URL, with no sandbox id in the Host or the
// headers. Such a URL goes to the sandbox whose access token signed it,
// among several; one no sandbox signed, or an expired one, is 401.
func TestEnvd_SignedFileURLsNameNoSandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	other := h.create(t, map[string]any{"templateID": "base"})
	c := h.create(t, map[string]any{"templateID": "base"})
	const path = "/tmp/bare.txt"
	signed := func(op, path, exp, token string) string {
		q := url.Values{"path": {path}, "signature": {sdkSignature(path, op, "", token, exp)}}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		return h.url + "/files?" + q.Encode()
	}
	send := func(method, u string, body io.Reader) response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, u, body)
		if body != nil {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		return doReq(t, req)
	}

	if up := send(http.MethodPost, signed("write", path, "", c.EnvdAccessToken), strings.NewReader("bare")); up.status != http.StatusOK {
		t.Fatalf("signed upload without a sandbox id: %d %s", up.status, up.body)
	}
	future := strconv.FormatInt(time.Now().Unix()+300, 10)
	if down := send(http.MethodGet, signed("read", path, future, c.EnvdAccessToken), nil); down.status != http.StatusOK || string(down.body) != "bare" {
		t.Errorf("signed download without a sandbox id: %d %q, want 200 \"bare\"", down.status, down.body)
	}
	// The other sandbox's token opens the other sandbox, which has no such file.
	if down := send(http.MethodGet, signed("read", path, "", other.EnvdAccessToken), nil); down.status != http.StatusNotFound {
		t.Errorf("download signed by the other sandbox: %d %s, want 404 (its own file system)", down.status, down.body)
	}
	past := strconv.FormatInt(time.Now().Unix()-5, 10)
	for name, u := range map[string]string{
		"forged":  signed("read", path, "", "guess"),
		"expired": signed("read", path, past, c.EnvdAccessToken),
	} {
		resp := send(http.MethodGet, u, nil)
		wantError(t, resp, http.StatusUnauthorized)
		if strings.Contains(string(resp.body), "bare") {
			t.Errorf("%s: leaked the file: %s", name, resp.body)
		}
	}
}

// TestEnvd_FileMetadataInARealSandbox (envd 0.6.2, reported since the
// facade answers envdVersion 0.6.4): X-Metadata-* on an upload through the
// facade lands as attributes the sandbox's file system keeps, and Stat
// reports them, in /tmp and in the user's home alike.
func TestEnvd_FileMetadataInARealSandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	c := h.create(t, map[string]any{"templateID": "base"})
	if c.EnvdVersion != "0.6.4" {
		t.Errorf("envdVersion %q, want 0.6.4", c.EnvdVersion)
	}
	_, fs := envdClients(h, c.SandboxID, c.EnvdAccessToken)
	for _, path := range []string{"/tmp/meta.txt", "/home/user/meta.txt"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+"/files?path="+url.QueryEscape(path), strings.NewReader("x"))
		req.Header.Set("E2b-Sandbox-Id", c.SandboxID)
		req.Header.Set("X-Access-Token", c.EnvdAccessToken)
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("X-Metadata-Author", "alice")
		resp := doReq(t, req)
		if resp.status != http.StatusOK || !strings.Contains(string(resp.body), `"metadata":{"author":"alice"}`) {
			t.Fatalf("upload %s: %d %s", path, resp.status, resp.body)
		}
		st, err := fs.Stat(t.Context(), connect.NewRequest(&fsrpc.StatRequest{Path: path}))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Msg.GetEntry().GetMetadata(); got["author"] != "alice" || len(got) != 1 {
			t.Errorf("Stat(%s) metadata %v, want author=alice", path, got)
		}
	}
}
