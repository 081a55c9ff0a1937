package daytona

import (
	"net/http"
	"slices"
	"strings"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandboxd/internal/service"
)

// entrypointSource is the source of the start command's lines in a
// sandbox's logs (service.Logs): a sandbox made from a template with a
// start command. Daytona's entrypoint is that command's counterpart
// (sandboxd refuses a snapshot's own entrypoint).
const entrypointSource = "start"

// entrypointLogs is GET …/process/session/entrypoint/logs, the SDK's
// process.getEntrypointLogs: the start command's output as JSON {output,
// stdout, stderr} (empty for a sandbox without one), or with follow=true
// a WebSocket of \x01\x01\x01-prefixed stdout and \x02\x02\x02-prefixed
// stderr frames, one per line, until the sandbox stops (as sessionLogs).
func (f *Facade) entrypointLogs(w http.ResponseWriter, r *http.Request, b box) error {
	if r.URL.Query().Get("follow") != "true" {
		var out, stdout, stderr strings.Builder
		err := f.svc.Logs(r.Context(), b.c, b.sb.ID, service.LogQuery{}, func(lines []service.LogLine) error {
			for _, l := range lines {
				if l.Source != entrypointSource {
					continue
				}
				out.WriteString(l.Text + "\n")
				if l.Stream == "stderr" {
					stderr.WriteString(l.Text + "\n")
				} else {
					stdout.WriteString(l.Text + "\n")
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, logsResponse{Output: out.String(), Stdout: stdout.String(), Stderr: stderr.String()})
		return nil
	}
	conn := acceptWS(w, r, maxSessionLogsInput)
	if conn == nil {
		return nil // Accept answered the client
	}
	defer conn.CloseNow()
	ctx := conn.CloseRead(r.Context())
	err := f.svc.Logs(ctx, b.c, b.sb.ID, service.LogQuery{Follow: true}, func(lines []service.LogLine) error {
		for _, l := range lines {
			if l.Source != entrypointSource {
				continue
			}
			prefix := stdoutPrefix
			if l.Stream == "stderr" {
				prefix = stderrPrefix
			}
			if err := conn.send(ctx, websocket.MessageBinary, append(slices.Clip(prefix), l.Text+"\n"...)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		conn.end(websocket.StatusNormalClosure, "")
	}
	return nil
}
