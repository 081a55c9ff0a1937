// Package dnstest runs a tiny authoritative DNS server on 127.0.0.1 for
// tests: it answers TXT questions from records the test sets, NXDOMAIN for
// names without any, over UDP and TCP (the Go resolver retries over TCP
// when an answer is truncated). Nothing else is implemented.
package dnstest

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server is a running DNS server. Its zero value is not usable; use Start.
type Server struct {
	udp *net.UDPConn
	tcp net.Listener

	mu      sync.Mutex
	txt     map[string][]string // lowercase FQDN (trailing dot) → records
	queries map[string]int
	wg      sync.WaitGroup
}

// Start runs a server on 127.0.0.1 (one port, UDP and TCP), stopped at
// the end of t.
func Start(t testing.TB) *Server {
	t.Helper()
	var (
		udp *net.UDPConn
		tcp net.Listener
		err error
	)
	for range 20 { // find a port free for both protocols
		udp, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatalf("dnstest: %v", err)
		}
		tcp, err = net.Listen("tcp", udp.LocalAddr().String())
		if err == nil {
			break
		}
		udp.Close()
	}
	if err != nil {
		t.Fatalf("dnstest: no port free for UDP and TCP: %v", err)
	}
	s := &Server{udp: udp, tcp: tcp, txt: map[string][]string{}, queries: map[string]int{}}
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	t.Cleanup(s.Close)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.udp.LocalAddr().String() }

// SetTXT makes name answer the TXT records values (none: NXDOMAIN).
func (s *Server) SetTXT(name string, values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := fqdn(name)
	if len(values) == 0 {
		delete(s.txt, key)
		return
	}
	s.txt[key] = append([]string(nil), values...)
}

// Queries is how many questions for name the server has answered.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[fqdn(name)]
}

// Close stops the server and waits for its goroutines.
func (s *Server) Close() {
	s.udp.Close()
	s.tcp.Close()
	s.wg.Wait()
}

func fqdn(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := s.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if out, ok := s.answer(buf[:n]); ok {
			_, _ = s.udp.WriteToUDP(out, from)
		}
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			for {
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				out, ok := s.answer(msg)
				if !ok {
					return
				}
				if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(out)))); err != nil {
					return
				}
				if _, err := c.Write(out); err != nil {
					return
				}
			}
		}()
	}
}

// answer builds the reply to one query message.
func (s *Server) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.ToLower(q.Name.String())
	s.mu.Lock()
	s.queries[name]++
	records, found := s.txt[name]
	s.mu.Unlock()

	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !found {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	if found && q.Type == dnsmessage.TypeTXT {
		for _, r := range records {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassINET, TTL: 1}
			if err := b.TXTResource(rr, dnsmessage.TXTResource{TXT: []string{r}}); err != nil {
				return nil, false
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, false
	}
	return out, true
}
