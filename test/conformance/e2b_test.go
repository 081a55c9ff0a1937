package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/auth"
	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	"github.com/sandboxd/sandboxd/internal/gen/envd/filesystem/filesystemconnect"
	procrpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/gen/envd/process/processconnect"
)

// e2b is the E2B facade as e2b 2.51 speaks it
// (reference/e2b-daytona-wire.md): the control plane with X-API-KEY in
// its e2b_ form, and envd — Connect JSON for processes and the file
// system, plain HTTP for /files — on the same base URL, routed by the
// E2b-Sandbox-Id header and authorized by the sandbox's envd access token.
type e2b struct {
	base, key string
	// cred, when set, replaces the envd access token too.
	cred credential
	// tokens are the envd access tokens create answered, by sandbox id.
	tokens *sync.Map
}

func (w *e2b) Name() string { return "e2b" }

func (w *e2b) As(cred credential) wire {
	c := *w
	c.cred = cred
	c.key = map[credential]string{credNone: "", credWrong: auth.E2BKey(wrongToken), credOther: auth.E2BKey(otherToken)}[cred]
	return &c
}

// parse reads E2B's error body {"code": <status>, "message"}; an envd
// edge answer for a sandbox it cannot reach carries its sandboxId too.
func (w *e2b) parse(status int, b []byte) error {
	var body struct {
		Code      int    `json:"code"`
		Message   string `json:"message"`
		SandboxID string `json:"sandboxId"`
	}
	if err := strict(b, &body); err != nil {
		return fmt.Errorf("e2b: error body %q is not {code,message}: %v", b, err)
	}
	if body.Code != status || body.Message == "" {
		return fmt.Errorf("e2b: %d with body %s: the SDKs read the body's code", status, b)
	}
	return &wireError{Wire: "e2b", Status: status, Class: statusClass(status), Raw: string(b)}
}

func (w *e2b) do(ctx context.Context, method, path string, body any, out any, hdr ...string) error {
	h := http.Header{"Content-Type": {"application/json"}}
	if w.key != "" {
		h.Set("X-API-KEY", w.key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	var r *bytes.Reader
	switch b := body.(type) {
	case nil:
		r = bytes.NewReader(nil)
	case string:
		r = bytes.NewReader([]byte(b))
	default:
		enc, _ := json.Marshal(b)
		r = bytes.NewReader(enc)
	}
	resp, _, err := call(ctx, method, w.base+path, h, r, w.parse)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(resp, out); err != nil {
		return fmt.Errorf("e2b: %s %s: %q: %v", method, path, resp, err)
	}
	return nil
}

func (w *e2b) Create(ctx context.Context, r createReq) (string, error) {
	var hdr []string
	if r.Key != "" {
		hdr = []string{"Idempotency-Key", r.Key}
	}
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	err := w.do(ctx, http.MethodPost, "/v2/sandboxes", map[string]any{
		"templateID": image, "envVars": r.Env, "metadata": r.Labels,
	}, &sb, hdr...)
	if err == nil {
		w.tokens.Store(sb.SandboxID, sb.EnvdAccessToken)
	}
	return sb.SandboxID, err
}

func (w *e2b) CreateRaw(ctx context.Context, body string) error {
	body = strings.NewReplacer("$IMAGE", "templateID", "$ENV", "envVars", "$LABELS", "metadata").Replace(body)
	return w.do(ctx, http.MethodPost, "/v2/sandboxes", body, nil)
}

type e2bSandbox struct {
	SandboxID string            `json:"sandboxID"`
	State     string            `json:"state"`
	Metadata  map[string]string `json:"metadata"`
}

func (s e2bSandbox) view() view {
	st := s.State
	if st == "paused" {
		st = stateStopped
	}
	return view{ID: s.SandboxID, State: st, Labels: s.Metadata}
}

func (w *e2b) Get(ctx context.Context, id string) (view, error) {
	var sb e2bSandbox
	err := w.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, &sb)
	return sb.view(), err
}

func (w *e2b) List(ctx context.Context, labels map[string]string) ([]view, error) {
	md := url.Values{}
	for k, v := range labels {
		md.Set(k, v)
	}
	q := url.Values{"state": {"running,paused"}, "limit": {"100"}}
	if len(md) > 0 {
		q.Set("metadata", md.Encode())
	}
	// One page is enough: the shared daemon holds a handful of sandboxes.
	var items []e2bSandbox
	if err := w.do(ctx, http.MethodGet, "/v2/sandboxes?"+q.Encode(), nil, &items); err != nil {
		return nil, err
	}
	var out []view
	for _, sb := range items {
		out = append(out, sb.view())
	}
	return out, nil
}

func (w *e2b) Stop(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", map[string]any{}, nil)
}

func (w *e2b) Start(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodPost, "/v2/sandboxes/"+url.PathEscape(id)+"/connect", map[string]any{}, nil)
}

func (w *e2b) Delete(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil)
}

// envdToken is what an envd request for id carries as X-Access-Token.
func (w *e2b) envdToken(id string) string {
	switch w.cred {
	case credNone, credOther: // another owner never has the sandbox's token
		return ""
	case credWrong:
		return strings.Repeat("0", 64)
	}
	tok, _ := w.tokens.Load(id)
	s, _ := tok.(string)
	return s
}

// envdHeader adds E2B's single-host routing headers, as the SDKs send
// them.
type envdHeader struct {
	id, token string
}

func (e envdHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	e.set(r.Header)
	return http.DefaultTransport.RoundTrip(r)
}

func (e envdHeader) set(h http.Header) {
	h.Set("E2b-Sandbox-Id", e.id)
	h.Set("E2b-Sandbox-Port", "49983")
	if e.token != "" {
		h.Set("X-Access-Token", e.token)
	}
}

func (w *e2b) envd(id string) (processconnect.ProcessClient, filesystemconnect.FilesystemClient) {
	hc := &http.Client{Transport: envdHeader{id: id, token: w.envdToken(id)}}
	return processconnect.NewProcessClient(hc, w.base, connect.WithProtoJSON()),
		filesystemconnect.NewFilesystemClient(hc, w.base, connect.WithProtoJSON())
}

// rpcErr turns a Connect error into a *wireError. The facade's own
// answers before the agent (a sandbox it cannot reach, a missing access
// token) are plain HTTP with E2B's body; Connect reads them as an
// HTTP-status error, whose code it derives from the status.
func rpcErr(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	if ce.Code() == connect.CodeUnknown && ce.Message() == "" {
		return err // not an answer: a transport failure, kept as it is
	}
	return &wireError{Wire: "e2b", Status: connectStatus(ce.Code()), Class: connectClass(ce.Code()), Raw: ce.Error(), Msg: ce.Message()}
}

func (w *e2b) envdFiles(ctx context.Context, method, id, path string, body *bytes.Buffer, ct string) ([]byte, error) {
	h := http.Header{}
	envdHeader{id: id, token: w.envdToken(id)}.set(h)
	if ct != "" {
		h.Set("Content-Type", ct)
	}
	if body == nil {
		body = &bytes.Buffer{}
	}
	b, _, err := call(ctx, method, w.base+"/files?path="+url.QueryEscape(path), h, body, w.parse)
	return b, err
}

func (w *e2b) Upload(ctx context.Context, id, path string, data []byte) error {
	// The SDK's default: multipart, one part named file whose filename is
	// the destination.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, err := mw.CreateFormFile("file", path)
	if err != nil {
		return err
	}
	part.Write(data)
	mw.Close()
	b, err := w.envdFiles(ctx, http.MethodPost, id, path, &body, mw.FormDataContentType())
	if err != nil {
		return err
	}
	var written []struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(b, &written); err != nil || len(written) == 0 {
		return fmt.Errorf("e2b: upload answered %q, want a JSON array of written files (%v)", b, err)
	}
	return nil
}

func (w *e2b) Download(ctx context.Context, id, path string) ([]byte, error) {
	return w.envdFiles(ctx, http.MethodGet, id, path, nil, "")
}

func (w *e2b) ListDir(ctx context.Context, id, path string) ([]string, error) {
	_, fs := w.envd(id)
	resp, err := fs.ListDir(ctx, connect.NewRequest(&fsrpc.ListDirRequest{Path: path, Depth: 1}))
	if err != nil {
		return nil, rpcErr(err)
	}
	var names []string
	for _, e := range resp.Msg.GetEntries() {
		names = append(names, e.GetName())
	}
	return names, nil
}

func (w *e2b) Exec(ctx context.Context, id string, r execReq) (execResult, error) {
	proc, _ := w.envd(id)
	// The SDK's command shape; an empty command is an empty cmd.
	cfg := &procrpc.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", r.Command}, Envs: r.Env}
	if r.Command == "" {
		cfg.Cmd, cfg.Args = "", nil
	}
	if r.Cwd != "" {
		cfg.Cwd = &r.Cwd
	}
	stdin := false
	stream, err := proc.Start(ctx, connect.NewRequest(&procrpc.StartRequest{Process: cfg, Stdin: &stdin}))
	if err != nil {
		return execResult{}, rpcErr(err)
	}
	defer stream.Close()
	var res execResult
	var stdout, stderr strings.Builder
	first, ended := true, false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if first && ev.GetStart() == nil {
			return execResult{}, fmt.Errorf("e2b: first event %v, want start (the SDK requires it)", ev)
		}
		first = false
		if d := ev.GetData(); d != nil {
			stdout.Write(d.GetStdout())
			stderr.Write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			res.ExitCode, ended = int(end.GetExitCode()), true
		}
	}
	if err := stream.Err(); err != nil {
		return execResult{}, rpcErr(err)
	}
	if !ended {
		return execResult{}, errors.New("e2b: the stream ended without an end event")
	}
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	return res, nil
}
