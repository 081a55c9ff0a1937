package daytona

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// wsWriteTimeout bounds one write to a toolbox WebSocket client: one that
// stops reading is dropped, never waited for.
const wsWriteTimeout = 30 * time.Second

// wsConn is a toolbox WebSocket (PTY, session logs, the interpreter): the
// one place their writes and closes go through, so that every write is
// bounded by wsWriteTimeout and every close reason fits its frame.
type wsConn struct {
	*websocket.Conn
}

// acceptWS upgrades r with readLimit bytes per client message, offering
// subprotocols. It returns nil when the upgrade failed; Accept has then
// answered the client.
func acceptWS(w http.ResponseWriter, r *http.Request, readLimit int64, subprotocols ...string) *wsConn {
	var opts *websocket.AcceptOptions
	if len(subprotocols) > 0 {
		opts = &websocket.AcceptOptions{Subprotocols: subprotocols}
	}
	conn, err := websocket.Accept(w, r, opts)
	if err != nil {
		return nil
	}
	conn.SetReadLimit(readLimit)
	return &wsConn{conn}
}

// send writes one message, within wsWriteTimeout.
func (c *wsConn) send(ctx context.Context, typ websocket.MessageType, data []byte) error {
	wctx, cancel := context.WithTimeout(ctx, wsWriteTimeout)
	defer cancel()
	return c.Write(wctx, typ, data)
}

// sendJSON writes v as one text message, within wsWriteTimeout.
func (c *wsConn) sendJSON(ctx context.Context, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.send(ctx, websocket.MessageText, raw)
}

// end closes the connection with status and reason (cut to fit the close
// frame), waiting for the client's close at most as long as the library
// does.
func (c *wsConn) end(status websocket.StatusCode, reason string) {
	_ = c.Close(status, closeReason(reason))
}

// closeReason fits msg in a close frame's reason (123 bytes).
func closeReason(msg string) string {
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return strings.ToValidUTF8(msg, "")
}
