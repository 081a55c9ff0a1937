package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// waitJS polls expr (a JavaScript boolean) in the page until it is true,
// failing t after d.
func waitJS(t *testing.T, bctx context.Context, d time.Duration, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok := get(t, bctx, 30*time.Second, what, chromedp.Evaluate[bool](expr))
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still false after %v: %s", what, d, expr)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// terminalLine types command into the page's terminal and returns the
// submatches of the first line of its output that matches re.
func terminalLine(t *testing.T, bctx context.Context, command string, re *regexp.Regexp) []string {
	t.Helper()
	run(t, bctx, time.Minute, "type "+command,
		chromedp.Click(chromedp.ID("terminal")),
		chromedp.SendKeys(chromedp.ID("terminal"), command+"\r"))
	var screen string
	for deadline := time.Now().Add(time.Minute); ; {
		screen = get(t, bctx, 30*time.Second, "read the terminal", chromedp.TextContent(chromedp.ID("terminal")))
		if m := re.FindStringSubmatch(screen); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never printed a line matching %s; the terminal shows:\n%s", command, re, screen)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// uiLogin logs in to the dashboard at base as a plain HTTP client and
// returns the value of the session cookie it got (whatever its name).
func uiLogin(ctx context.Context, t *testing.T, base, token string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("log in at %s: %v", base, err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if strings.HasSuffix(c.Name, "sandboxd_ui") && c.Value != "" {
			return c.Value
		}
	}
	t.Fatalf("log in at %s: %s and no session cookie", base, resp.Status)
	return ""
}

// TestDashboardLive drives, in a real browser, what the dashboard shows
// live: a sandbox's usage (numbers that appear and change while a CPU loop
// runs and a file is written, on its page and on the list), its logs pane
// (a line printed in the sandbox appears, as text), the terminal's resize
// (stty size in the terminal reports the element's new size), the quota
// page with what the owner holds, and the session cookie against a
// sibling host: on a dashboard opened at localhost a cookie set for the
// parent domain (as a sandbox's preview page at <port>-<id>.localhost
// could) neither jams the session nor fixes the browser into another one,
// and a request the E2B facade forwards to a sandbox from the
// dashboard's host never carries the session cookie.
func TestDashboardLive(t *testing.T) {
	d := sharedDaemon(t)
	bctx := browser(t)
	ctx := testContext(t, 8*time.Minute)
	admin := newClient(d, true)
	base := d.URL()
	suffix := fmt.Sprintf("%06x", rand.IntN(1<<24))
	owner := "ui-live-" + suffix
	tokA := userToken(ctx, t, admin, owner)
	tokB := userToken(ctx, t, admin, "ui-live-b-"+suffix)
	clientA := sandboxd.New(base, tokA)
	sb := createTestSandbox(ctx, t, clientA, sandboxd.CreateRequest{Image: baseImage, Name: owner, CPU: 1, MemoryMB: 256})

	run(t, bctx, time.Minute, "log in",
		chromedp.Navigate(base+"/ui/login"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), tokA),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("create")),
		chromedp.Navigate(base+"/ui/sandbox/"+sb.ID),
		chromedp.WaitVisible(chromedp.CSS(`#terminal[data-state="connected"]`)))

	// Usage: a first sample appears; a file written moves the disk, a CPU
	// loop the CPU.
	usage := `document.getElementById("usage")`
	waitJS(t, bctx, time.Minute, "a first usage sample", `Number(`+usage+`.dataset.samples || 0) >= 1`)
	disk0 := get(t, bctx, time.Minute, "disk", chromedp.Evaluate[float64](`Number(`+usage+`.dataset.diskBytes)`))
	shown0 := get(t, bctx, time.Minute, "disk shown", chromedp.TextContent(chromedp.ID("usage-disk")))
	if res, err := clientA.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "dd if=/dev/urandom of=/root/ui-fill bs=1M count=8 2>/dev/null && sync"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write a file: %v %+v", err, res)
	}
	waitJS(t, bctx, time.Minute, "the disk usage grows by the file", fmt.Sprintf(`Number(%s.dataset.diskBytes) >= %f`, usage, disk0+6e6))
	if shown := get(t, bctx, time.Minute, "disk shown", chromedp.TextContent(chromedp.ID("usage-disk"))); shown == shown0 || !strings.Contains(shown, "MiB") {
		t.Fatalf("the disk shown went from %q to %q; want it to change, in MiB", shown0, shown)
	}
	loop := make(chan error, 1)
	go func() {
		_, err := clientA.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: `timeout 25 sh -c 'while :; do :; done'; true`})
		loop <- err
	}()
	waitJS(t, bctx, 90*time.Second, "the CPU shown rises with a busy loop", `Number(`+usage+`.dataset.cpuPercent) >= 20`)
	if cpu := get(t, bctx, time.Minute, "cpu shown", chromedp.TextContent(chromedp.ID("usage-cpu"))); !strings.HasSuffix(cpu, "%") {
		t.Fatalf("the CPU shown is %q, want a percentage", cpu)
	}
	if err := <-loop; err != nil {
		t.Fatalf("the busy loop: %v", err)
	}

	// Logs: a line printed in the sandbox appears in the pane, as text.
	marker := "ui-log-" + suffix
	hostile := `<img src=x id=pwnlog onerror=alert(1)>`
	if _, err := clientA.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "echo " + marker + "; echo '" + hostile + "' >&2"}); err != nil {
		t.Fatalf("print: %v", err)
	}
	waitJS(t, bctx, time.Minute, "the printed line in the logs pane",
		fmt.Sprintf(`document.getElementById("logs").textContent.includes(%q) && document.getElementById("logs").textContent.includes(%q)`, marker, hostile))
	if pwned := get(t, bctx, time.Minute, "img", chromedp.Evaluate[bool](`document.getElementById("pwnlog") !== null`)); pwned {
		t.Fatal("a log line became markup")
	}
	// The pane keeps the last 1000 lines.
	if _, err := clientA.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "seq 1 1100 | sed 's/^/n-/'"}); err != nil {
		t.Fatalf("print 1100 lines: %v", err)
	}
	waitJS(t, bctx, time.Minute, "the 1100th line in the logs pane", `document.getElementById("logs").lastChild.textContent.endsWith(" n-1100")`)
	if n := get(t, bctx, time.Minute, "lines kept", chromedp.Evaluate[int](`document.getElementById("logs").childElementCount`)); n != 1000 {
		t.Fatalf("the logs pane holds %d lines, want the last 1000", n)
	}

	// Resize: the terminal opened with its element's size; narrowing the
	// element resizes the PTY (stty size inside reports it).
	sizeRe := regexp.MustCompile(`^([0-9]+)x([0-9]+)$`)
	size0 := get(t, bctx, time.Minute, "size", chromedp.Evaluate[string](`document.getElementById("terminal").dataset.size`))
	m0 := sizeRe.FindStringSubmatch(size0)
	if m0 == nil {
		t.Fatalf("the terminal's data-size is %q", size0)
	}
	s1 := terminalLine(t, bctx, "echo S1 $(stty size)", regexp.MustCompile(`(?m)^S1 ([0-9]+) ([0-9]+)\s*$`))
	if s1[1] != m0[2] || s1[2] != m0[1] {
		t.Fatalf("stty size at open: %s rows %s cols; the page measured %s", s1[1], s1[2], size0)
	}
	get(t, bctx, time.Minute, "narrow the terminal",
		chromedp.Evaluate[string](`document.getElementById("terminal").style.width = "520px"`))
	waitJS(t, bctx, time.Minute, "the page sends the new size", fmt.Sprintf(`document.getElementById("terminal").dataset.size !== %q`, size0))
	size1 := get(t, bctx, time.Minute, "size", chromedp.Evaluate[string](`document.getElementById("terminal").dataset.size`))
	m1 := sizeRe.FindStringSubmatch(size1)
	s2 := terminalLine(t, bctx, "echo S2 $(stty size)", regexp.MustCompile(`(?m)^S2 ([0-9]+) ([0-9]+)\s*$`))
	if m1 == nil || s2[2] != m1[1] || s2[1] != m1[2] {
		t.Fatalf("after the resize stty size says %s rows %s cols; the page sent %s", s2[1], s2[2], size1)
	}
	if c1, _ := strconv.Atoi(s1[2]); func() bool { c2, _ := strconv.Atoi(s2[2]); return c2 >= c1 }() {
		t.Fatalf("the narrowed terminal has %s columns, not fewer than %s", s2[2], s1[2])
	}

	// The list shows the running sandbox's usage too; a usage request
	// for more sandboxes than a batch is refused.
	run(t, bctx, time.Minute, "open the list",
		chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.ID("sandboxes")))
	row := fmt.Sprintf(`document.querySelector('tr[data-id=%q]')`, sb.ID)
	waitJS(t, bctx, time.Minute, "usage on the list", `Number(`+row+`.dataset.samples || 0) >= 1`)
	if mem := get(t, bctx, time.Minute, "memory cell", chromedp.TextContent(chromedp.CSS(fmt.Sprintf(`tr[data-id=%q] td[data-usage="memory"]`, sb.ID)))); !strings.Contains(mem, "iB of 256.0 MiB") {
		t.Fatalf("the list's memory use is %q, want used of 256.0 MiB", mem)
	}
	var ids []string
	for i := range 21 {
		ids = append(ids, fmt.Sprintf("id=sb-%016x", i))
	}
	// As the page's script asks (with the session's X-CSRF-Token), and
	// without the header, as an <img> or a plain fetch would.
	withToken := fmt.Sprintf(`fetch(%q, {headers: {"X-CSRF-Token": document.querySelector('input[name="csrf"]').value}})
		.then(r => r.text().then(b => r.status + " " + b))`, "/ui/usage?"+strings.Join(ids, "&"))
	answer := get(t, bctx, time.Minute, "usage of 21", chromedp.Evaluate[string](withToken, chromedp.EvalAwaitPromise))
	if !strings.HasPrefix(answer, "400 ") {
		t.Fatalf("usage of 21 sandboxes at once: %.200q, want 400", answer)
	}
	for _, path := range []string{"/ui/usage?id=" + sb.ID, "/ui/sandbox/" + sb.ID + "/logs"} {
		answer = get(t, bctx, time.Minute, "without the header", chromedp.Evaluate[string](fetchJS("GET", path, ""), chromedp.EvalAwaitPromise))
		if !strings.HasPrefix(answer, "403 ") {
			t.Fatalf("GET %s without X-CSRF-Token: %.200q, want 403", path, answer)
		}
	}

	// The quota page shows what the owner holds.
	run(t, bctx, time.Minute, "quota",
		chromedp.Navigate(base+"/ui/tokens"), chromedp.WaitVisible(chromedp.ID("quota")))
	if n := get(t, bctx, time.Minute, "held", chromedp.TextContent(chromedp.ID("used-sandboxes"))); n != "1" {
		t.Fatalf("the quota page says the owner holds %q sandboxes, want 1", n)
	}
	if mem := get(t, bctx, time.Minute, "held memory", chromedp.TextContent(chromedp.ID("used-memory"))); mem != "256 MiB" {
		t.Fatalf("the quota page says the owner holds %q of memory, want 256 MiB", mem)
	}

	// The dashboard at localhost, whose sibling names are sandboxes'
	// preview hosts.
	port := strings.TrimPrefix(base, "http://127.0.0.1:")
	lbase := "http://localhost:" + port
	run(t, bctx, time.Minute, "log in at localhost",
		chromedp.Navigate(lbase+"/ui/login"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), tokA),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("create")))
	got, err := chromedp.Call(bctx, network.GetCookies, network.GetCookiesParams{URLs: []string{lbase + "/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got.Cookies {
		names = append(names, c.Name+"@"+c.Domain+c.Path)
	}
	if len(got.Cookies) != 1 || got.Cookies[0].Name != "__Host-sandboxd_ui" || !got.Cookies[0].Secure || got.Cookies[0].Path != "/" {
		t.Fatalf("cookies at localhost after login: %v; want one __Host-sandboxd_ui, Secure, Path /", names)
	}

	// A sibling host sets a session cookie for the parent domain: another
	// tenant's session (a fixation), beside the browser's own (a jam).
	planted := uiLogin(ctx, t, lbase, tokB)
	plant := func(name string) error {
		yes := true
		_, err := chromedp.Call(bctx, network.SetCookie, network.SetCookieParams{
			Name: name, Value: planted, Domain: ".localhost", Path: "/ui/", HTTPOnly: &yes, Secure: &yes,
		})
		return err
	}
	if err := plant("sandboxd_ui"); err != nil {
		t.Fatalf("plant a parent-domain cookie: %v", err)
	}
	if err := plant("__Host-sandboxd_ui"); err == nil {
		got, _ := chromedp.Call(bctx, network.GetCookies, network.GetCookiesParams{URLs: []string{lbase + "/ui/"}})
		for _, c := range got.Cookies {
			if c.Name == "__Host-sandboxd_ui" && c.Value == planted {
				t.Fatalf("the browser took a __Host- cookie for the parent domain: %+v", c)
			}
		}
	}
	run(t, bctx, time.Minute, "the dashboard beside the planted cookie",
		chromedp.Navigate(lbase+"/ui/"), chromedp.WaitReady(chromedp.CSS("main")))
	if html := get(t, bctx, time.Minute, "page", chromedp.OuterHTML(chromedp.CSS("main"))); !strings.Contains(html, `id="sandboxes"`) || !strings.Contains(html, sb.ID) {
		t.Fatalf("beside a parent-domain cookie the dashboard at localhost is not the browser's own session (jammed or swapped):\n%.400s", html)
	}

	// Nothing the E2B facade forwards to a sandbox from the dashboard's
	// host carries the session cookie (its Path is /): a CGI in an E2B
	// sandbox prints the Cookie header it got; an app's own cookie passes.
	body, _ := json.Marshal(map[string]any{"templateID": busyboxImage})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-KEY", tokA)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e2b struct {
		SandboxID string `json:"sandboxID"`
	}
	_ = json.Unmarshal(raw, &e2b)
	if e2b.SandboxID != "" {
		destroyAtEnd(t, clientA, e2b.SandboxID)
	}
	if resp.StatusCode != http.StatusCreated || e2b.SandboxID == "" {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, raw)
	}
	cgi := `mkdir -p /www/cgi-bin && printf '#!/bin/sh\necho Content-Type: text/plain\necho\necho "cookie=$HTTP_COOKIE"\n' > /www/cgi-bin/c && chmod +x /www/cgi-bin/c && httpd -p 127.0.0.1:8000 -h /www`
	if res, err := clientA.Exec(ctx, e2b.SandboxID, sandboxd.ExecRequest{Command: cgi}); err != nil || res.ExitCode != 0 {
		t.Fatalf("start the CGI: %v %+v", err, res)
	}
	echoed := ""
	for deadline := time.Now().Add(time.Minute); !strings.HasPrefix(echoed, "200 cookie="); {
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's CGI through the E2B facade: %.300q", echoed)
		}
		time.Sleep(250 * time.Millisecond)
		echoed = get(t, bctx, time.Minute, "the sandbox's CGI", chromedp.Evaluate[string](fmt.Sprintf(
			`document.cookie = "app=1; path=/"; fetch("/cgi-bin/c", {headers: {"E2b-Sandbox-Id": %q, "E2b-Sandbox-Port": "8000"}}).then(r => r.text().then(b => r.status + " " + b))`,
			e2b.SandboxID), chromedp.EvalAwaitPromise))
	}
	if !strings.Contains(echoed, "app=1") || strings.Contains(echoed, "sandboxd_ui") {
		t.Fatalf("the sandbox got the cookies %q; want the app's (app=1) and never the dashboard's session", echoed)
	}

	// Logged out, the planted cookie alone does not open the other
	// tenant's session: the browser is at the login.
	run(t, bctx, time.Minute, "log out",
		chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("token")))
	run(t, bctx, time.Minute, "the dashboard with only the planted cookie",
		chromedp.Navigate(lbase+"/ui/"), chromedp.WaitReady(chromedp.CSS("main")))
	if loc := get(t, bctx, time.Minute, "location", chromedp.Location()); !strings.HasSuffix(loc, "/ui/login") {
		html := get(t, bctx, time.Minute, "page", chromedp.OuterHTML(chromedp.CSS("header")))
		t.Fatalf("with only a parent-domain cookie the dashboard is at %s, in a session (%.300s); want the login", loc, html)
	}

	// An admin sees what each owner holds.
	run(t, bctx, time.Minute, "admin's quota page",
		chromedp.SetValue(chromedp.ID("token"), d.Token()),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("sandboxes")),
		chromedp.Navigate(lbase+"/ui/tokens"), chromedp.WaitVisible(chromedp.ID("held")))
	held := get(t, bctx, time.Minute, "held", chromedp.TextContent(chromedp.CSS(fmt.Sprintf(`tr[data-owner=%q] td:nth-child(2)`, owner))))
	if !strings.HasPrefix(held, "2 of unlimited") {
		t.Fatalf("the admin's row of %s says it holds %q sandboxes, want 2 of unlimited", owner, held)
	}
}
