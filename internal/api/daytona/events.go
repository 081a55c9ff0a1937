package daytona

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/service"
)

// The event stream is Daytona's notification gateway: Socket.IO (protocol
// 5) over Engine.IO (protocol 4), WebSocket transport only, which is all
// the SDK uses (transports: ['websocket']). Only what the SDK needs of the
// protocol is spoken: the open packet, pings, one CONNECT to the main
// namespace with auth {token}, and server-sent events. Everything a client
// sends is bounded (eventMaxFrame) and, but for CONNECT, pong and
// disconnect, ignored.
//
// A client is authenticated by the token of its CONNECT (an API token, as
// on every other route) and joins its owner's room: it gets the events of
// that owner's sandboxes and no other's. Events:
//
//	sandbox.created        the Sandbox DTO (state creating)
//	sandbox.state.updated  {sandbox: DTO, oldState, newState}
//
// (a destroyed sandbox is newState "destroyed"). A client that falls
// behind (service.EventBuffer) or stops reading is disconnected; the SDK
// reconnects and polls meanwhile.

// Engine.IO packet types (first byte of a text frame).
const (
	eioOpen    = '0'
	eioClose   = '1'
	eioPing    = '2'
	eioPong    = '3'
	eioMessage = '4'
)

// Socket.IO packet types (the byte after an Engine.IO message).
const (
	sioConnect      = '0'
	sioDisconnect   = '1'
	sioEvent        = '2'
	sioConnectError = '4'
)

// Event stream bounds.
const (
	// eventMaxFrame bounds one frame from a client: a CONNECT carries a
	// token, nothing else is read.
	eventMaxFrame = 16 << 10
	// eventConnectTimeout is how long a client has, after the open packet,
	// to send its CONNECT.
	eventConnectTimeout = 10 * time.Second
	// eventWriteTimeout bounds one frame to a client: one that does not
	// read is dropped.
	eventWriteTimeout = 10 * time.Second
	// Engine.IO heartbeat defaults (the server pings, the client answers
	// within the timeout).
	defaultPingInterval = 25 * time.Second
	defaultPingTimeout  = 20 * time.Second
)

// Daytona's event names.
const (
	eventSandboxCreated = "sandbox.created"
	eventSandboxState   = "sandbox.state.updated"
)

// engineError answers a request the event stream cannot take, in
// Engine.IO's shape (HTTP 400 {"code","message"}).
func engineError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"code": code, "message": msg})
}

// eventStream is GET /socket.io/: the WebSocket of one Socket.IO client.
// It is not behind wrap: the token comes in the CONNECT packet.
func (f *Facade) eventStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case q.Get("EIO") != "4":
		engineError(w, 5, "Unsupported protocol version")
		return
	case q.Get("transport") != "websocket":
		engineError(w, 0, "Transport unknown")
		return
	case q.Get("sid") != "":
		engineError(w, 1, "Session ID unknown")
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(eventMaxFrame)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	stop := context.AfterFunc(r.Context(), cancel)
	defer stop()

	es := &eventConn{f: f, conn: conn, base: toolboxBase(r), r: r}
	status, reason := es.serve(ctx)
	conn.Close(status, reason)
}

// eventConn is one client of the event stream.
type eventConn struct {
	f    *Facade
	conn *websocket.Conn
	r    *http.Request
	base string // toolboxProxyUrl for DTOs
}

// frame is one text frame read from the client, or the error that ended
// reading.
type frame struct {
	data []byte
	err  error
}

// serve runs the protocol until the client leaves, fails or the facade
// closes, and returns the close status.
func (c *eventConn) serve(ctx context.Context) (websocket.StatusCode, string) {
	pingInterval, pingTimeout := defaultPingInterval, defaultPingTimeout
	open, _ := json.Marshal(map[string]any{
		"sid":          randomID(),
		"upgrades":     []string{},
		"pingInterval": pingInterval.Milliseconds(),
		"pingTimeout":  pingTimeout.Milliseconds(),
		"maxPayload":   eventMaxFrame,
	})
	if err := c.write(ctx, append([]byte{eioOpen}, open...)); err != nil {
		return websocket.StatusGoingAway, ""
	}

	// One reader: frames go to the loop, in order, one at a time. It reads
	// until the connection closes (the close handshake after serve needs a
	// reader), and stops handing frames over once serve returns.
	frames := make(chan frame)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			typ, data, err := c.conn.Read(context.Background())
			if err == nil && typ != websocket.MessageText {
				continue // binary attachments: nothing of ours uses them
			}
			select {
			case frames <- frame{data, err}:
			case <-done:
				if err != nil {
					return
				}
				continue // drain until the connection closes
			}
			if err != nil {
				return
			}
		}
	}()

	sub, status, reason := c.connect(ctx, frames)
	if sub == nil {
		return status, reason
	}
	defer sub.Close()

	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	var pongBy <-chan time.Time // set while a ping awaits its pong
	for {
		select {
		case <-ctx.Done():
			return websocket.StatusGoingAway, "server closing"
		case fr := <-frames:
			if fr.err != nil {
				return websocket.StatusNormalClosure, ""
			}
			switch {
			case len(fr.data) == 0:
			case fr.data[0] == eioPong:
				pongBy = nil
			case fr.data[0] == eioClose:
				return websocket.StatusNormalClosure, ""
			case len(fr.data) >= 2 && fr.data[0] == eioMessage && fr.data[1] == sioDisconnect:
				return websocket.StatusNormalClosure, ""
			}
		case <-ping.C:
			if pongBy != nil {
				continue
			}
			if err := c.write(ctx, []byte{eioPing}); err != nil {
				return websocket.StatusGoingAway, ""
			}
			pongBy = time.After(pingTimeout)
		case <-pongBy:
			return websocket.StatusPolicyViolation, "ping timeout"
		case ev, ok := <-sub.Events():
			if !ok {
				// Fallen behind: a server disconnect, which the SDK
				// answers by connecting again.
				_ = c.write(ctx, []byte{eioMessage, sioDisconnect})
				return websocket.StatusTryAgainLater, "fell behind"
			}
			msg, err := c.eventFrame(ev)
			if err != nil {
				continue
			}
			if err := c.write(ctx, msg); err != nil {
				return websocket.StatusGoingAway, ""
			}
		}
	}
}

// connect waits for the client's CONNECT, authenticates its token and
// subscribes to its owner's events; it answers CONNECT (with a socket id)
// or CONNECT_ERROR. A nil subscription ends the connection with the status
// returned.
func (c *eventConn) connect(ctx context.Context, frames <-chan frame) (*service.Subscription, websocket.StatusCode, string) {
	deadline := time.NewTimer(eventConnectTimeout)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, websocket.StatusGoingAway, "server closing"
		case <-deadline.C:
			return nil, websocket.StatusPolicyViolation, "no CONNECT"
		case fr := <-frames:
			if fr.err != nil {
				return nil, websocket.StatusNormalClosure, ""
			}
			if len(fr.data) < 2 || fr.data[0] != eioMessage || fr.data[1] != sioConnect {
				if len(fr.data) > 0 && fr.data[0] == eioClose {
					return nil, websocket.StatusNormalClosure, ""
				}
				continue // pongs, or anything sent before CONNECT
			}
			ns, token, ok := parseConnect(fr.data[2:])
			if ns != "/" {
				c.connectError(ctx, ns, "Invalid namespace")
				return nil, websocket.StatusNormalClosure, ""
			}
			if !ok || token == "" {
				c.connectError(ctx, ns, "Unauthorized")
				return nil, websocket.StatusNormalClosure, ""
			}
			sub, err := c.subscribe(ctx, token)
			if err != nil {
				c.connectError(ctx, ns, classify(err).Message)
				return nil, websocket.StatusNormalClosure, ""
			}
			ack, _ := json.Marshal(map[string]string{"sid": randomID()})
			if err := c.write(ctx, append([]byte{eioMessage, sioConnect}, ack...)); err != nil {
				sub.Close()
				return nil, websocket.StatusGoingAway, ""
			}
			return sub, 0, ""
		}
	}
}

// subscribe authenticates token exactly as the Authorization header of any
// other route, and subscribes to the principal's owner.
func (c *eventConn) subscribe(ctx context.Context, token string) (*service.Subscription, error) {
	req := c.r.Clone(ctx)
	req.Header = http.Header{"Authorization": {"Bearer " + token}}
	p, err := c.f.auth.Authenticate(ctx, req)
	if err != nil {
		return nil, err
	}
	sub, err := c.f.svc.Subscribe(p.Owner)
	if errors.Is(err, service.ErrTooManySubscriptions) {
		return nil, errorf(http.StatusTooManyRequests, "too many event streams for this organization")
	}
	return sub, err
}

// connectError sends CONNECT_ERROR {message} for namespace ns.
func (c *eventConn) connectError(ctx context.Context, ns, msg string) {
	body, _ := json.Marshal(map[string]string{"message": msg})
	pkt := []byte{eioMessage, sioConnectError}
	if ns != "/" {
		pkt = append(append(pkt, ns...), ',')
	}
	_ = c.write(ctx, append(pkt, body...))
}

// parseConnect reads a CONNECT packet's body: an optional namespace ("/x,")
// and an optional JSON auth object whose token is returned. ok is false
// when the auth is not a JSON object.
func parseConnect(b []byte) (ns, token string, ok bool) {
	ns = "/"
	if len(b) > 0 && b[0] == '/' {
		end := bytes.IndexByte(b, ',')
		if end < 0 {
			return string(b), "", true
		}
		ns, b = string(b[:end]), b[end+1:]
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return ns, "", true
	}
	var auth struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &auth); err != nil {
		return ns, "", false
	}
	return ns, auth.Token, true
}

// eventFrame renders ev as a Socket.IO EVENT frame.
func (c *eventConn) eventFrame(ev service.Event) ([]byte, error) {
	d := dto(ev.Sandbox, c.base, true)
	var name string
	var payload any
	switch {
	case ev.Created:
		name, payload = eventSandboxCreated, d
	default:
		if ev.Gone {
			d.State, d.DesiredState = "destroyed", "destroyed"
		}
		old := ""
		if ev.OldState != "" {
			old = stateName(ev.OldState)
		}
		name, payload = eventSandboxState, map[string]any{"sandbox": d, "oldState": old, "newState": d.State}
	}
	body, err := json.Marshal([]any{name, payload})
	if err != nil {
		return nil, err
	}
	return append([]byte{eioMessage, sioEvent}, body...), nil
}

func (c *eventConn) write(ctx context.Context, msg []byte) error {
	ctx, cancel := context.WithTimeout(ctx, eventWriteTimeout)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageText, msg)
}

// randomID is an Engine.IO or Socket.IO session id (20 URL-safe chars).
func randomID() string {
	b := make([]byte, 15)
	_, _ = rand.Read(b)
	return strings.TrimRight(base64.URLEncoding.EncodeToString(b), "=")
}
