package adversarial_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// With --https-listen and no certificate of the operator's, the daemon's
// local CA signs a certificate for a preview host at its first handshake.
// A handshake comes before any credential, and every port of a running
// E2B sandbox is a name the daemon serves, so a stranger who knows one
// sandbox id used to make it sign one certificate per port (65,535 per
// sandbox), one at a time under one lock, and empty everyone's cache at
// 4,096. Then the walk was bounded per sandbox, but a stranger who saw
// one preview URL could still walk that sandbox's closed ports and spend
// its budget, and the owner's next new port failed TLS. Now names of no
// sandbox sign nothing, a walk over ports nothing listens on signs
// nothing and spends nothing, the owner's port that starts listening
// after the walk gets its certificate, and one already issued stays.
func TestTLS_StrangerCannotMakeTheLocalCASignWithoutBound(t *testing.T) {
	t.Parallel()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpsAddr := probe.Addr().String()
	probe.Close()
	d := startDaemon(t, "tls-ca", "--https-listen", httpsAddr)
	aliceClient, alice := tenantSecret(t, d, "alice")
	victim := createE2B(t, d, alice, `{"templateID":"base"}`)

	pem, err := os.ReadFile(filepath.Join(d.DataDir(), "preview-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	// shake is a stranger's handshake: no credential, any server name.
	shake := func(name string) (string, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", httpsAddr, &tls.Config{ServerName: name, RootCAs: roots})
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	host := func(port int, id string) string { return fmt.Sprintf("%d-%s.localhost", port, id) }
	issued := func() int {
		t.Helper()
		_, body := call(t, d, "GET", "", "/metrics", "", "Authorization", "Bearer "+d.Token())
		m := regexp.MustCompile(`(?m)^sandboxd_tls_local_certificates_issued_total (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		n, _ := strconv.ParseFloat(m[1], 64)
		return int(n)
	}

	// serve starts a server on port of alice's sandbox and returns the
	// first certificate its port host gets once it listens.
	serve := func(port int) (string, error) {
		t.Helper()
		res := sh(t, aliceClient, victim.SandboxID, fmt.Sprintf("cd /tmp && (setsid python3 -m http.server %d >/dev/null 2>&1 &)", port))
		if res.ExitCode != 0 {
			t.Fatalf("start a server on %d: exit %d: %s", port, res.ExitCode, res.Stderr)
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			serial, err := shake(host(port, victim.SandboxID))
			if err == nil || time.Now().After(deadline) {
				return serial, err
			}
			time.Sleep(100 * time.Millisecond) // a poll for the server's start, not a wait on a latency
		}
	}

	theirs, err := serve(8080)
	if err != nil {
		t.Fatalf("alice's port host: %v", err)
	}
	before := issued()
	for i := range 200 {
		if _, err := shake(fmt.Sprintf("%d-sb-%016x.localhost", 1+i, 0xbad0000+i)); err == nil {
			t.Fatal("a port host of no sandbox got a certificate")
		}
	}
	if got := issued(); got != before {
		t.Errorf("200 names of no sandbox: %d certificates signed, want none", got-before)
	}
	before = issued()
	got := 0
	for port := 20000; port < 20200; port++ {
		if _, err := shake(host(port, victim.SandboxID)); err == nil {
			got++
		}
	}
	if signed := issued() - before; got != 0 || signed != 0 {
		t.Errorf("a stranger's walk over 200 closed ports of alice's sandbox: %d handshakes got a certificate, %d signed; want none", got, signed)
	}
	if again, err := shake(host(8080, victim.SandboxID)); err != nil || again != theirs {
		t.Errorf("alice's port host after the walk: %q, %v; want her certificate %q still", again, err, theirs)
	}
	if _, err := serve(3000); err != nil {
		t.Errorf("a port alice opened after the walk: %v", err)
	}
	if _, err := shake(host(49983, victim.SandboxID)); err != nil {
		t.Errorf("envd's port host (always served): %v", err)
	}
}
