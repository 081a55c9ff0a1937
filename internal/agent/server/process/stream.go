package process

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// Headers that shape a stream, as envd reads them.
const (
	// headerTimeout is Connect's timeout header; envd treats it as the
	// process lifetime: when it passes, the process is killed, whether or
	// not anyone is still connected.
	headerTimeout = "Connect-Timeout-Ms"
	// headerKeepalive is the keepalive interval in seconds.
	headerKeepalive = "Keepalive-Ping-Interval"
	// headerKeepOutput (sandboxd's, on Start) asks the agent to keep the
	// process's newest output, up to this many bytes (capped at
	// [MaxKeepOutput]), whether or not anyone is attached, and to keep the
	// process known to Connect for [EndedKeep] after it ends.
	headerKeepOutput = "X-Sandboxd-Keep-Output"
	// headerReplay (sandboxd's, on Connect): "1" replays the kept output
	// before the live events.
	headerReplay = "X-Sandboxd-Replay"
	// headerLog (sandboxd's, on Start) names the process's lines in the
	// sandbox's log (package logbook): absent, by its pid ("pid-N");
	// "start", as the sandbox's start command; "off" keeps them out (the
	// daemon's own probes: a disk-usage check, a readiness check).
	headerLog = "X-Sandboxd-Log"
)

// logOff is launch.logAs for a process kept out of the log.
const logOff = "\x00off"

// logAsFor reads headerLog.
func logAsFor(h http.Header) (string, error) {
	switch v := h.Get(headerLog); v {
	case "":
		return "", nil
	case "start":
		return v, nil
	case "off":
		return logOff, nil
	default:
		return "", fmt.Errorf("%w: header %s: %q is not start or off", ErrInvalid, headerLog, v)
	}
}

// Start starts a process and streams its events: start{pid}, data..., end.
// The process belongs to the agent, not to the stream: a client that goes
// away stops receiving, and the process runs on until it exits or its
// lifetime (Connect-Timeout-Ms, none when absent) passes.
func (s *Service) Start(ctx context.Context, req *connect.Request[rpc.StartRequest], stream *connect.ServerStream[rpc.StartResponse]) error {
	u, err := s.users.FromHeader(req.Header())
	if err != nil {
		return toConnect(err)
	}
	lifetime, err := headerDuration(req.Header(), headerTimeout, time.Millisecond)
	if err != nil {
		return toConnect(err)
	}
	keep, err := headerInt(req.Header(), headerKeepOutput)
	if err != nil {
		return toConnect(err)
	}
	l, err := launchFor(u, req.Msg, s.defaults())
	if err != nil {
		return toConnect(err)
	}
	if l.logAs, err = logAsFor(req.Header()); err != nil {
		return toConnect(err)
	}
	p, sb, err := s.launchProc(l, lifetime, min(keep, MaxKeepOutput))
	if err != nil {
		return toConnect(err)
	}
	return s.pump(ctx, s.keepaliveFor(req.Header()), p, sb, func(ev *rpc.ProcessEvent) error {
		return stream.Send(&rpc.StartResponse{Event: ev})
	})
}

// Connect attaches to a running process by pid or tag and streams its
// events from now on, starting with start{pid}. Several streams may follow
// one process; each sees every event published while it is attached.
//
// With X-Sandboxd-Replay: 1 the stream first replays the output the process
// keeps (see headerKeepOutput), and it may also attach to such a process
// that ended in the last [EndedKeep]: it then gets the kept output and the
// end.
func (s *Service) Connect(ctx context.Context, req *connect.Request[rpc.ConnectRequest], stream *connect.ServerStream[rpc.ConnectResponse]) error {
	replay := req.Header().Get(headerReplay) == "1"
	p, err := s.lookupAny(req.Msg.GetProcess(), replay)
	if err != nil {
		return toConnect(err)
	}
	subscribe := p.hub.subscribe
	if replay {
		subscribe = p.hub.subscribeReplay
	}
	sb := subscribe()
	return s.pump(ctx, s.keepaliveFor(req.Header()), p, sb, func(ev *rpc.ProcessEvent) error {
		return stream.Send(&rpc.ConnectResponse{Event: ev})
	})
}

// pump sends start{pid}, then sb's events, with a keepalive after every
// quiet interval, until the end event was sent, sending fails or ctx ends.
func (s *Service) pump(ctx context.Context, every time.Duration, p *proc, sb *sub, send func(*rpc.ProcessEvent) error) error {
	defer p.hub.unsubscribe(sb)
	if err := send(&rpc.ProcessEvent{Event: &rpc.ProcessEvent_Start{Start: &rpc.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	keepalive := &rpc.ProcessEvent{Event: &rpc.ProcessEvent_Keepalive{Keepalive: &rpc.ProcessEvent_KeepAlive{}}}
	if sb.replay != nil {
		for _, ev := range sb.replay {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := send(ev); err != nil {
				return err
			}
		}
		sb.replay = nil
		// One keepalive marks where the kept output ends.
		if err := send(keepalive); err != nil {
			return err
		}
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := send(keepalive); err != nil {
				return err
			}
		case ev, ok := <-sb.ch:
			if !ok {
				return nil
			}
			if err := send(ev); err != nil {
				return err
			}
			tick.Reset(every)
		}
	}
}

// keepaliveFor is the keepalive interval a request asks for, or the
// service default when it asks for none or for nonsense.
func (s *Service) keepaliveFor(h http.Header) time.Duration {
	if d, err := headerDuration(h, headerKeepalive, time.Second); err == nil && d > 0 {
		return d
	}
	return s.keepalive
}
