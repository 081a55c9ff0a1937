package process

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/process"
)

// List returns the processes that are running (or whose end has not been
// published yet), oldest first.
func (s *Service) List(_ context.Context, _ *connect.Request[rpc.ListRequest]) (*connect.Response[rpc.ListResponse], error) {
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	slices.SortFunc(procs, func(a, b *proc) int { return cmp.Compare(a.seq, b.seq) })
	resp := &rpc.ListResponse{Processes: make([]*rpc.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		resp.Processes = append(resp.Processes, p.info())
	}
	return connect.NewResponse(resp), nil
}

// SendInput writes to a process's stdin or terminal, whichever the input
// names; the wrong one for the process is failed_precondition.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[rpc.SendInputRequest]) (*connect.Response[rpc.SendInputResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := input(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.SendInputResponse{}), nil
}

// StreamInput takes a start message naming the process, then input, in
// order. No SDK uses it; it is here for completeness of the service.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[rpc.StreamInputRequest]) (*connect.Response[rpc.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *rpc.StreamInputRequest_Start:
			var err error
			if p, err = s.lookup(ev.Start.GetProcess()); err != nil {
				return nil, toConnect(err)
			}
		case *rpc.StreamInputRequest_Data:
			if p == nil {
				return nil, toConnect(fmt.Errorf("%w: input before the start message", ErrInvalid))
			}
			if err := input(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, toConnect(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rpc.StreamInputResponse{}), nil
}

func input(ctx context.Context, p *proc, in *rpc.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *rpc.ProcessInput_Stdin:
		return p.write(ctx, v.Stdin, false)
	case *rpc.ProcessInput_Pty:
		return p.write(ctx, v.Pty, true)
	default:
		return fmt.Errorf("%w: input names neither stdin nor pty", ErrInvalid)
	}
}

// SendSignal sends SIGTERM or SIGKILL to the process's group, so that the
// commands a shell started get it too. Signalling a process that has
// already exited but not yet ended its streams does nothing.
func (s *Service) SendSignal(_ context.Context, req *connect.Request[rpc.SendSignalRequest]) (*connect.Response[rpc.SendSignalResponse], error) {
	var sig unix.Signal
	switch req.Msg.GetSignal() {
	case rpc.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	case rpc.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	default:
		return nil, toConnect(fmt.Errorf("%w: signal %v", ErrInvalid, req.Msg.GetSignal()))
	}
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := p.signal(sig); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.SendSignalResponse{}), nil
}

// CloseStdin closes a process's stdin; see proc.closeStdin.
func (s *Service) CloseStdin(_ context.Context, req *connect.Request[rpc.CloseStdinRequest]) (*connect.Response[rpc.CloseStdinResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := p.closeStdin(); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&rpc.CloseStdinResponse{}), nil
}

// Update resizes a PTY process's terminal; without a pty it does nothing.
func (s *Service) Update(_ context.Context, req *connect.Request[rpc.UpdateRequest]) (*connect.Response[rpc.UpdateResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if req.Msg.Pty != nil {
		if err := p.resize(req.Msg.GetPty().GetSize()); err != nil {
			return nil, toConnect(err)
		}
	}
	return connect.NewResponse(&rpc.UpdateResponse{}), nil
}
