// Package handoff gives the sandbox agent its socket without letting
// anything in the sandbox write where that socket lives, and tells the
// daemon who answers on it.
//
// The agent socket directory is mounted read-only in the sandbox, so no
// process there can remove, replace or fill it; a socket on a read-only
// mount can still be connected to, but not created. So the daemon creates
// it: before the container starts, it binds the agent socket (bound, not
// listening) and listens on a second socket, the handoff socket, beside
// it. The agent, PID 1, connects to the handoff socket; the daemon checks
// that the peer is the container's init process (SO_PEERCRED against the
// pid the engine reports) and passes it the bound socket (SCM_RIGHTS).
// The agent calls listen(2) on it, which records the agent as the
// socket's owner for every later connection, and acknowledges; the daemon
// closes its copy and removes the handoff socket.
//
// After that the daemon checks every connection it makes to the agent
// socket with [PeerPID]: the peer must still be the agent.
package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bytes of the exchange: the daemon's message carrying the socket alone
// (a sandbox whose token is still in its environment: one created before
// the token moved here), the one carrying the socket and the token
// (msgSocketToken, a big-endian uint16 length, the token), and the
// agent's acknowledgement once it listens.
const (
	msgSocket      = 'S'
	msgSocketToken = 'T'
	msgAck         = 'K'
)

// MaxToken bounds the token a handoff carries, and the token file.
const MaxToken = 1024

// TokenFileName is the file, in the agent's socket directory, that hands
// a gVisor sandbox's agent its token (a socket cannot cross into gVisor's
// kernel, so there is no handoff there). The daemon writes it (root,
// 0400) before the sandbox starts, when nothing of the sandbox runs; the
// agent, its first process, reads it and removes it before it serves
// (cmd/toolboxd's token.go).
const TokenFileName = "agent.token"

// ackTimeout bounds the exchange on one accepted connection: the agent
// answers in microseconds; anything slower is not the agent at work.
const ackTimeout = 5 * time.Second

// Bind creates a unix stream socket bound to path (mode 0600) and not
// listening, for Offer to hand over. A connection to path is refused
// until the agent listens on it.
func Bind(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("handoff: socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "bind", Path: path, Err: err}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("handoff: %w", err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Prepare readies a handoff in a socket directory: it removes whatever
// sockets an earlier run left at agentPath and offerPath, binds a fresh
// agent socket at agentPath (Bind) and listens at offerPath (mode 0600)
// for the agent that Offer hands it to. On error nothing stays open.
func Prepare(agentPath, offerPath string) (*os.File, *net.UnixListener, error) {
	for _, p := range []string{agentPath, offerPath} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	sock, err := Bind(agentPath)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: offerPath, Net: "unix"})
	if err == nil {
		err = os.Chmod(offerPath, 0o600)
	}
	if err != nil {
		sock.Close()
		if ln != nil {
			ln.Close()
		}
		return nil, nil, fmt.Errorf("handoff socket: %w", err)
	}
	return sock, ln, nil
}

// ErrWrongPeer is a connection from a process other than the one expected.
var ErrWrongPeer = errors.New("handoff: peer is not the expected process")

// Offer accepts connections on ln until one comes from pid, hands it sock
// and token (none when empty: the agent then keeps the one in its
// environment) and waits for its acknowledgement. Connections from any
// other process get nothing, are closed and reported to refused. It
// returns nil once the agent listens on sock, or an error when ctx ends
// or ln fails. The caller closes ln (which also ends a pending Offer)
// and its copy of sock.
func Offer(ctx context.Context, ln *net.UnixListener, sock *os.File, pid int, token []byte, refused func(peer int)) error {
	if len(token) > MaxToken {
		return fmt.Errorf("handoff: token of %d bytes (max %d)", len(token), MaxToken)
	}
	msg := []byte{msgSocket}
	if len(token) > 0 {
		msg = append([]byte{msgSocketToken, byte(len(token) >> 8), byte(len(token))}, token...)
	}
	stop := context.AfterFunc(ctx, func() { _ = ln.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("handoff: %w", ctx.Err())
			}
			return fmt.Errorf("handoff: accept: %w", err)
		}
		peer, err := give(conn, sock, pid, msg)
		conn.Close()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrWrongPeer) && refused != nil {
			refused(peer)
		}
	}
}

// give hands sock, with msg, over conn if its peer is pid, and waits for
// the ack.
func give(conn *net.UnixConn, sock *os.File, pid int, msg []byte) (int, error) {
	peer, err := PeerPID(conn)
	if err != nil {
		return 0, err
	}
	if peer != pid {
		return peer, ErrWrongPeer
	}
	_ = conn.SetDeadline(time.Now().Add(ackTimeout))
	if _, _, err := conn.WriteMsgUnix(msg, unix.UnixRights(int(sock.Fd())), nil); err != nil {
		return peer, fmt.Errorf("handoff: send socket: %w", err)
	}
	var ack [1]byte
	if _, err := conn.Read(ack[:]); err != nil || ack[0] != msgAck {
		return peer, fmt.Errorf("handoff: no acknowledgement (%v)", err)
	}
	return peer, nil
}

// Take connects to the handoff socket at path, retrying while nobody
// offers, until it receives the agent socket; it then listens on it and
// acknowledges. It returns the listener and the token the daemon sent
// with it (empty when it sent none), or ctx's error.
func Take(ctx context.Context, path string) (net.Listener, string, error) {
	backoff := 5 * time.Millisecond
	for {
		ln, token, err := takeOnce(ctx, path)
		if err == nil {
			return ln, token, nil
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("handoff: %w (last attempt: %w)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func takeOnce(ctx context.Context, path string) (net.Listener, string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, "", err
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(ackTimeout))
	fd, token, err := receive(conn)
	if err != nil {
		return nil, "", err
	}
	ln, err := listenFD(fd)
	if err != nil {
		return nil, "", err
	}
	if _, err := conn.Write([]byte{msgAck}); err != nil {
		// The daemon gave up on this offer and may bind a new socket:
		// drop this one and wait for the next offer.
		ln.Close()
		return nil, "", fmt.Errorf("handoff: acknowledge: %w", err)
	}
	return ln, token, nil
}

// receive reads the daemon's message: the one descriptor it carries and
// the token, if it carries one.
func receive(conn *net.UnixConn) (int, string, error) {
	buf := make([]byte, 3+MaxToken)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, "", fmt.Errorf("handoff: receive: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, "", fmt.Errorf("handoff: receive: no socket in the message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err == nil && len(fds) == 1 {
		// Children of the agent must never inherit its socket.
		unix.CloseOnExec(fds[0])
	}
	token, msgErr := readToken(conn, buf, n)
	if err != nil || len(fds) != 1 || msgErr != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, "", fmt.Errorf("handoff: receive: unexpected message (%w)", errors.Join(err, msgErr))
	}
	return fds[0], token, nil
}

// readToken parses the message whose first n bytes are in buf, reading
// the rest of a token the first read did not bring (a stream socket may
// split a message).
func readToken(conn *net.UnixConn, buf []byte, n int) (string, error) {
	switch {
	case n == 1 && buf[0] == msgSocket:
		return "", nil
	case n == 0 || buf[0] != msgSocketToken:
		return "", errors.New("not a handoff message")
	}
	if n < 3 {
		if _, err := io.ReadFull(conn, buf[n:3]); err != nil {
			return "", err
		}
		n = 3
	}
	size := int(buf[1])<<8 | int(buf[2])
	if size == 0 || size > MaxToken || n > 3+size {
		return "", fmt.Errorf("token of %d bytes in a message of %d", size, n)
	}
	if _, err := io.ReadFull(conn, buf[n:3+size]); err != nil {
		return "", err
	}
	return string(buf[3 : 3+size]), nil
}

// listenFD listens on the received socket and wraps it as a listener.
func listenFD(fd int) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), "agent socket")
	defer f.Close() // FileListener holds a duplicate
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		return nil, fmt.Errorf("handoff: listen: %w", err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("handoff: %w", err)
	}
	return ln, nil
}

// PeerPID is the pid, in the caller's pid namespace, of the process at the
// other end of a unix socket connection: for a connection the caller made,
// the process that called listen(2) on the socket it reached; for one it
// accepted, the process that connected. Zero means the peer's pid is not
// visible from the caller's pid namespace.
func PeerPID(conn net.Conn) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("handoff: %T is not a socket", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("handoff: SO_PEERCRED: %w", credErr)
	}
	return int(cred.Pid), nil
}

// WriteTokenFile writes token to TokenFileName in the socket directory
// dir, for an agent that takes no handoff (gVisor): root's, mode 0400,
// made anew (O_EXCL, O_NOFOLLOW) after whatever is at that name is
// removed: a file, a symlink or a directory the sandbox left there in an
// earlier run is never what the agent reads. The caller writes it only
// while nothing of the sandbox runs (before its start), and removes it
// (RemoveTokenFile) once the agent answers or the start failed.
func WriteTokenFile(dir string, token []byte) error {
	if len(token) == 0 || len(token) > MaxToken {
		return fmt.Errorf("handoff: token of %d bytes (1 to %d)", len(token), MaxToken)
	}
	if err := RemoveTokenFile(dir); err != nil {
		return err
	}
	path := filepath.Join(dir, TokenFileName)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return fmt.Errorf("handoff: token file: %w", &os.PathError{Op: "create", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	_, err = f.Write(token)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("handoff: token file: %w", err)
	}
	return nil
}

// RemoveTokenFile removes whatever is at TokenFileName in dir; none is
// not an error.
func RemoveTokenFile(dir string) error {
	if err := os.RemoveAll(filepath.Join(dir, TokenFileName)); err != nil {
		return fmt.Errorf("handoff: remove the token file: %w", err)
	}
	return nil
}
