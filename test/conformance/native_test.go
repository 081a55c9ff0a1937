package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
)

// native is the daemon's own API, /v1 (docs/api-v1.md).
type native struct {
	base, token string
}

func (w *native) Name() string { return "native" }

func (w *native) As(cred credential) wire {
	c := *w
	c.token = map[credential]string{credNone: "", credWrong: wrongToken, credOther: otherToken}[cred]
	return &c
}

func (w *native) header() http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	if w.token != "" {
		h.Set("Authorization", "Bearer "+w.token)
	}
	return h
}

// parse reads {"error":{"code","message","retryable"}} and checks that
// status and retryable are the code's in the table.
func (w *native) parse(status int, b []byte) error {
	var body struct {
		Error struct {
			Code      apierr.Code `json:"code"`
			Message   string      `json:"message"`
			Retryable bool        `json:"retryable"`
		} `json:"error"`
	}
	if err := strict(b, &body); err != nil {
		return fmt.Errorf("native: error body %q is not {error:{code,message,retryable}}: %v", b, err)
	}
	c := apierr.Lookup(body.Error.Code)
	if c.Code != body.Error.Code || c.Status != status || c.Retryable != body.Error.Retryable || body.Error.Message == "" {
		return fmt.Errorf("native: %d %s disagrees with the table (%d, retryable %v)", status, b, c.Status, c.Retryable)
	}
	return &wireError{Wire: "native", Status: status, Class: body.Error.Code, Raw: string(b)}
}

func (w *native) do(ctx context.Context, method, path string, body any, out any, hdr ...string) error {
	h := w.header()
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	var r *bytes.Reader
	switch b := body.(type) {
	case nil:
		r = bytes.NewReader(nil)
	case []byte:
		h.Set("Content-Type", "application/octet-stream")
		r = bytes.NewReader(b)
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
	if raw, ok := out.(*[]byte); ok {
		*raw = resp
		return nil
	}
	if err := json.Unmarshal(resp, out); err != nil {
		return fmt.Errorf("native: %s %s: %q: %v", method, path, resp, err)
	}
	return nil
}

type nativeSandbox struct {
	ID    string            `json:"id"`
	State string            `json:"state"`
	Tags  map[string]string `json:"tags"`
}

func (s nativeSandbox) view() view { return view{ID: s.ID, State: s.State, Labels: s.Tags} }

func (w *native) Create(ctx context.Context, r createReq) (string, error) {
	var hdr []string
	if r.Key != "" {
		hdr = []string{"Idempotency-Key", r.Key}
	}
	var sb nativeSandbox
	err := w.do(ctx, http.MethodPost, "/v1/sandboxes", map[string]any{
		"image": image, "env": r.Env, "tags": r.Labels, "cpu": 0.5, "memory_mb": 256,
	}, &sb, hdr...)
	return sb.ID, err
}

func (w *native) CreateRaw(ctx context.Context, body string) error {
	body = strings.NewReplacer("$IMAGE", "image", "$ENV", "env", "$LABELS", "tags").Replace(body)
	return w.do(ctx, http.MethodPost, "/v1/sandboxes", body, nil)
}

func (w *native) Get(ctx context.Context, id string) (view, error) {
	var sb nativeSandbox
	err := w.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id), nil, &sb)
	return sb.view(), err
}

func (w *native) List(ctx context.Context, labels map[string]string) ([]view, error) {
	q := url.Values{}
	for k, v := range labels {
		q.Set("tag."+k, v)
	}
	var out []view
	for page := ""; ; {
		if page != "" {
			q.Set("page_token", page)
		}
		var body struct {
			Items []nativeSandbox `json:"items"`
			Next  string          `json:"next_page_token"`
		}
		if err := w.do(ctx, http.MethodGet, "/v1/sandboxes?"+q.Encode(), nil, &body); err != nil {
			return nil, err
		}
		for _, sb := range body.Items {
			out = append(out, sb.view())
		}
		if page = body.Next; page == "" {
			return out, nil
		}
	}
}

func (w *native) Stop(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/stop", nil, nil)
}

func (w *native) Start(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/start", nil, nil)
}

func (w *native) Delete(ctx context.Context, id string) error {
	return w.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id), nil, nil)
}

func filesPath(id, suffix, path string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + "/files" + suffix + "?path=" + url.QueryEscape(path)
}

func (w *native) Upload(ctx context.Context, id, path string, data []byte) error {
	return w.do(ctx, http.MethodPut, filesPath(id, "", path), data, nil)
}

func (w *native) Download(ctx context.Context, id, path string) ([]byte, error) {
	var b []byte
	err := w.do(ctx, http.MethodGet, filesPath(id, "", path), nil, &b)
	return b, err
}

func (w *native) ListDir(ctx context.Context, id, path string) ([]string, error) {
	var body struct {
		Entries []struct {
			Name string `json:"name"`
		} `json:"entries"`
	}
	if err := w.do(ctx, http.MethodGet, filesPath(id, "/list", path), nil, &body); err != nil {
		return nil, err
	}
	var names []string
	for _, e := range body.Entries {
		names = append(names, e.Name)
	}
	return names, nil
}

func (w *native) Exec(ctx context.Context, id string, r execReq) (execResult, error) {
	var out struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	err := w.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/exec", map[string]any{
		"command": r.Command, "env": r.Env, "cwd": r.Cwd,
	}, &out)
	return execResult{ExitCode: out.ExitCode, Stdout: out.Stdout, Stderr: out.Stderr}, err
}
