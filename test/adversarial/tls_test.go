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
// 4,096. Now names of no sandbox sign nothing, the walk of one sandbox's
// ports gets a small budget, another tenant's sandbox still gets its
// certificates, and one already issued stays.
func TestTLS_StrangerCannotMakeTheLocalCASignWithoutBound(t *testing.T) {
	t.Parallel()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpsAddr := probe.Addr().String()
	probe.Close()
	d := startDaemon(t, "tls-ca", "--https-listen", httpsAddr)
	_, alice := tenantSecret(t, d, "alice")
	_, mallory := tenantSecret(t, d, "mallory")
	victim := createE2B(t, d, alice, `{"templateID":"base"}`)
	walked := createE2B(t, d, mallory, `{"templateID":"base"}`)

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

	theirs, err := shake(host(8080, victim.SandboxID))
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
	start := time.Now()
	got := 0
	for port := 20000; port < 20200; port++ {
		if _, err := shake(host(port, walked.SandboxID)); err == nil {
			got++
		}
	}
	if limit := 32 + int(time.Since(start)/(2*time.Second)) + 1; got > limit {
		t.Errorf("a walk over 200 ports of one sandbox got %d certificates in %v; want at most %d", got, time.Since(start).Round(time.Millisecond), limit)
	}
	if again, err := shake(host(8080, victim.SandboxID)); err != nil || again != theirs {
		t.Errorf("alice's port host after the walk: %q, %v; want her certificate %q still", again, err, theirs)
	}
	if _, err := shake(host(3000, victim.SandboxID)); err != nil {
		t.Errorf("a new port host of alice's after the walk: %v", err)
	}
}
