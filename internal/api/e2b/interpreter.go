package e2b

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
	"github.com/sandboxd/sandboxd/internal/service"
)

// The code-interpreter server of the code-interpreter-v1 image
// (images/code-interpreter/server.py, installed by scripts/build-images.sh).
const (
	interpreterTag  = "code-interpreter"
	interpreterUser = "user"
	interpreterPath = "/opt/sandboxd/code-interpreter/server.py"
	// interpreterPoll is how often readiness is probed.
	interpreterPoll = 25 * time.Millisecond
)

// ensureInterpreter makes sure the interpreter server of a code-interpreter
// sandbox runs and accepts connections on port 49999; for other templates
// it does nothing. It is idempotent: a server the agent already runs under
// the tag is not started again, and concurrent calls for one sandbox share
// one attempt. It waits at most Options.InterpreterReady.
func (f *Facade) ensureInterpreter(ctx context.Context, sb service.Sandbox) error {
	if templateOf(sb) != codeInterpreterTemplate {
		return nil
	}
	_, err, _ := f.interpreter.Do(sb.ID, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.ready)
		defer cancel()
		return nil, f.startInterpreter(ctx, sb.ID)
	})
	return err
}

func (f *Facade) startInterpreter(ctx context.Context, id string) error {
	ac, err := f.svc.Agent(ctx, id)
	if err != nil {
		return err
	}
	running, err := taggedProcessRunning(ctx, ac, interpreterTag)
	if err != nil {
		return fmt.Errorf("code interpreter of %s: list processes: %w", id, err)
	}
	if !running {
		p, err := ac.StartProcess(ctx, agent.StartRequest{
			Cmd:  []string{"python3", interpreterPath},
			User: interpreterUser,
			Tag:  interpreterTag,
		})
		if err != nil {
			return fmt.Errorf("code interpreter of %s: start: %w", id, err)
		}
		_ = p.Close() // the stream only; the server runs on
	}
	for {
		conn, err := f.svc.DialPort(ctx, id, interpreterPort)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("code interpreter of %s did not accept connections on port %d: %w", id, interpreterPort, err)
		case <-time.After(interpreterPoll):
		}
	}
}

// taggedProcessRunning reports whether the agent runs a process with tag.
func taggedProcessRunning(ctx context.Context, ac *agent.Client, tag string) (bool, error) {
	resp, err := ac.Process().List(ctx, connect.NewRequest(&rpc.ListRequest{}))
	if err != nil {
		return false, err
	}
	for _, p := range resp.Msg.GetProcesses() {
		if p.GetTag() == tag {
			return true, nil
		}
	}
	return false, nil
}
