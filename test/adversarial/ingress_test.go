package adversarial_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/testenv/daemontest"
	"github.com/sandboxd/sandboxd/internal/testenv/dnstest"
	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// The preview ingress, as an attacker tries it. No stranger runs code
// in a tenant's sandbox, a native port is private unless made public, and
// no credential of the daemon reaches a sandbox's server.

// e2bSandbox is what an E2B create answers.
type e2bSandbox struct {
	SandboxID          string  `json:"sandboxID"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

// createE2B creates a sandbox through the E2B API with the API token
// secret (sent as X-API-Key in its e2b_ form, as the SDKs do) and body,
// and kills it at the end of t.
func createE2B(t *testing.T, d *daemontest.Daemon, secret, body string) e2bSandbox {
	t.Helper()
	key := auth.E2BKey(secret)
	code, answer := call(t, d, "POST", "", "/sandboxes", body, "X-API-Key", key, "Content-Type", "application/json")
	if code != http.StatusCreated {
		t.Fatalf("E2B create %s: %d %s", body, code, answer)
	}
	var sb e2bSandbox
	if err := json.Unmarshal([]byte(answer), &sb); err != nil || sb.SandboxID == "" {
		t.Fatalf("E2B create: %v: %s", err, answer)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", d.URL()+"/sandboxes/"+sb.SandboxID, nil)
		req.Header.Set("X-API-Key", key)
		if resp, err := (&http.Client{Timeout: time.Minute}).Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return sb
}

// Anyone who knows a secure E2B sandbox's id used to run code in
// its interpreter, by header or by host, with no credential. Now 49999
// wants the sandbox's envd access token to run code (another sandbox's,
// or the traffic token, will not do); the SDK's token-less context calls
// still work; with the token, code runs.
func TestIngress_SecureInterpreterWantsTheAccessToken(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "ingress-interp")
	_, alice := tenantSecret(t, d, "alice")
	_, mallory := tenantSecret(t, d, "mallory")
	sb := createE2B(t, d, alice, `{"templateID":"code-interpreter-v1","secure":true}`)
	theirs := createE2B(t, d, mallory, `{"templateID":"base","secure":true}`)
	if sb.EnvdAccessToken == "" {
		t.Fatalf("a secure create answered no envd access token: %+v", sb)
	}
	code := `{"code":"print(6*7)"}`
	byHeader := func(extra ...string) (int, string) {
		return call(t, d, "POST", "", "/execute", code,
			append([]string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "Content-Type", "application/json"}, extra...)...)
	}
	byHost := func(extra ...string) (int, string) {
		return call(t, d, "POST", "49999-"+sb.SandboxID+".localhost", "/execute", code,
			append([]string{"Content-Type", "application/json"}, extra...)...)
	}
	for name, attempt := range map[string]func(...string) (int, string){"by header": byHeader, "by host": byHost} {
		for who, hdr := range map[string][]string{
			"anonymous":                  nil,
			"another sandbox's token":    {"X-Access-Token", theirs.EnvdAccessToken},
			"a wrong token":              {"X-Access-Token", strings.Repeat("0", len(sb.EnvdAccessToken))},
			"the token in Authorization": {"Authorization", "Bearer " + sb.EnvdAccessToken},
			"another tenant's API token": {"X-API-Key", auth.E2BKey(mallory), "Authorization", "Bearer " + mallory},
		} {
			status, body := attempt(hdr...)
			if status != http.StatusUnauthorized || strings.Contains(body, "42") {
				t.Errorf("%s, %s: POST /execute answered %d %.300s; want 401 and no execution", name, who, status, body)
			}
		}
	}
	// The SDK's context calls carry no token (code-interpreter 2.8.0):
	// they run no code and stay open; a wrong token is still refused.
	if status, body := call(t, d, "GET", "", "/contexts", "", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999"); status != http.StatusOK {
		t.Errorf("GET /contexts without a token: %d %s, want 200", status, body)
	}
	if status, _ := call(t, d, "GET", "", "/contexts", "", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "X-Access-Token", theirs.EnvdAccessToken); status != http.StatusUnauthorized {
		t.Errorf("GET /contexts with another sandbox's token: %d, want 401", status)
	}
	for name, attempt := range map[string]func(...string) (int, string){"by header": byHeader, "by host": byHost} {
		status, body := attempt("X-Access-Token", sb.EnvdAccessToken)
		if status != http.StatusOK || !strings.Contains(body, `"42\n"`) {
			t.Errorf("%s with the access token: %d %.300s; want 200 and 42 printed", name, status, body)
		}
	}
}

// A native exposure without public: true answers neither a
// request with no token nor one with another tenant's token, in any of
// the places a token may come in; the owner's token opens it.
func TestIngress_NativePortsArePrivateByDefault(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "ingress-private")
	alice, aliceToken := tenantSecret(t, d, "alice")
	_, malloryToken := tenantSecret(t, d, "mallory")
	sb := sandbox(t, alice, sandboxd.CreateRequest{})
	sh(t, alice, sb.ID, "mkdir -p /www && echo private > /www/index.html && httpd -p 8080 -h /www")
	exp, err := alice.ExposePort(t.Context(), sb.ID, sandboxd.ExposePortRequest{Port: 8080, Protocol: sandboxd.ProtocolHTTP})
	if err != nil {
		t.Fatal(err)
	}
	if exp.Public {
		t.Fatalf("an exposure without public: true answered public: %+v", exp)
	}
	host := "8080-" + sb.ID + ".localhost"
	waitFor(t, "the owner reaches the port", func() error {
		if code, body := call(t, d, "GET", host, "/", "", "Authorization", "Bearer "+aliceToken); code != http.StatusOK || body != "private\n" {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	for who, hdr := range map[string][]string{
		"no token":                          nil,
		"mallory's bearer":                  {"Authorization", "Bearer " + malloryToken},
		"mallory's X-Sandboxd-Token":        {"X-Sandboxd-Token", malloryToken},
		"mallory's cookie":                  {"Cookie", "sandboxd_token=" + malloryToken},
		"mallory's E2B key":                 {"X-API-Key", auth.E2BKey(malloryToken)},
		"a token-shaped string nobody owns": {"Authorization", "Bearer sbx_00000000_" + strings.Repeat("0", 64)},
	} {
		if code, body := call(t, d, "GET", host, "/", "", hdr...); code != http.StatusUnauthorized || body == "private\n" {
			t.Errorf("%s: %d %s, want 401", who, code, body)
		}
	}
}

// echoHeaders is a sandbox's HTTP server on port 8080 that answers every
// request with the headers it received, as JSON.
const echoHeaders = `
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({k: self.headers.get_all(k) for k in self.headers.keys()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", 8080), H).serve_forever()
`

// startEcho runs echoHeaders in sandbox id through c.
func startEcho(t *testing.T, c *sandboxd.Client, id string) {
	t.Helper()
	sh(t, c, id, "cat >/tmp/echo.py <<'EOF'\n"+echoHeaders+"EOF\nnohup python3 /tmp/echo.py >/dev/null 2>&1 &")
}

// A sandbox's server used to see the caller's credentials it was
// sent along with (the E2B key, the envd and traffic tokens, a Basic
// Authorization holding an API token, an API token in a cookie, the
// cluster's node MAC). Through the native preview host and through E2B's
// routes alike it now sees none of them, and the app's own Authorization
// still reaches it.
func TestIngress_CredentialsNeverReachTheSandbox(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, "ingress-creds")
	alice, aliceToken := tenantSecret(t, d, "alice")
	native := sandbox(t, alice, sandboxd.CreateRequest{Image: baseImage})
	startEcho(t, alice, native.ID)
	if _, err := alice.ExposePort(t.Context(), native.ID, sandboxd.ExposePortRequest{Port: 8080, Protocol: sandboxd.ProtocolHTTP, Public: true}); err != nil {
		t.Fatal(err)
	}
	e2b := createE2B(t, d, aliceToken, `{"templateID":"base","secure":true}`)
	startEcho(t, alice, e2b.SandboxID)

	secrets := map[string]string{
		"X-API-Key":                auth.E2BKey(aliceToken),
		"X-Sandboxd-Token":         aliceToken,
		"X-Access-Token":           e2b.EnvdAccessToken,
		"E2B-Traffic-Access-Token": "traffic-" + e2b.EnvdAccessToken[:8],
		"X-Daytona-Preview-Token":  "preview-token",
		"X-Sandboxd-Node":          "n2",
		"X-Sandboxd-Node-Auth":     "t=1,mac=00",
		"Cookie":                   "theme=dark; sandboxd_token=" + aliceToken + "; s=" + auth.E2BKey(aliceToken),
	}
	basicWithToken := "Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+aliceToken))
	routes := map[string][]string{ // Host ("" for the daemon's), then header pairs
		"native preview host": {"8080-" + native.ID + ".localhost"},
		"E2B port host":       {"8080-" + e2b.SandboxID + ".localhost"},
		"E2B headers":         {"", "E2b-Sandbox-Id", e2b.SandboxID, "E2b-Sandbox-Port", "8080"},
	}
	for route, spec := range routes {
		host, routing := spec[0], spec[1:]
		waitFor(t, route+" answers", func() error {
			if code, body := call(t, d, "GET", host, "/", "", routing...); code != http.StatusOK {
				return fmt.Errorf("%d %.200s", code, body)
			}
			return nil
		})
		cases := []struct{ sent, want string }{
			{"Bearer " + aliceToken, ""},
			{"Bearer " + auth.E2BKey(aliceToken), ""},
			{basicWithToken, ""},
			{"Basic dXNlcjpwYXNz", "Basic dXNlcjpwYXNz"},
			{"Bearer the-apps-own-jwt", "Bearer the-apps-own-jwt"},
		}
		if route != "native preview host" {
			// The E2B routes know the sandbox's own tokens, in any header.
			cases = append(cases, struct{ sent, want string }{"Bearer " + e2b.EnvdAccessToken, ""})
		}
		for _, authz := range cases {
			hdr := append([]string(nil), routing...)
			for k, v := range secrets {
				hdr = append(hdr, k, v)
			}
			hdr = append(hdr, "Authorization", authz.sent, "X-App", "kept")
			code, body := call(t, d, "GET", host, "/", "", hdr...)
			var seen map[string][]string
			if err := json.Unmarshal([]byte(body), &seen); code != http.StatusOK || err != nil {
				t.Errorf("%s, Authorization %.20q: %d %.300s", route, authz.sent, code, body)
				continue
			}
			got := http.Header{}
			for k, vs := range seen {
				for _, v := range vs {
					got.Add(k, v)
				}
			}
			all := strings.ToLower(body)
			for _, leak := range []string{aliceToken, auth.E2BKey(aliceToken), e2b.EnvdAccessToken, "traffic-", "preview-token", "mac=00", "x-sandboxd"} {
				if strings.Contains(all, strings.ToLower(leak)) {
					t.Errorf("%s, Authorization %.20q: the sandbox saw %.20q…: %s", route, authz.sent, leak, body)
				}
			}
			if strings.Contains(body, base64.StdEncoding.EncodeToString([]byte("x:"+aliceToken))) {
				t.Errorf("%s: the sandbox saw a Basic Authorization holding the API token", route)
			}
			if got.Get("Authorization") != authz.want || got.Get("X-App") != "kept" || got.Get("Cookie") != "theme=dark" {
				t.Errorf("%s, Authorization %.20q: the sandbox saw Authorization %q, X-App %q, Cookie %q; want %q, kept, theme=dark",
					route, authz.sent, got.Get("Authorization"), got.Get("X-App"), got.Get("Cookie"), authz.want)
			}
		}
	}
}

// webApp serves text on port 8080 of a new sandbox of c, exposed public,
// and returns the sandbox.
func webApp(t *testing.T, c *sandboxd.Client, text string) *sandboxd.Sandbox {
	t.Helper()
	sb := sandbox(t, c, sandboxd.CreateRequest{})
	sh(t, c, sb.ID, "mkdir -p /www && echo "+text+" > /www/index.html && httpd -p 8080 -h /www")
	if _, err := c.ExposePort(t.Context(), sb.ID, sandboxd.ExposePortRequest{Port: 8080, Protocol: sandboxd.ProtocolHTTP, Public: true}); err != nil {
		t.Fatal(err)
	}
	return sb
}

// Any tenant could bind any hostname, its own or another's, and
// it routed at once. Now a tenant's claim routes nothing until the
// hostname's TXT record (on a real DNS server here, the daemon's
// --dns-resolver) holds that claim's value: mallory's claims of an
// arbitrary name and of alice's name never route, block alice for no
// time, and cannot be verified once alice has proven control; alice's
// routes after a verify call, or by itself once the record appears.
func TestIngress_DomainsNeedProofOfControl(t *testing.T) {
	t.Parallel()
	dns := dnstest.Start(t)
	d := startDaemon(t, "ingress-domains", "--dns-resolver", dns.Addr(), "--domain-check-every", "500ms")
	alice := tenant(t, d, "alice")
	mallory := tenant(t, d, "mallory")
	hers := webApp(t, alice, "alice")
	his := webApp(t, mallory, "mallory")
	routesTo := func(host string) string {
		code, body := call(t, d, "GET", host, "/", "")
		if code != http.StatusOK {
			return fmt.Sprint(code)
		}
		return strings.TrimSpace(body)
	}

	// Mallory claims a name nobody gave him, and alice's, first.
	for _, host := range []string{"bank.example.test", "alice.example.test"} {
		dm, err := mallory.AddDomain(t.Context(), his.ID, host, 8080)
		if err != nil || dm.Verified || dm.Verification.Name != "_sandboxd-challenge."+host || dm.Verification.Value == "" {
			t.Errorf("mallory's claim of %s = %+v, %v; want pending with a TXT record to set", host, dm, err)
		}
		if got := routesTo(host); got != "404" {
			t.Errorf("%s right after mallory's claim routes to %s, want 404", host, got)
		}
		if v, err := mallory.VerifyDomain(t.Context(), his.ID, host); err != nil || v.Verified {
			t.Errorf("mallory's verify of %s = %+v, %v; want still pending", host, v, err)
		}
	}
	// Alice's claim is not blocked by his, and needs her own record.
	da, err := alice.AddDomain(t.Context(), hers.ID, "alice.example.test", 8080)
	if err != nil || da.Verified {
		t.Fatalf("alice's claim = %+v, %v; want pending", da, err)
	}
	dns.SetTXT(da.Verification.Name, da.Verification.Value)
	if v, err := mallory.VerifyDomain(t.Context(), his.ID, "alice.example.test"); err != nil || v.Verified {
		t.Errorf("mallory's verify with alice's record in place = %+v, %v; want still pending", v, err)
	}
	if v, err := alice.VerifyDomain(t.Context(), hers.ID, "alice.example.test"); err != nil || !v.Verified {
		t.Fatalf("alice's verify = %+v, %v; want verified", v, err)
	}
	if got := routesTo("alice.example.test"); got != "alice" {
		t.Errorf("alice.example.test routes to %s, want alice's app", got)
	}
	// Now the name is hers: mallory can neither verify his claim (even
	// with the record changed to his value) nor claim it again.
	dm, _ := mallory.ListDomains(t.Context(), his.ID)
	for _, x := range dm {
		if x.Hostname == "alice.example.test" {
			dns.SetTXT(x.Verification.Name, x.Verification.Value)
		}
	}
	if _, err := mallory.VerifyDomain(t.Context(), his.ID, "alice.example.test"); !errors.Is(err, sandboxd.ErrHostnameConflict) {
		t.Errorf("mallory's verify after alice's = %v, want hostname_conflict", err)
	}
	if got := routesTo("alice.example.test"); got != "alice" {
		t.Errorf("after mallory's attempts alice.example.test routes to %s, want alice's app", got)
	}

	// The daemon looks again by itself: alice's second name routes once
	// its record appears, with no verify call; mallory's arbitrary name,
	// looked up again and again, never does.
	dl, err := alice.AddDomain(t.Context(), hers.ID, "later.example.test", 8080)
	if err != nil {
		t.Fatal(err)
	}
	dns.SetTXT(dl.Verification.Name, dl.Verification.Value)
	waitFor(t, "later.example.test routes once its record is there", func() error {
		if got := routesTo("later.example.test"); got != "alice" {
			return fmt.Errorf("routes to %s", got)
		}
		return nil
	})
	waitFor(t, "the daemon looked bank.example.test up again", func() error {
		if n := dns.Queries("_sandboxd-challenge.bank.example.test"); n < 3 {
			return fmt.Errorf("%d look-ups", n)
		}
		return nil
	})
	if got := routesTo("bank.example.test"); got != "404" {
		t.Errorf("bank.example.test routes to %s, want 404", got)
	}
}
