package daytona_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/api/daytona"
)

// eventClient is a Socket.IO client of the facade's event stream, speaking
// the protocol by hand.
type eventClient struct {
	t    *testing.T
	conn *websocket.Conn
}

// dialEvents opens the event stream and reads the Engine.IO open packet.
func dialEvents(t *testing.T, s *stack, query string) *eventClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(s.URL, "http") + daytona.Prefix + "/socket.io/?EIO=4&transport=websocket" + query
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	c := &eventClient{t: t, conn: conn}
	open := c.read()
	var hs struct {
		SID          string   `json:"sid"`
		Upgrades     []string `json:"upgrades"`
		PingInterval int      `json:"pingInterval"`
		PingTimeout  int      `json:"pingTimeout"`
		MaxPayload   int      `json:"maxPayload"`
	}
	if !strings.HasPrefix(open, "0") || json.Unmarshal([]byte(open[1:]), &hs) != nil || hs.SID == "" || hs.PingInterval <= 0 || hs.PingTimeout <= 0 || hs.MaxPayload <= 0 {
		t.Fatalf("open packet %q", open)
	}
	return c
}

// connect sends CONNECT with auth {token} and returns the answer packet.
func (c *eventClient) connect(token string) string {
	c.t.Helper()
	auth, _ := json.Marshal(map[string]string{"token": token})
	c.send("40" + string(auth))
	return c.read()
}

func (c *eventClient) send(msg string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		c.t.Fatalf("send %q: %v", msg, err)
	}
}

// read returns the next packet that is not a ping (pings are answered).
func (c *eventClient) read() string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 60*time.Second)
	defer cancel()
	for {
		_, b, err := c.conn.Read(ctx)
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		if string(b) == "2" {
			c.send("3")
			continue
		}
		return string(b)
	}
}

// sandboxEvent is one decoded Socket.IO EVENT.
type sandboxEvent struct {
	Name     string
	ID       string
	State    string // the DTO's
	OldState string
	NewState string
	Owner    string
}

func (c *eventClient) next() sandboxEvent {
	c.t.Helper()
	pkt := c.read()
	msg, ok := strings.CutPrefix(pkt, "42")
	if !ok {
		c.t.Fatalf("packet %q is not an event", pkt)
	}
	var args []json.RawMessage
	if err := json.Unmarshal([]byte(msg), &args); err != nil || len(args) != 2 {
		c.t.Fatalf("event %q: %v", pkt, err)
	}
	var ev sandboxEvent
	json.Unmarshal(args[0], &ev.Name)
	type dtoPart struct {
		ID             string `json:"id"`
		State          string `json:"state"`
		OrganizationID string `json:"organizationId"`
	}
	var d dtoPart
	switch ev.Name {
	case "sandbox.created":
		json.Unmarshal(args[1], &d)
	case "sandbox.state.updated":
		var body struct {
			Sandbox  dtoPart `json:"sandbox"`
			OldState string  `json:"oldState"`
			NewState string  `json:"newState"`
		}
		if err := json.Unmarshal(args[1], &body); err != nil {
			c.t.Fatalf("event %q: %v", pkt, err)
		}
		d, ev.OldState, ev.NewState = body.Sandbox, body.OldState, body.NewState
	default:
		c.t.Fatalf("unknown event %q", pkt)
	}
	ev.ID, ev.State, ev.Owner = d.ID, d.State, d.OrganizationID
	return ev
}

// nextFor skips events of other sandboxes (of the same owner: other tests
// run beside this one) and returns the next one of id.
func (c *eventClient) nextFor(id string) sandboxEvent {
	c.t.Helper()
	for {
		if ev := c.next(); ev.ID == id {
			return ev
		}
	}
}

// TestEvents_LifecycleOfTheOwnersSandboxes: a client authenticated in its
// CONNECT gets the Daytona events of its owner's sandbox through create,
// stop, start and delete, and a client of another owner gets none of them.
func TestEvents_LifecycleOfTheOwnersSandboxes(t *testing.T) {
	s := need(t)
	alice := dialEvents(t, s, "&source=sdk-typescript&sdkVersion=0.218.0")
	if ack := alice.connect(s.User); !strings.HasPrefix(ack, "40{") || !strings.Contains(ack, `"sid"`) {
		t.Fatalf("CONNECT answered %q, want 40{\"sid\":…}", ack)
	}
	admin := dialEvents(t, s, "")
	if ack := admin.connect(s.Admin); !strings.HasPrefix(ack, "40{") {
		t.Fatalf("admin CONNECT answered %q", ack)
	}

	sb := s.create(t, s.User, nil)
	if ev := alice.nextFor(sb.ID); ev.Name != "sandbox.created" || ev.State != "creating" || ev.Owner != "alice" {
		t.Errorf("first event %+v, want sandbox.created in state creating of alice", ev)
	}
	if ev := alice.nextFor(sb.ID); ev.Name != "sandbox.state.updated" || ev.OldState != "creating" || ev.NewState != "started" || ev.State != "started" {
		t.Errorf("event after create %+v, want creating → started", ev)
	}
	if resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/stop", nil); resp.status != http.StatusOK {
		t.Fatalf("stop: %d %s", resp.status, resp.body)
	}
	if ev := alice.nextFor(sb.ID); ev.OldState != "started" || ev.NewState != "stopped" {
		t.Errorf("event after stop %+v, want started → stopped", ev)
	}
	if resp := s.do(t, s.User, http.MethodPost, "/sandbox/"+sb.ID+"/start", nil); resp.status != http.StatusOK {
		t.Fatalf("start: %d %s", resp.status, resp.body)
	}
	if ev := alice.nextFor(sb.ID); ev.OldState != "stopped" || ev.NewState != "started" {
		t.Errorf("event after start %+v, want stopped → started", ev)
	}
	if resp := s.do(t, s.User, http.MethodDelete, "/sandbox/"+sb.ID, nil); resp.status != http.StatusOK {
		t.Fatalf("delete: %d %s", resp.status, resp.body)
	}
	if ev := alice.nextFor(sb.ID); ev.NewState != "destroyed" || ev.State != "destroyed" {
		t.Errorf("event after delete %+v, want → destroyed", ev)
	}

	// The admin acts as another owner: its first event is of its own
	// sandbox, made after all of alice's (events are delivered in order).
	mine := s.create(t, s.Admin, nil)
	for {
		ev := admin.next()
		if ev.ID == sb.ID || ev.Owner == "alice" {
			t.Fatalf("another owner's client got alice's event %+v", ev)
		}
		if ev.ID == mine.ID {
			break
		}
	}
}

// TestEvents_RefusedConnects: a bad or missing token and another namespace
// are CONNECT_ERRORs; the polling transport and other protocol versions
// are Engine.IO's 400s.
func TestEvents_RefusedConnects(t *testing.T) {
	s := need(t)
	for name, tc := range map[string]struct{ send, want string }{
		"bad token":   {`40{"token":"not-a-token"}`, `44{"message":"missing or invalid API token"}`},
		"no auth":     {`40`, `44{"message":"Unauthorized"}`},
		"bad auth":    {`40[1]`, `44{"message":"Unauthorized"}`},
		"a namespace": {`40/admin,{"token":"x"}`, `44/admin,{"message":"Invalid namespace"}`},
	} {
		t.Run(name, func(t *testing.T) {
			c := dialEvents(t, s, "")
			c.send(tc.send)
			if got := c.read(); got != tc.want {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
		})
	}
	for name, query := range map[string]string{
		"polling":   "?EIO=4&transport=polling",
		"EIO 3":     "?EIO=3&transport=websocket",
		"a session": "?EIO=4&transport=websocket&sid=abc",
	} {
		t.Run(name, func(t *testing.T) {
			resp := s.do(t, "", http.MethodGet, "/socket.io/"+query, nil)
			var body struct {
				Code    *int   `json:"code"`
				Message string `json:"message"`
			}
			if resp.status != http.StatusBadRequest || json.Unmarshal(resp.body, &body) != nil || body.Code == nil || body.Message == "" {
				t.Errorf("%d %s, want 400 {code, message}", resp.status, resp.body)
			}
		})
	}
}

// TestEvents_OversizedFrameClosesTheStream: what a client sends is bounded.
func TestEvents_OversizedFrameClosesTheStream(t *testing.T) {
	s := need(t)
	c := dialEvents(t, s, "")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_ = c.conn.Write(ctx, websocket.MessageText, []byte("40"+strings.Repeat("x", 1<<20)))
	_, _, err := c.conn.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("read after a 1 MiB frame: %v, want close 1009", err)
	}
}
