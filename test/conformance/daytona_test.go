package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
)

// daytona is the Daytona facade as @daytonaio/sdk 0.218 speaks it
// (reference/e2b-daytona-wire.md, test/compat/daytona/WIRE.md): the control
// plane under /daytona/api, the toolbox under /daytona/api/toolbox/{id},
// Bearer tokens on both.
type daytona struct {
	base, token string
}

const daytonaAPI = "/daytona/api"

func (w *daytona) Name() string { return "daytona" }

func (w *daytona) As(cred credential) wire {
	c := *w
	c.token = map[credential]string{credNone: "", credWrong: wrongToken, credOther: otherToken}[cred]
	return &c
}

// daytonaError is NestJS's error body, with Daytona's code and source
// where the SDK maps them to its own classes.
type daytonaError struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
	Error      string `json:"error"`
	Code       string `json:"code,omitempty"`
	Source     string `json:"source,omitempty"`
}

func (w *daytona) parse(status int, b []byte) error {
	var body daytonaError
	if err := strict(b, &body); err != nil {
		return fmt.Errorf("daytona: error body %q is not {statusCode,message,error}: %v", b, err)
	}
	if body.StatusCode != status || body.Error != http.StatusText(status) || body.Message == "" {
		return fmt.Errorf("daytona: %d with body %s", status, b)
	}
	return &wireError{Wire: "daytona", Status: status, Class: statusClass(status), Raw: string(b)}
}

func (w *daytona) do(ctx context.Context, method, path string, body any, out any, hdr ...string) error {
	h := http.Header{"Content-Type": {"application/json"}}
	if w.token != "" {
		h.Set("Authorization", "Bearer "+w.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	var r io.Reader
	switch b := body.(type) {
	case nil:
		r = bytes.NewReader(nil)
	case string:
		r = bytes.NewReader([]byte(b))
	case *bytes.Buffer:
		r = b
	default:
		enc, _ := json.Marshal(b)
		r = bytes.NewReader(enc)
	}
	resp, _, err := call(ctx, method, w.base+daytonaAPI+path, h, r, w.parse)
	if err != nil || out == nil {
		return err
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = resp
		return nil
	}
	if err := json.Unmarshal(resp, out); err != nil {
		return fmt.Errorf("daytona: %s %s: %q: %v", method, path, resp, err)
	}
	return nil
}

type daytonaSandbox struct {
	ID     string            `json:"id"`
	State  string            `json:"state"`
	Labels map[string]string `json:"labels"`
}

func (s daytonaSandbox) view() view {
	st := s.State
	if st == "started" {
		st = stateRunning
	}
	return view{ID: s.ID, State: st, Labels: s.Labels}
}

func (w *daytona) Create(ctx context.Context, r createReq) (string, error) {
	var hdr []string
	if r.Key != "" {
		hdr = []string{"Idempotency-Key", r.Key}
	}
	var sb daytonaSandbox
	err := w.do(ctx, http.MethodPost, "/sandbox", map[string]any{
		"snapshot": image, "env": r.Env, "labels": r.Labels, "cpu": 0.5, "memory": 0.25,
	}, &sb, hdr...)
	return sb.ID, err
}

func (w *daytona) CreateRaw(ctx context.Context, body string) error {
	body = strings.NewReplacer("$IMAGE", "snapshot", "$ENV", "env", "$LABELS", "labels").Replace(body)
	return w.do(ctx, http.MethodPost, "/sandbox", body, nil)
}

func (w *daytona) Get(ctx context.Context, id string) (view, error) {
	var sb daytonaSandbox
	err := w.do(ctx, http.MethodGet, "/sandbox/"+url.PathEscape(id), nil, &sb)
	return sb.view(), err
}

func (w *daytona) List(ctx context.Context, labels map[string]string) ([]view, error) {
	q := url.Values{"limit": {"100"}}
	if len(labels) > 0 {
		b, _ := json.Marshal(labels)
		q.Set("labels", string(b))
	}
	var out []view
	for {
		var body struct {
			Items      []daytonaSandbox `json:"items"`
			NextCursor *string          `json:"nextCursor"`
		}
		if err := w.do(ctx, http.MethodGet, "/sandbox?"+q.Encode(), nil, &body); err != nil {
			return nil, err
		}
		for _, sb := range body.Items {
			out = append(out, sb.view())
		}
		if body.NextCursor == nil || *body.NextCursor == "" {
			return out, nil
		}
		q.Set("cursor", *body.NextCursor)
	}
}

func (w *daytona) Stop(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodPost, "/sandbox/"+url.PathEscape(id)+"/stop", nil, nil)
}

func (w *daytona) Start(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodPost, "/sandbox/"+url.PathEscape(id)+"/start", nil, nil)
}

func (w *daytona) Delete(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodDelete, "/sandbox/"+url.PathEscape(id), nil, nil)
}

func toolbox(id, rest string) string { return "/toolbox/" + url.PathEscape(id) + rest }

// Upload is the SDK's uploadFile: a bulk upload whose destination is the
// files[0].path field, before the file part (whose filename is a base
// name only).
func (w *daytona) Upload(ctx context.Context, id, path string, data []byte) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("files[0].path", path)
	part, err := mw.CreateFormFile("files[0].file", "upload.bin")
	if err != nil {
		return err
	}
	part.Write(data)
	mw.Close()
	return w.do(ctx, http.MethodPost, toolbox(id, "/files/bulk-upload"), &body, nil,
		"Content-Type", mw.FormDataContentType())
}

// Download is the SDK's downloadFile: a bulk download of one path, whose
// answer is one part named file (the bytes) or error (a JSON error), its
// filename the path exactly.
func (w *daytona) Download(ctx context.Context, id, path string) ([]byte, error) {
	h := http.Header{"Content-Type": {"application/json"}}
	if w.token != "" {
		h.Set("Authorization", "Bearer "+w.token)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+daytonaAPI+toolbox(id, "/files/bulk-download"),
		jsonBody(map[string]any{"paths": []string{path}}))
	if err != nil {
		return nil, err
	}
	req.Header = h
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, w.parse(resp.StatusCode, b)
	}
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return nil, fmt.Errorf("daytona: bulk-download answered %q, want multipart/form-data", resp.Header.Get("Content-Type"))
	}
	part, err := multipart.NewReader(resp.Body, params["boundary"]).NextPart()
	if err != nil {
		return nil, fmt.Errorf("daytona: bulk-download: no part: %w", err)
	}
	// Part.FileName is a base name; the SDK matches the exact path.
	_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if dp["filename"] != path {
		return nil, fmt.Errorf("daytona: bulk-download part filename %q, want %q exactly", dp["filename"], path)
	}
	b, err := io.ReadAll(part)
	if err != nil {
		return nil, err
	}
	switch part.FormName() {
	case "file":
		return b, nil
	case "error":
		var e struct {
			Message    string `json:"message"`
			StatusCode int    `json:"statusCode"`
			Code       string `json:"code,omitempty"`
		}
		if err := strict(b, &e); err != nil || e.StatusCode == 0 || e.Message == "" {
			return nil, fmt.Errorf("daytona: error part %q is not {message,statusCode,code}: %v", b, err)
		}
		return nil, &wireError{Wire: "daytona", Status: e.StatusCode, Class: statusClass(e.StatusCode), Raw: string(b)}
	}
	return nil, fmt.Errorf("daytona: bulk-download part %q, want file or error", part.FormName())
}

func (w *daytona) ListDir(ctx context.Context, id, path string) ([]string, error) {
	var entries []struct {
		Name string `json:"name"`
	}
	if err := w.do(ctx, http.MethodGet, toolbox(id, "/files?path="+url.QueryEscape(path)), nil, &entries); err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	return names, nil
}

func (w *daytona) Exec(ctx context.Context, id string, r execReq) (execResult, error) {
	var out struct {
		ExitCode int    `json:"exitCode"`
		Result   string `json:"result"`
	}
	body := map[string]any{"command": r.Command, "envs": r.Env}
	if r.Cwd != "" {
		body["cwd"] = r.Cwd
	}
	err := w.do(ctx, http.MethodPost, toolbox(id, "/process/execute"), body, &out)
	return execResult{ExitCode: out.ExitCode, Stdout: out.Result, Combined: true}, err
}
