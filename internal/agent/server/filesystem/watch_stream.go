package filesystem

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	rpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
)

// headerKeepalive carries the keepalive interval in seconds.
const headerKeepalive = "Keepalive-Ping-Interval"

// WatchDir streams changes under a directory: a start event once the watch
// is in place (so nothing after it is missed), then filesystem events and
// keepalives, until the client goes away or the service closes (unavailable). A missing
// directory is not_found, a file invalid_argument.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[rpc.WatchDirRequest], stream *connect.ServerStream[rpc.WatchDirResponse]) error {
	_, root, err := s.target(req.Header(), req.Msg.GetPath())
	if err != nil {
		return toConnect(err)
	}
	if s.ctx.Err() != nil {
		return toConnect(ErrClosed)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	d, err := openWatch(watchSpec{
		root:          root,
		recursive:     req.Msg.GetRecursive(),
		includeEntry:  req.Msg.GetIncludeEntry(),
		networkMounts: req.Msg.GetAllowNetworkMounts(),
	}, s.users.Names())
	if err != nil {
		return toConnect(err)
	}
	defer d.Close()

	start := &rpc.WatchDirResponse{Event: &rpc.WatchDirResponse_Start{Start: &rpc.WatchDirResponse_StartEvent{}}}
	if err := stream.Send(start); err != nil {
		return err // the client is gone
	}
	err = d.run(ctx, s.keepaliveFor(req.Header()), sink{
		event: func(e *rpc.FilesystemEvent) error {
			return stream.Send(&rpc.WatchDirResponse{Event: &rpc.WatchDirResponse_Filesystem{Filesystem: e}})
		},
		keepalive: func() error {
			return stream.Send(&rpc.WatchDirResponse{Event: &rpc.WatchDirResponse_Keepalive{Keepalive: &rpc.WatchDirResponse_KeepAlive{}}})
		},
	})
	if err == nil && s.ctx.Err() != nil {
		err = ErrClosed // tell the client why the stream ended
	}
	return toConnect(err)
}

// keepaliveFor returns the interval the request asks for, or the default.
func (s *Service) keepaliveFor(h http.Header) time.Duration {
	if sec, err := strconv.Atoi(h.Get(headerKeepalive)); err == nil && sec > 0 {
		return time.Duration(sec) * time.Second
	}
	return s.keepalive
}
