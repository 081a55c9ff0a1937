package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// cookieRecorder is a tenant's HTTP server, served raw on a TCP exposure:
// it writes each request's Cookie header to /tmp/seen, one line each.
const cookieRecorder = `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("/tmp/seen", "a") as f:
            f.write("GET %s Cookie=%s\n" % (self.path, self.headers.get("Cookie", "")))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"recorded\n")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 9000), H).serve_forever()
`

// TestDashboard_TCPExposureGetsNoCookie: a browser logged in to the
// dashboard at http://127.0.0.1:<api> and http://localhost:<api> is led
// to a tenant's raw TCP exposure, whose bytes go to the sandbox untouched
// (no credential is stripped on the L4 path). Browsers do not scope
// cookies by port, so had the exposure listened on the dashboard's
// address (--tcp-host 127.0.0.1, the old default) the sandbox would have
// read the session cookie: the exposures now listen on 127.0.0.2, which
// no name of the dashboard reaches, and the dashboard is not served on
// that host. The sandbox's server sees the browser's requests (the
// exposure answers) and no dashboard cookie in any of them.
func TestDashboard_TCPExposureGetsNoCookie(t *testing.T) {
	d := sharedDaemon(t)
	bctx := browser(t)
	ctx := testContext(t, 5*time.Minute)
	admin := newClient(d, true)
	base := d.URL()
	suffix := fmt.Sprintf("%06x", rand.IntN(1<<24))
	tok := userToken(ctx, t, admin, "ui-tcp-"+suffix)
	c := sandboxd.New(base, tok)
	sb := createTestSandbox(ctx, t, c, sandboxd.CreateRequest{Image: baseImage, Name: "ui-tcp-" + suffix})
	if err := c.UploadFile(ctx, sb.ID, "/tmp/rec.py", strings.NewReader(cookieRecorder)); err != nil {
		t.Fatalf("upload the recorder: %v", err)
	}
	if res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "nohup python3 /tmp/rec.py >/tmp/rec.log 2>&1 </dev/null &"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("start the recorder: %+v, %v", res, err)
	}
	p, err := c.ExposePort(ctx, sb.ID, sandboxd.ExposePortRequest{Port: 9000, Protocol: sandboxd.ProtocolTCP, Public: true})
	if err != nil {
		t.Fatalf("expose tcp 9000: %v", err)
	}
	u, err := url.Parse(p.URL)
	if err != nil || u.Scheme != "tcp" {
		t.Fatalf("tcp exposure's URL %q: %v", p.URL, err)
	}
	tcpHost := u.Hostname()
	if tcpHost == "127.0.0.1" || tcpHost == "localhost" || tcpHost == "::1" {
		t.Errorf("the tcp exposure listens on %s, the dashboard's own loopback address", tcpHost)
	}
	api, _ := url.Parse(base)
	hostPort := strconv.Itoa(p.HostPort)
	exposure := "http://" + net.JoinHostPort(tcpHost, hostPort) + "/"

	// The recorder answers through the exposure (a client without cookies).
	for deadline := time.Now().Add(time.Minute); ; {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, exposure+"probe", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorder never answered on %s: %v", exposure, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Log in on both loopback names of the dashboard.
	for _, host := range []string{"127.0.0.1", "localhost"} {
		dash := "http://" + net.JoinHostPort(host, api.Port())
		run(t, bctx, time.Minute, "log in at "+dash,
			chromedp.Navigate(dash+"/ui/login"),
			chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SetValue(chromedp.ID("token"), tok),
			chromedp.Click(chromedp.ID("login")),
			chromedp.WaitVisible(chromedp.ID("create")))
	}
	// An attacker's links: the host port on every loopback name the
	// dashboard has, and the exposure's own URL. Those with nothing
	// listening fail to load; that is the point.
	for _, target := range []string{
		"http://" + net.JoinHostPort("127.0.0.1", hostPort) + "/via-127.0.0.1",
		"http://" + net.JoinHostPort("localhost", hostPort) + "/via-localhost",
		exposure + "via-the-url",
	} {
		nctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		_ = chromedp.Do(nctx, chromedp.Navigate(target))
		cancel()
	}
	// The dashboard does not serve the exposures' host, so no cookie can
	// be set there either.
	resp, err := http.Get("http://" + net.JoinHostPort(tcpHost, api.Port()) + "/ui/login")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("the dashboard at the tcp host %s: %s, want 421", tcpHost, resp.Status)
		}
	}

	res, err := c.Exec(ctx, sb.ID, sandboxd.ExecRequest{Command: "cat /tmp/seen"})
	if err != nil {
		t.Fatalf("read what the recorder saw: %v", err)
	}
	seen := res.Stdout
	t.Logf("the sandbox's server received:\n%s", seen)
	sc := bufio.NewScanner(strings.NewReader(seen))
	browsed := false
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "sandboxd_ui") {
			t.Errorf("the dashboard's session cookie reached the sandbox: %s", line)
		}
		if strings.HasPrefix(line, "GET /via-") {
			browsed = true
		}
	}
	if !browsed {
		t.Fatalf("the browser's requests never reached the exposure:\n%s", seen)
	}
}
