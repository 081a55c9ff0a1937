package dnstest_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/internal/testenv/dnstest"
)

// The Go resolver, pointed at the server, reads its TXT records, and a
// name without records is not found.
func TestServer_AnswersTXT(t *testing.T) {
	s := dnstest.Start(t)
	s.SetTXT("_x.example.test", "one", "two")
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.Addr())
	}}
	got, err := r.LookupTXT(t.Context(), "_x.example.test.")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"one", "two"}) {
		t.Errorf("LookupTXT = %q, %v; want one, two", got, err)
	}
	_, err = r.LookupTXT(t.Context(), "_y.example.test.")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("LookupTXT of a name without records = %v, want not found", err)
	}
	if n := s.Queries("_x.example.test"); n < 1 {
		t.Errorf("Queries = %d, want at least 1", n)
	}
}
