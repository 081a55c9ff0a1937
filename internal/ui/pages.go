package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// maxListed bounds the sandboxes one page lists.
const maxListed = 500

// defaultImage is the create form's image.
const defaultImage = "sandboxd/base:bookworm"

// parsePages parses each page with the layout around it.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"age":   age,
		"mb":    func(n int) string { return humanMB(int64(n)) },
		"mb64":  humanMB,
		"bytes": humanBytes,
		"join":  func(dir, name string) string { return path.Join(dir, name) },
		"limit": func(n int64) string {
			if n <= 0 {
				return "unlimited"
			}
			return strconv.FormatInt(n, 10)
		},
		"limitMB": func(n int64) string {
			if n <= 0 {
				return "unlimited"
			}
			return humanMB(n)
		},
		"cores": func(milli int64) string { return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64) },
		"cpuf":  func(cores float64) string { return strconv.FormatFloat(cores, 'f', -1, 64) },
		"usedMB": func(n int64) string {
			if n <= 0 {
				return "0"
			}
			return humanMB(n)
		},
	}
	names, err := fs.Glob(assets, "assets/pages/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/pages/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("ui: parse %s: %w", base, err)
		}
		out[strings.TrimSuffix(base, ".html")] = t
	}
	return out, nil
}

// view is what every page's template gets.
type view struct {
	Title   string
	Owner   string
	Admin   bool
	CSRF    string
	Version string
	Flash   string
	Data    any
}

// render writes page name with data, as status.
func (h *Handler) render(w http.ResponseWriter, status int, name string, sess *session, title string, data any) {
	v := view{Title: title, Version: h.version, Data: data}
	if sess != nil {
		v.Owner, v.Admin, v.CSRF = sess.principal.Owner, sess.principal.IsAdmin(), sess.csrf
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := h.pages[name].Execute(w, v); err != nil {
		h.logger.Warn("ui: render", "page", name, "err", err)
	}
}

// fail shows an error page: what failed, in the API's words.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, sess *session, status int, msg string) {
	h.render(w, status, "error", sess, http.StatusText(status), struct {
		Status  int
		Message string
	}{status, msg})
}

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "login", nil, "Log in", "")
}

// login exchanges an API token for a session cookie. The token arrives in
// a POST body only, is checked as the API checks it, and stays in the
// daemon's memory: the browser gets a random session id.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		h.fail(w, r, nil, http.StatusForbidden, "Cross-origin request refused.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	token := strings.TrimSpace(r.PostFormValue("token"))
	p, err := h.authenticate(r.Context(), token)
	if err != nil {
		status, msg := http.StatusUnauthorized, "That token is not valid: paste a sandboxd API token (sbx_…)."
		if !isUnauthenticated(err) {
			h.logger.Error("ui: login", "err", err)
			status, msg = http.StatusServiceUnavailable, "The daemon could not check the token: try again."
		}
		h.render(w, status, "login", nil, "Log in", msg)
		return
	}
	id, _, err := h.sessions.open(token, p, bindingOf(r))
	if err != nil {
		h.render(w, http.StatusServiceUnavailable, "login", nil, "Log in", err.Error())
		return
	}
	if c, ok := onlyCookie(r); ok {
		h.sessions.drop(c.Value) // a login replaces the browser's earlier session
	}
	if secureContext(r) && len(r.CookiesNamed(httpCookieName)) > 0 {
		// A cookie of the plain-HTTP name (an earlier version's) is never
		// read here: let the browser forget it.
		http.SetCookie(w, &http.Cookie{Name: httpCookieName, Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	http.SetCookie(w, sessionCookie(r, id, int(SessionTTL/time.Second)))
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request, req request) {
	h.sessions.drop(req.cookie)
	http.SetCookie(w, sessionCookie(r, "", -1))
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

func (h *Handler) sandboxesPage(w http.ResponseWriter, r *http.Request, req request) {
	ctx := r.Context()
	var rows []sandboxd.Sandbox
	for sb, err := range req.api.AllSandboxes(ctx, sandboxd.ListOptions{Limit: 100}) {
		if err != nil {
			h.apiFailed(w, r, req, err)
			return
		}
		rows = append(rows, *sb)
		if len(rows) == maxListed {
			break
		}
	}
	h.render(w, http.StatusOK, "sandboxes", req.sess, "Sandboxes", struct {
		Sandboxes    []sandboxd.Sandbox
		DefaultImage string
		Truncated    bool
	}{rows, defaultImage, len(rows) == maxListed})
}

func (h *Handler) createSandbox(w http.ResponseWriter, r *http.Request, req request) {
	cr := sandboxd.CreateRequest{
		Image: strings.TrimSpace(r.PostFormValue("image")),
		Name:  strings.TrimSpace(r.PostFormValue("name")),
	}
	if cr.Image == "" {
		cr.Image = defaultImage
	}
	sb, err := req.api.CreateSandbox(r.Context(), cr)
	if err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	http.Redirect(w, r, "/ui/sandbox/"+url.PathEscape(sb.ID), http.StatusSeeOther)
}

func (h *Handler) destroySandbox(w http.ResponseWriter, r *http.Request, req request) {
	if err := req.api.DestroySandbox(r.Context(), r.PathValue("id")); err != nil && !errors.Is(err, sandboxd.ErrNotFound) {
		h.apiFailed(w, r, req, err)
		return
	}
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// lifecycle is a stop or start button: the API call, then the sandbox's
// page.
func (h *Handler) lifecycle(call func(*sandboxd.Client, context.Context, string) (*sandboxd.Sandbox, error)) func(http.ResponseWriter, *http.Request, request) {
	return func(w http.ResponseWriter, r *http.Request, req request) {
		sb, err := call(req.api, r.Context(), r.PathValue("id"))
		if err != nil {
			h.apiFailed(w, r, req, err)
			return
		}
		http.Redirect(w, r, "/ui/sandbox/"+url.PathEscape(sb.ID), http.StatusSeeOther)
	}
}

// dirOf is the ?path= of the files view: an absolute, clean path.
func dirOf(r *http.Request) string {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "/"
	}
	return path.Clean("/" + p)
}

func (h *Handler) sandboxPage(w http.ResponseWriter, r *http.Request, req request) {
	ctx := r.Context()
	sb, err := req.api.GetSandbox(ctx, r.PathValue("id"))
	if err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	data := struct {
		Sandbox  *sandboxd.Sandbox
		Running  bool
		Dir      string
		Parent   string
		Files    []sandboxd.FileEntry
		FilesErr string
		Ports    []sandboxd.Port
		PortsErr string
		// TID names the terminal the page opens (and resizes).
		TID string
	}{Sandbox: sb, Running: sb.State == sandboxd.StateRunning, Dir: dirOf(r), TID: newTID()}
	data.Parent = path.Dir(data.Dir)
	if data.Running {
		if data.Files, err = req.api.ListFiles(ctx, sb.ID, data.Dir); err != nil {
			_, data.FilesErr = apiStatus(err)
		}
	}
	if data.Ports, err = req.api.ListPorts(ctx, sb.ID); err != nil {
		_, data.PortsErr = apiStatus(err)
	}
	h.render(w, http.StatusOK, "sandbox", req.sess, sb.ID, data)
}

// upload writes the multipart body's file into the directory of its
// "dir" field (parts in the form's order: csrf, dir, file), streamed.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, req request) {
	id := r.PathValue("id")
	if req.parts == nil {
		h.fail(w, r, req.sess, http.StatusBadRequest, "An upload is a multipart form with the fields csrf, dir and file, in that order.")
		return
	}
	dir := "/"
	for {
		p, err := req.parts.NextPart()
		if err != nil {
			h.fail(w, r, req.sess, http.StatusBadRequest, "The form has no file: choose one to upload.")
			return
		}
		switch p.FormName() {
		case "dir":
			b, _ := io.ReadAll(io.LimitReader(p, 4096))
			dir = path.Clean("/" + string(b))
		case "file":
			name := p.FileName()
			if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
				h.fail(w, r, req.sess, http.StatusBadRequest, "Choose a file to upload.")
				return
			}
			if err := req.api.UploadFile(r.Context(), id, path.Join(dir, name), p); err != nil {
				h.apiFailed(w, r, req, err)
				return
			}
			http.Redirect(w, r, "/ui/sandbox/"+url.PathEscape(id)+"?path="+url.QueryEscape(dir), http.StatusSeeOther)
			return
		}
	}
}

// download streams a file of the sandbox as an attachment: never shown
// inline, so a file a sandbox wrote is never rendered as a page of the
// dashboard's origin.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, req request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		h.fail(w, r, req.sess, http.StatusBadRequest, "Name the file to download (?path=).")
		return
	}
	f, err := req.api.DownloadFile(r.Context(), r.PathValue("id"), p)
	if err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(path.Base(p)))
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	if f.Size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(f.Size, 10))
	}
	_, _ = io.Copy(w, f)
}

func (h *Handler) exposePort(w http.ResponseWriter, r *http.Request, req request) {
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PostFormValue("port"))
	if err != nil {
		h.fail(w, r, req.sess, http.StatusBadRequest, "The port must be a number between 1 and 65535.")
		return
	}
	_, err = req.api.ExposePort(r.Context(), id, sandboxd.ExposePortRequest{
		Port: port, Protocol: sandboxd.Protocol(r.PostFormValue("protocol")), Public: r.PostFormValue("public") == "on",
	})
	if err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	http.Redirect(w, r, "/ui/sandbox/"+url.PathEscape(id), http.StatusSeeOther)
}

// Terminal bounds: the size the browser asks for is clamped to these.
const (
	minTermCols, maxTermCols = 20, 400
	minTermRows, maxTermRows = 5, 200
)

// terminal is the terminal's WebSocket: a new terminal of the sessions
// part (package sessions), reached in process through the API route
// Options.Terminal names (the Daytona facade's PTY create-connect), so
// the API's token check and, in a cluster, its forwarding apply. Its messages: a JSON control message
// {"type":"control","status":"connected"} first, then the terminal's
// output as binary messages; every message the browser sends is input.
// The terminal is deleted when the WebSocket ends.
//
// A WebSocket carries no custom header, so the CSRF token comes as the
// csrf query parameter (the session's CSRF secret, never the API token),
// and the Origin must be this host's.
func (h *Handler) terminal(w http.ResponseWriter, r *http.Request, req request) {
	q := r.URL.Query()
	if h.termRoute == nil {
		h.fail(w, r, req.sess, http.StatusNotFound, "This daemon serves no terminals.")
		return
	}
	if r.Header.Get("Origin") == "" || !sameOrigin(r) || !req.sess.checkCSRF(q.Get("csrf")) {
		h.fail(w, r, req.sess, http.StatusForbidden, "Missing or invalid CSRF token, or a cross-origin request: reload the page.")
		return
	}
	sb, err := req.api.GetSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	cols := clamp(q.Get("cols"), 100, minTermCols, maxTermCols)
	rows := clamp(q.Get("rows"), 30, minTermRows, maxTermRows)
	tid := q.Get("tid") // the page's, so that its script can resize it
	if !tidPattern.MatchString(tid) {
		tid = newTID()
	}
	connect, header, remove := h.termRoute(sb.ID, tid, cols, rows, map[string]string{"TERM": "dumb"})
	target, err := url.Parse(connect)
	if err != nil {
		h.fail(w, r, req.sess, http.StatusInternalServerError, "The terminal's route is malformed.")
		return
	}
	// A terminal of that id (the page's, opened twice) is another page's:
	// refuse, rather than let this WebSocket's end delete it.
	if status := h.termStatus(r.Context(), req.sess.token, remove); status != http.StatusNotFound {
		msg := "This terminal is open in another page: reload this one."
		if status != http.StatusOK {
			msg = "The terminal could not be checked: reload the page."
		}
		h.fail(w, r, req.sess, http.StatusConflict, msg)
		return
	}

	// The terminal ends with the session: at its logout, its token's
	// revocation or its expiry, however long the WebSocket was open.
	ctx, cancel := req.sess.context(r.Context())
	defer cancel()
	fwd := r.Clone(ctx)
	fwd.URL = target
	fwd.RequestURI = target.RequestURI()
	fwd.Header = r.Header.Clone()
	fwd.Header.Del("Cookie")
	fwd.Header.Del("Origin") // checked above; the API's own check is for other sites' pages
	fwd.Header.Set("Authorization", "Bearer "+req.sess.token)
	for k, v := range header {
		fwd.Header[k] = v
	}
	h.api.ServeHTTP(w, fwd)

	// The WebSocket ended: end its terminal (its shell would run on).
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	del, err := http.NewRequestWithContext(dctx, http.MethodDelete, h.base+remove, nil)
	if err != nil {
		return
	}
	del.Header.Set("Authorization", "Bearer "+req.sess.token)
	if resp, err := h.hc.Do(del); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
	}
}

// termStatus is the status of GET path (a terminal's) with token: 200
// for a terminal that exists, 404 for none.
func (h *Handler) termStatus(ctx context.Context, token, path string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+path, nil)
	if err != nil {
		return http.StatusBadRequest
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := h.hc.Do(req)
	if err != nil {
		return http.StatusServiceUnavailable
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode
}

func clamp(s string, def, lo, hi int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return max(lo, min(hi, n))
}

func (h *Handler) templatesPage(w http.ResponseWriter, r *http.Request, req request) {
	ts, err := req.api.ListTemplates(r.Context())
	if err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	h.render(w, http.StatusOK, "templates", req.sess, "Templates", ts)
}

// templateLogs streams a build's log as plain text (nosniff: a log is
// never rendered as HTML).
func (h *Handler) templateLogs(w http.ResponseWriter, r *http.Request, req request) {
	// Check first, so that an error is a page and not half a log.
	if _, err := req.api.GetTemplate(r.Context(), r.PathValue("id")); err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	if err := req.api.TemplateLogs(r.Context(), r.PathValue("id"), w); err != nil {
		fmt.Fprintf(w, "\n[sandboxd: the log ended early: %v]\n", err)
	}
}

func (h *Handler) poolsPage(w http.ResponseWriter, r *http.Request, req request) {
	pools, err := req.api.ListPools(r.Context())
	if err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	h.render(w, http.StatusOK, "pools", req.sess, "Pools", pools)
}

func isUnauthenticated(err error) bool { return errors.Is(err, auth.ErrUnauthenticated) }

// node is one row of GET /v1/cluster/nodes.
type node struct {
	ID           string `json:"id"`
	APIURL       string `json:"api_url"`
	TLSAddr      string `json:"tls_addr"`
	Self         bool   `json:"self"`
	MilliCPU     int64  `json:"milli_cpu"`
	MemoryMB     int64  `json:"memory_mb"`
	FreeMilliCPU int64  `json:"free_milli_cpu"`
	FreeMemoryMB int64  `json:"free_memory_mb"`
}

// maxNodesBody bounds the nodes answer the page reads.
const maxNodesBody = 4 << 20

// nodesPage lists the cluster's live nodes (GET /v1/cluster/nodes, admins
// only); a daemon outside a cluster answers that route 404.
func (h *Handler) nodesPage(w http.ResponseWriter, r *http.Request, req request) {
	if !req.sess.principal.IsAdmin() {
		// What the cluster's route answers a user; a single daemon has
		// no such route, and would otherwise say only that it is alone.
		h.fail(w, r, req.sess, http.StatusForbidden, "The cluster's nodes are shown to admins only.")
		return
	}
	data := struct {
		Clustered bool
		Nodes     []node
	}{}
	hr, err := http.NewRequestWithContext(r.Context(), http.MethodGet, h.base+"/v1/cluster/nodes", nil)
	if err != nil {
		h.fail(w, r, req.sess, http.StatusInternalServerError, err.Error())
		return
	}
	hr.Header.Set("Authorization", "Bearer "+req.sess.token)
	resp, err := h.hc.Do(hr)
	if err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	defer resp.Body.Close()
	switch body := io.LimitReader(resp.Body, maxNodesBody); resp.StatusCode {
	case http.StatusOK:
		var out struct {
			Items []node `json:"items"`
		}
		if err := json.NewDecoder(body).Decode(&out); err != nil {
			h.fail(w, r, req.sess, http.StatusServiceUnavailable, "The cluster's node list could not be read: "+err.Error())
			return
		}
		data.Clustered, data.Nodes = true, out.Items
	case http.StatusNotFound:
		// a single node
	default:
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.NewDecoder(body).Decode(&e)
		h.apiFailed(w, r, req, &sandboxd.APIError{Status: resp.StatusCode, Message: e.Error.Message})
		return
	}
	h.render(w, http.StatusOK, "nodes", req.sess, "Nodes", data)
}

// tokensPage lists the API tokens and their quotas with what each owner
// holds (admins); a user sees the quota of the token it logged in with
// and what its owner holds.
func (h *Handler) tokensPage(w http.ResponseWriter, r *http.Request, req request) {
	data := struct {
		Tokens []sandboxd.Token
		Quota  auth.Quota
		// Held is what each owner holds (a user: its own only), by
		// owner; Truncated says the count stopped at maxListed sandboxes.
		Held      []holding
		Truncated bool
	}{Quota: req.sess.principal.Quota}
	var err error
	if req.sess.principal.IsAdmin() {
		if data.Tokens, err = req.api.ListTokens(r.Context()); err != nil {
			h.apiFailed(w, r, req, err)
			return
		}
	}
	if data.Held, data.Truncated, err = holdings(r.Context(), req.api, data.Tokens); err != nil {
		h.apiFailed(w, r, req, err)
		return
	}
	if !req.sess.principal.IsAdmin() && len(data.Held) == 0 {
		data.Held = []holding{{Owner: req.sess.principal.Owner}}
	}
	h.render(w, http.StatusOK, "tokens", req.sess, "Tokens and quotas", data)
}

// holding is what one owner's sandboxes hold against its quota, counted
// as admission counts it: a running, creating or paused sandbox holds its
// CPU, memory and disk and counts as one of the owner's sandboxes; a
// stopped one (or one in error) only its disk. Volumes and templates,
// which also hold disk, are not counted here.
type holding struct {
	Owner     string
	Sandboxes int64
	CPU       float64
	MemoryMB  int64
	DiskMB    int64
	// Quota is the owner's quota as its tokens carry it (admins only):
	// nil when its tokens carry none, Mixed when they differ.
	Quota *sandboxd.Quota
	Mixed bool
}

// holdings counts what the sandboxes the caller may list hold, by owner
// (the first maxListed sandboxes: truncated says there were more), and
// adds each owner's quota from tokens.
func holdings(ctx context.Context, api *sandboxd.Client, tokens []sandboxd.Token) (_ []holding, truncated bool, _ error) {
	by := map[string]*holding{}
	get := func(owner string) *holding {
		hd := by[owner]
		if hd == nil {
			hd = &holding{Owner: owner}
			by[owner] = hd
		}
		return hd
	}
	n := 0
	for sb, err := range api.AllSandboxes(ctx, sandboxd.ListOptions{Limit: 100}) {
		if err != nil {
			return nil, false, err
		}
		if n == maxListed {
			truncated = true
			break
		}
		n++
		hd := get(sb.Owner)
		switch sb.State {
		case sandboxd.StateRunning, sandboxd.StateCreating, sandboxd.StatePaused:
			hd.Sandboxes++
			hd.CPU += sb.CPU
			hd.MemoryMB += int64(sb.MemoryMB)
			hd.DiskMB += int64(sb.DiskMB)
		default:
			hd.DiskMB += int64(sb.DiskMB)
		}
	}
	for _, t := range tokens {
		if t.Role != sandboxd.RoleUser {
			continue
		}
		hd := get(t.Owner)
		switch {
		case hd.Quota == nil && !hd.Mixed:
			q := sandboxd.Quota{}
			if t.Quota != nil {
				q = *t.Quota
			}
			hd.Quota = &q
		case hd.Quota != nil && (t.Quota == nil && *hd.Quota != sandboxd.Quota{} || t.Quota != nil && *t.Quota != *hd.Quota):
			hd.Quota, hd.Mixed = nil, true
		}
	}
	out := make([]holding, 0, len(by))
	for _, hd := range by {
		out = append(out, *hd)
	}
	slices.SortFunc(out, func(a, b holding) int { return strings.Compare(a.Owner, b.Owner) })
	return out, truncated, nil
}

func age(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func humanMB(n int64) string {
	if n <= 0 {
		return "–"
	}
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d GiB", n/1024)
	}
	return fmt.Sprintf("%d MiB", n)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
