package ingress_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/sandboxd/sandboxd/internal/ingress"
)

func TestHTTPS_LocalCAIssuesForRoutableHosts(t *testing.T) {
	e := newEnv(t)
	ca, err := ingress.NewLocalCA()
	if err != nil {
		t.Fatal(err)
	}
	port := httpUpstream(t, http.HandlerFunc(headerEcho))
	e.expose(t, sbA, ingress.Port{Number: port, Protocol: ingress.HTTP, Public: true})

	// The daemon's HTTPS listener: the same Wrap handler over TLS.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", ca.TLSConfig(e.r.Routable))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.r.Wrap(http.NotFoundHandler())}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	resp, err := client.Get("https://" + e.r.PreviewHost(sbA, port) + ":" + portOf(addr) + "/secure")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got seen
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if got.XFProto != "https" || got.Path != "/secure" {
		t.Fatalf("upstream saw %+v, want X-Forwarded-Proto https", got)
	}

	// No certificate for a host that routes nowhere.
	if _, err := client.Get("https://" + e.r.PreviewHost(sbA, port+1) + "/"); err == nil {
		t.Fatal("handshake for an unexposed port succeeded")
	}
}

func TestACME_DecisionFollowsTheTable(t *testing.T) {
	e := newEnv(t)
	acme, err := ingress.NewACME(ingress.ACMEOptions{
		Email:      "ops@example.com",
		StorageDir: t.TempDir(),
		CA:         "https://127.0.0.1:1/directory", // never contacted
		Routable:   e.r.Routable,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer acme.Close()
	if acme.TLSConfig().GetCertificate == nil {
		t.Fatal("no GetCertificate")
	}
	e.expose(t, sbA, ingress.Port{Number: 8080, Protocol: ingress.HTTP})
	if err := e.r.BindDomain(t.Context(), "app.example.com", sbA, 8080); err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		e.r.PreviewHost(sbA, 8080): true,
		"APP.example.com":          true,
		e.r.PreviewHost(sbA, 8081): false,
		e.r.PreviewHost(sbB, 8080): false,
		"example.org":              false,
	} {
		err := ingress.ACMEDecide(t.Context(), acme, host)
		if got := err == nil; got != want {
			t.Errorf("decision for %s: allowed=%v (%v), want %v", host, got, err, want)
		}
	}
}
