package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// browser starts a headless chromium for t (closed at its end), or skips
// t when chromium is not installed (make setup installs it).
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("skipping: the dashboard's browser test needs Debian's chromium (make setup installs it); not found on PATH")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 760),
		chromedp.UserDataDir(t.TempDir()),
		// Nothing leaves the machine: localhost and *.localhost are
		// 127.0.0.1, every other host but 127.0.0.1 and 127.0.0.2 (raw
		// TCP exposures' default --tcp-host) fails to resolve, and no
		// proxy is looked up.
		chromedp.Flag("host-resolver-rules", "MAP localhost 127.0.0.1, MAP *.localhost 127.0.0.1, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE 127.0.0.2"),
		chromedp.Flag("no-proxy-server", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// run runs steps in the browser within d.
func run(t *testing.T, bctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs a in the browser within d and returns its value.
func get[T any](t *testing.T, bctx context.Context, d time.Duration, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, d)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// userToken makes a user token of owner and revokes it when t ends.
func userToken(ctx context.Context, t *testing.T, admin *sandboxd.Client, owner string) string {
	t.Helper()
	tok, err := admin.CreateToken(ctx, sandboxd.CreateTokenRequest{Name: owner, Role: sandboxd.RoleUser, Owner: owner})
	if err != nil {
		t.Fatalf("CreateToken(%s): %v", owner, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin.RevokeToken(ctx, tok.ID); err != nil {
			t.Errorf("cleanup: revoke token %s: %v", tok.ID, err)
		}
	})
	return tok.Secret
}

// daytonaGet is GET url with token, its body (200 expected).
func daytonaGet(ctx context.Context, t *testing.T, url, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	return string(body)
}

// terminalEndsWithLogout logs in with token as a plain HTTP client, opens
// sandbox id's terminal, logs out, and fails t unless the terminal's
// WebSocket ends.
func terminalEndsWithLogout(ctx context.Context, t *testing.T, base, token, id string) {
	t.Helper()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, form url.Values, cookie *http.Cookie) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		return resp
	}
	resp := post("/ui/login", url.Values{"token": {token}}, nil)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "__Host-sandboxd_ui" {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == nil {
		t.Fatalf("login: %s, cookie %v", resp.Status, cookie)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/sandbox/"+id, nil)
	req.AddCookie(cookie)
	page, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	m := regexp.MustCompile(`data-csrf="([0-9a-f]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the sandbox page (%s)", page.Status)
	}
	csrf := string(m[1])
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/ui/sandbox/" + id + "/terminal?csrf=" + csrf
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{
		"Origin": {base}, "Cookie": {cookie.String()},
	}})
	if err != nil {
		t.Fatalf("open the terminal: %v", err)
	}
	defer conn.CloseNow()
	if _, msg, err := conn.Read(ctx); err != nil || !strings.Contains(string(msg), "connected") {
		t.Fatalf("the terminal's first message: %q, %v", msg, err)
	}
	if resp := post("/ui/logout", url.Values{"csrf": {csrf}}, cookie); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %s", resp.Status)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, _, err := conn.Read(rctx); err != nil {
			if rctx.Err() != nil {
				t.Fatal("the terminal's WebSocket outlived the session's logout by 30 s")
			}
			return // ended
		}
	}
}

// fetchJS is a same-origin fetch from the page (the session cookie goes
// with it) answering "<status> <body>".
func fetchJS(method, url, body string) string {
	return fmt.Sprintf(`fetch(%q, {method: %q, headers: {"Content-Type": "application/x-www-form-urlencoded"}%s})
		.then(r => r.text().then(b => r.status + " " + b))`, url, method, map[bool]string{true: fmt.Sprintf(", body: %q", body), false: ""}[body != ""])
}

// TestDashboard drives the dashboard in a real browser: the login
// redirect, the login, the cookie's flags, create, the terminal (typed
// input, its output read back), upload, download, a forged and a missing
// CSRF token refused, another tenant's sandbox invisible, a hostile file
// name shown as text, destroy and logout.
func TestDashboard(t *testing.T) {
	d := sharedDaemon(t)
	bctx := browser(t)
	ctx := testContext(t, 5*time.Minute)
	admin := newClient(d, true)
	base := d.URL()
	suffix := fmt.Sprintf("%06x", rand.IntN(1<<24))
	tokA := userToken(ctx, t, admin, "ui-a-"+suffix)
	tokB := userToken(ctx, t, admin, "ui-b-"+suffix)
	clientA := sandboxd.New(base, tokA)
	clientB := sandboxd.New(base, tokB)

	// Another tenant's sandbox, which A's dashboard must not show.
	other := createTestSandbox(ctx, t, clientB, sandboxd.CreateRequest{Name: "ui-other-" + suffix})

	// No session: any page sends the browser to the login.
	run(t, bctx, time.Minute, "open without a session",
		chromedp.Navigate(base+"/ui/sandbox/"+other.ID),
		chromedp.WaitVisible(chromedp.ID("token")))
	loc := get(t, bctx, time.Minute, "location", chromedp.Location())
	if !strings.HasSuffix(loc, "/ui/login") {
		t.Fatalf("without a session the dashboard is at %s, want the login page", loc)
	}
	// / goes to the dashboard too.
	run(t, bctx, time.Minute, "open /",
		chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	loc = get(t, bctx, time.Minute, "location", chromedp.Location())
	if !strings.HasSuffix(loc, "/ui/login") {
		t.Fatalf("/ leads to %s, want the login page", loc)
	}

	// A wrong token is refused on the page.
	run(t, bctx, time.Minute, "log in with a wrong token",
		chromedp.SendKeys(chromedp.ID("token"), "sbx_00000000_"+strings.Repeat("0", 64)),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("login-error")))
	msg := get(t, bctx, time.Minute, "login error", chromedp.Text(chromedp.ID("login-error")))
	if !strings.Contains(msg, "not valid") {
		t.Fatalf("a wrong token says %q", msg)
	}

	// Log in as A.
	run(t, bctx, time.Minute, "log in",
		chromedp.SetValue(chromedp.ID("token"), tokA),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("create")))

	// The cookie: a __Host- cookie (which no other host, a sandbox's
	// preview on a sibling name included, can set or shadow): Secure,
	// which chromium keeps from plain http://127.0.0.1 (a secure
	// context), Path /, no Domain; HttpOnly, SameSite=Strict,
	// short-lived; and the token is nowhere in the page, the URL or the
	// browser's storage.
	got, err := chromedp.Call(bctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/ui/"}})
	if err != nil {
		t.Fatalf("read the cookies: %v", err)
	}
	cookies := got.Cookies
	stored := get(t, bctx, time.Minute, "storage", chromedp.Evaluate[string](
		`JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie + location.href`))
	html := get(t, bctx, time.Minute, "page", chromedp.OuterHTML(chromedp.CSS("html")))
	if len(cookies) != 1 {
		t.Fatalf("cookies after login: %d, want 1 (%+v)", len(cookies), cookies)
	}
	c := cookies[0]
	lifetime := time.Until(time.Unix(int64(c.Expires), 0))
	if c.Name != "__Host-sandboxd_ui" || !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || !c.Secure || c.Path != "/" ||
		c.Domain != "127.0.0.1" || c.Session || lifetime <= 0 || lifetime > time.Hour+time.Minute ||
		c.Value == tokA || strings.Contains(c.Value, "sbx_") {
		t.Fatalf("session cookie %+v (expires in %v): want __Host-sandboxd_ui, Secure, Path /, host-only, HttpOnly, SameSite=Strict, at most an hour, not the token", c, lifetime)
	}
	if strings.Contains(stored, tokA) || strings.Contains(html, tokA) {
		t.Fatal("the API token is visible to the page (storage, document.cookie, URL or HTML)")
	}

	// A's list does not show B's sandbox, and B's sandbox page is a 404.
	html = get(t, bctx, time.Minute, "list", chromedp.OuterHTML(chromedp.ID("sandboxes")))
	if strings.Contains(html, other.ID) {
		t.Fatalf("tenant A's dashboard lists tenant B's sandbox %s", other.ID)
	}
	answer := get(t, bctx, time.Minute, "open B's sandbox", chromedp.Evaluate[string](fetchJS("GET", "/ui/sandbox/"+other.ID, ""), chromedp.EvalAwaitPromise))
	if !strings.HasPrefix(answer, "404 ") {
		t.Fatalf("tenant A opening tenant B's sandbox page: %.200q, want 404", answer)
	}

	// Create through the form.
	name := "ui-" + suffix
	run(t, bctx, 3*time.Minute, "create",
		chromedp.SetValue(chromedp.ID("create-image"), baseImage),
		chromedp.SendKeys(chromedp.ID("create-name"), name),
		chromedp.Click(chromedp.ID("create")),
		chromedp.WaitVisible(chromedp.ID("terminal")))
	loc = get(t, bctx, time.Minute, "location", chromedp.Location())
	sb, err := clientA.GetSandbox(ctx, name)
	if err != nil {
		t.Fatalf("the sandbox the form created: %v", err)
	}
	destroyAtEnd(t, clientA, sb.ID)
	if !strings.HasSuffix(loc, "/ui/sandbox/"+sb.ID) {
		t.Fatalf("after create the browser is at %s, want the sandbox's page", loc)
	}

	// The terminal: type a command, read its output back.
	run(t, bctx, time.Minute, "terminal connects",
		chromedp.WaitVisible(chromedp.CSS(`#terminal[data-state="connected"]`)))
	run(t, bctx, time.Minute, "type into the terminal",
		chromedp.Click(chromedp.ID("terminal")),
		chromedp.SendKeys(chromedp.ID("terminal"), "echo hi-$RANDOM\r"))
	echoed := regexp.MustCompile(`(?m)^hi-[0-9]+$`)
	var screen string
	deadline := time.Now().Add(time.Minute)
	for !echoed.MatchString(screen) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed the echo's output; it shows:\n%s", screen)
		}
		screen = get(t, bctx, 30*time.Second, "read the terminal", chromedp.TextContent(chromedp.ID("terminal")))
		if !echoed.MatchString(screen) {
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The terminal has the size of its element (wider than the 100
	// columns the page falls back to at this window's width).
	run(t, bctx, time.Minute, "ask the terminal's size",
		chromedp.SendKeys(chromedp.ID("terminal"), "stty size\r"))
	sized := regexp.MustCompile(`(?m)^([0-9]+) ([0-9]+)$`)
	for deadline := time.Now().Add(time.Minute); ; {
		screen = get(t, bctx, 30*time.Second, "read the terminal", chromedp.TextContent(chromedp.ID("terminal")))
		if m := sized.FindStringSubmatch(screen); m != nil {
			rows, _ := strconv.Atoi(m[1])
			if cols, _ := strconv.Atoi(m[2]); rows < 5 || cols <= 100 {
				t.Fatalf("the terminal is %s rows × %s columns; want the element's size (over 100 columns)", m[1], m[2])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stty size never answered; the terminal shows:\n%s", screen)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Upload a file into /tmp through the form, then download it.
	local := filepath.Join(t.TempDir(), "hello-ui.txt")
	content := "uploaded through the dashboard " + suffix + "\n"
	if err := os.WriteFile(local, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, bctx, 2*time.Minute, "upload",
		chromedp.Navigate(base+"/ui/sandbox/"+sb.ID+"?path=/tmp"),
		chromedp.WaitVisible(chromedp.ID("upload-file")),
		chromedp.SetUploadFiles(chromedp.ID("upload-file"), []string{local}),
		chromedp.Click(chromedp.ID("upload")),
		chromedp.WaitVisible(chromedp.CSS(`a[data-file="hello-ui.txt"]`)))
	rc, err := clientA.DownloadFile(ctx, sb.ID, "/tmp/hello-ui.txt")
	if err != nil {
		t.Fatalf("the uploaded file: %v", err)
	}
	rc.Close()
	answer = get(t, bctx, time.Minute, "download", chromedp.Evaluate[string](
		`fetch(document.querySelector('a[data-file="hello-ui.txt"]').href).then(r => r.text().then(b => r.status + " " + r.headers.get("Content-Disposition") + " " + b))`,
		chromedp.EvalAwaitPromise))
	if want := "200 attachment; filename*=UTF-8''hello-ui.txt " + content; answer != want {
		t.Fatalf("download: %q, want %q", answer, want)
	}

	// A file name a sandbox chose is text, never markup.
	hostile := `<img src=x id=pwned onerror=alert(1)>.txt`
	if err := clientA.UploadFile(ctx, sb.ID, "/tmp/"+hostile, strings.NewReader("x")); err != nil {
		t.Fatalf("upload the hostile name: %v", err)
	}
	run(t, bctx, time.Minute, "list the hostile name",
		chromedp.Navigate(base+"/ui/sandbox/"+sb.ID+"?path=/tmp"),
		chromedp.WaitVisible(chromedp.ID("files")))
	screen = get(t, bctx, time.Minute, "files", chromedp.TextContent(chromedp.ID("files")))
	pwned := get(t, bctx, time.Minute, "img", chromedp.Evaluate[bool](`document.getElementById("pwned") !== null`))
	if pwned || !strings.Contains(screen, hostile) {
		t.Fatalf("a hostile file name became markup (img element: %v) or is missing from %q", pwned, screen)
	}

	// A forged or missing CSRF token is refused and changes nothing; so is
	// a cross-origin form post.
	for _, body := range []string{"csrf=" + strings.Repeat("0", 64), "", "csrf="} {
		answer = get(t, bctx, time.Minute, "destroy with a bad CSRF token",
			chromedp.Evaluate[string](fetchJS("POST", "/ui/sandbox/"+sb.ID+"/destroy", body), chromedp.EvalAwaitPromise))
		if !strings.HasPrefix(answer, "403 ") {
			t.Fatalf("destroy with body %q: %.200q, want 403", body, answer)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/ui/sandbox/"+sb.ID+"/destroy", strings.NewReader("csrf=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin destroy: %s, want 403", resp.Status)
	}
	if got, err := clientA.GetSandbox(ctx, sb.ID); err != nil || got.State != sandboxd.StateRunning {
		t.Fatalf("after refused destroys the sandbox is %v, %v; want it running", got, err)
	}

	// A terminal ends with its page: once the browser left every page of
	// the sandbox, the sandbox has no dashboard terminal left.
	run(t, bctx, time.Minute, "leave the sandbox's pages",
		chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("sandboxes")))
	var ptys string
	for deadline := time.Now().Add(time.Minute); ; {
		ptys = daytonaGet(ctx, t, base+"/daytona/api/toolbox/"+sb.ID+"/process/pty", tokA)
		if !strings.Contains(ptys, `"ui-`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard's terminals outlive their pages: %s", ptys)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Nor can A download from B's sandbox.
	answer = get(t, bctx, time.Minute, "download from B's sandbox", chromedp.Evaluate[string](
		fetchJS("GET", "/ui/sandbox/"+other.ID+"/download?path=/etc/hostname", ""), chromedp.EvalAwaitPromise))
	if !strings.HasPrefix(answer, "404 ") {
		t.Fatalf("tenant A downloading from tenant B's sandbox: %.200q, want 404", answer)
	}

	// The page's security headers.
	resp, err = http.Get(base + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}

	if shot := os.Getenv("SANDBOXD_UI_SCREENSHOT"); shot != "" {
		run(t, bctx, time.Minute, "open the list",
			chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("sandboxes")))
		waitJS(t, bctx, time.Minute, "the list's usage",
			`Array.from(document.querySelectorAll('tr[data-state="running"]')).every(r => r.dataset.samples)`)
		png := get(t, bctx, time.Minute, "screenshot", chromedp.CaptureScreenshot())
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The other pages: templates, the user's quota; pools and nodes are
	// an admin's (403 for a user).
	run(t, bctx, time.Minute, "templates and quota",
		chromedp.Navigate(base+"/ui/templates"), chromedp.WaitVisible(chromedp.ID("templates")),
		chromedp.Navigate(base+"/ui/tokens"), chromedp.WaitVisible(chromedp.ID("quota")))
	for _, page := range []string{"/ui/pools", "/ui/nodes"} {
		answer = get(t, bctx, time.Minute, "open "+page+" as a user",
			chromedp.Evaluate[string](fetchJS("GET", page, ""), chromedp.EvalAwaitPromise))
		if !strings.HasPrefix(answer, "403 ") {
			t.Fatalf("a user opening %s: %.200q, want 403", page, answer)
		}
	}

	// Stop and start through the page.
	run(t, bctx, 2*time.Minute, "stop",
		chromedp.Navigate(base+"/ui/sandbox/"+sb.ID),
		chromedp.WaitVisible(chromedp.ID("stop")),
		chromedp.Click(chromedp.ID("stop")),
		chromedp.WaitVisible(chromedp.ID("start")))
	if got, err := clientA.GetSandbox(ctx, sb.ID); err != nil || got.State != sandboxd.StateStopped {
		t.Fatalf("after Stop the sandbox is %v, %v; want stopped", got, err)
	}
	run(t, bctx, 2*time.Minute, "start",
		chromedp.Click(chromedp.ID("start")),
		chromedp.WaitVisible(chromedp.CSS(`#terminal[data-state="connected"]`)))
	if got, err := clientA.GetSandbox(ctx, sb.ID); err != nil || got.State != sandboxd.StateRunning {
		t.Fatalf("after Start the sandbox is %v, %v; want running", got, err)
	}

	// A terminal ends with its session: log in a second time (a plain
	// client), open the terminal, log out, and the WebSocket closes.
	terminalEndsWithLogout(ctx, t, base, tokA, sb.ID)

	// Destroy through the page.
	run(t, bctx, 2*time.Minute, "destroy",
		chromedp.Navigate(base+"/ui/sandbox/"+sb.ID),
		chromedp.WaitVisible(chromedp.ID("destroy")),
		chromedp.Click(chromedp.ID("destroy")),
		chromedp.WaitVisible(chromedp.ID("sandboxes")))
	html = get(t, bctx, time.Minute, "list", chromedp.OuterHTML(chromedp.ID("sandboxes")))
	if _, err := clientA.GetSandbox(ctx, sb.ID); !errors.Is(err, sandboxd.ErrNotFound) {
		t.Fatalf("after the destroy button, GetSandbox: %v, want not found", err)
	}
	if strings.Contains(html, sb.ID) {
		t.Fatalf("the list still shows the destroyed %s", sb.ID)
	}

	// Log out: the cookie no longer opens anything.
	run(t, bctx, time.Minute, "log out",
		chromedp.Click(chromedp.ID("logout")),
		chromedp.WaitVisible(chromedp.ID("token")))
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, err = http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login" {
		t.Fatalf("the logged-out cookie gets %s to %q, want 303 to /ui/login", resp.Status, resp.Header.Get("Location"))
	}

	// An admin sees every tenant's sandboxes with their owners, the pools
	// and the nodes (a single daemon says it is alone).
	run(t, bctx, time.Minute, "log in as admin",
		chromedp.SetValue(chromedp.ID("token"), d.Token()),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("sandboxes")))
	html = get(t, bctx, time.Minute, "admin's list", chromedp.OuterHTML(chromedp.ID("sandboxes")))
	if !strings.Contains(html, other.ID) || !strings.Contains(html, "ui-b-"+suffix) {
		t.Fatalf("the admin's list lacks tenant B's sandbox %s or its owner", other.ID)
	}
	run(t, bctx, time.Minute, "admin pages",
		chromedp.Navigate(base+"/ui/pools"), chromedp.WaitVisible(chromedp.ID("pools")),
		chromedp.Navigate(base+"/ui/nodes"), chromedp.WaitVisible(chromedp.ID("single-node")),
		chromedp.Navigate(base+"/ui/tokens"), chromedp.WaitVisible(chromedp.ID("tokens")))
}
