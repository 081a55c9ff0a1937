package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"
)

// Protocol is how an exposed sandbox port is reached.
type Protocol string

// The exposure protocols; the schema's CHECK constraint admits exactly these.
const (
	ProtocolHTTP Protocol = "http" // routed by Host header; never has a host port
	ProtocolTCP  Protocol = "tcp"  // raw TCP on a host port from the pool; always has one
	ProtocolTLS  Protocol = "tls"  // routed by SNI (host port 0) or on a host port
)

// Valid reports whether p is one of the defined protocols.
func (p Protocol) Valid() bool {
	return p == ProtocolHTTP || p == ProtocolTCP || p == ProtocolTLS
}

// PortRequest asks to expose Port of sandbox SandboxID.
type PortRequest struct {
	SandboxID string
	Port      int
	Protocol  Protocol
	Public    bool
}

// ExposedPort is one exposed_ports row.
type ExposedPort struct {
	SandboxID string
	Port      int
	Protocol  Protocol
	HostPort  int // 0: no host port
	Public    bool
	// Reservation is random per insert. It identifies the call that created the row, so
	// that call's undo (ReleaseReservation) never deletes a row someone else re-created.
	Reservation int64
	CreatedAt   time.Time
}

// ReserveOutcome is the result of one TryReserveHostPort attempt.
type ReserveOutcome int

const (
	// Reserved: this call inserted the row; the caller owns it (and its undo).
	Reserved ReserveOutcome = iota + 1
	// Existing: the sandbox already exposes this port; the returned row is the existing
	// one (possibly with another host port). Stop walking.
	Existing
	// Taken: another exposure holds the candidate host port. Walk on.
	Taken
)

func (o ReserveOutcome) String() string {
	switch o {
	case Reserved:
		return "reserved"
	case Existing:
		return "existing"
	case Taken:
		return "taken"
	}
	return "ReserveOutcome(" + strconv.Itoa(int(o)) + ")"
}

// PortRange is an inclusive range of host ports.
type PortRange struct{ Lo, Hi int }

func (r PortRange) valid() bool { return 1 <= r.Lo && r.Lo <= r.Hi && r.Hi <= 65535 }

const exposedPortColumns = `sandbox_id, port, protocol, host_port, public, reservation, created_at`

func scanExposedPort(r rowScanner) (ExposedPort, error) {
	var (
		ep      ExposedPort
		created int64
	)
	if err := r.Scan(&ep.SandboxID, &ep.Port, &ep.Protocol, &ep.HostPort, &ep.Public,
		&ep.Reservation, &created); err != nil {
		return ExposedPort{}, err
	}
	ep.CreatedAt = time.UnixMilli(created).UTC()
	return ep, nil
}

func validatePortRequest(req PortRequest, candidate int) error {
	switch {
	case req.SandboxID == "":
		return invalidf("expose port: empty sandbox id")
	case req.Port < 1 || req.Port > 65535:
		return invalidf("expose port: port %d out of range", req.Port)
	case !req.Protocol.Valid():
		return invalidf("expose port: protocol %q", req.Protocol)
	case candidate < 0 || candidate > 65535:
		return invalidf("expose port: host port %d out of range", candidate)
	case req.Protocol == ProtocolHTTP && candidate != 0:
		return invalidf("expose port: http exposures have no host port")
	case req.Protocol == ProtocolTCP && candidate == 0:
		return invalidf("expose port: tcp exposures need a host port")
	}
	return nil
}

// TryReserveHostPort tries to expose req on host port candidate (0 for no host port:
// HTTP, and TLS routed by SNI) in one write transaction: it proposes the row and lets the
// primary key (sandbox, port) and the unique host-port index decide.
//
// Outcomes: Reserved (this call inserted the row), Existing (the sandbox already exposes
// req.Port, possibly on another host port: the existing row is returned; stop walking),
// Taken (another exposure holds candidate: walk on). Errors: ErrPortProtocolConflict if
// req.Port is exposed with another protocol, ErrNotFound if the sandbox does not exist,
// ErrInvalidArgument. Of concurrent callers proposing one (sandbox, port), or one host
// port, exactly one gets Reserved. Retrying is safe: a retry after success is Existing.
func (s *Store) TryReserveHostPort(ctx context.Context, req PortRequest, candidate int) (ReserveOutcome, ExposedPort, error) {
	if err := validatePortRequest(req, candidate); err != nil {
		return 0, ExposedPort{}, err
	}
	ep := ExposedPort{
		SandboxID:   req.SandboxID,
		Port:        req.Port,
		Protocol:    req.Protocol,
		HostPort:    candidate,
		Public:      req.Public,
		Reservation: newToken(),
	}
	var outcome ReserveOutcome
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.nowMillis()
		res, err := tx.ExecContext(ctx, `INSERT INTO exposed_ports (`+exposedPortColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			ep.SandboxID, ep.Port, ep.Protocol, ep.HostPort, ep.Public, ep.Reservation, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			outcome, ep.CreatedAt = Reserved, time.UnixMilli(now).UTC()
			return nil
		}
		// A uniqueness rule said no. The (sandbox, port) row wins over the host port:
		// if it exists, this sandbox already has its exposure.
		existing, err := scanExposedPort(tx.QueryRowContext(ctx, `SELECT `+exposedPortColumns+
			` FROM exposed_ports WHERE sandbox_id = ? AND port = ?`, req.SandboxID, req.Port))
		switch {
		case errors.Is(err, sql.ErrNoRows) && candidate > 0:
			outcome = Taken
			return nil
		case err != nil:
			return err
		case existing.Protocol != req.Protocol:
			return fmt.Errorf("%w: port %d is exposed as %s", ErrPortProtocolConflict, req.Port, existing.Protocol)
		}
		outcome, ep = Existing, existing
		return nil
	})
	if isForeignKeyViolation(err) {
		err = fmt.Errorf("sandbox: %w", ErrNotFound)
	}
	if err != nil {
		return 0, ExposedPort{}, fmt.Errorf("reserve host port %d for %s:%d: %w", candidate, req.SandboxID, req.Port, err)
	}
	if outcome == Taken {
		return Taken, ExposedPort{}, nil
	}
	return outcome, ep, nil
}

// ReserveHostPort exposes req on a host port from pool, walking the pool with
// TryReserveHostPort from an offset hashed from (sandbox, port), so a retry starts where
// the first call did and concurrent callers spread out. An HTTP request takes no host
// port and does not walk.
//
// It stops at the first Reserved (reused=false) or Existing (reused=true: another call
// created the row and owns its lifecycle) and walks on over Taken. When every candidate is
// Taken it returns a *PoolExhaustedError (errors.Is ErrPoolExhausted).
//
// bind, if non-nil, is called outside any transaction with each host port this call
// reserved, to claim it from the OS. If bind fails, the row is released (only if it is
// still this call's reservation); when the error wraps ErrHostPortUnavailable the walk
// goes on to the next candidate, otherwise the walk stops and returns bind's error.
// bind is not called for an Existing row.
func (s *Store) ReserveHostPort(ctx context.Context, req PortRequest, pool PortRange, bind func(hostPort int) error) (ep ExposedPort, reused bool, err error) {
	if req.Protocol == ProtocolHTTP {
		var out ReserveOutcome
		out, ep, err = s.TryReserveHostPort(ctx, req, 0)
		return ep, out == Existing, err
	}
	if !pool.valid() {
		return ExposedPort{}, false, invalidf("reserve host port: range [%d, %d]", pool.Lo, pool.Hi)
	}
	size := pool.Hi - pool.Lo + 1
	start := walkStart(req, size)
	for i := range size {
		candidate := pool.Lo + (start+i)%size
		var out ReserveOutcome
		out, ep, err = s.TryReserveHostPort(ctx, req, candidate)
		if err != nil {
			return ExposedPort{}, false, err
		}
		switch out {
		case Existing:
			return ep, true, nil
		case Taken:
			continue
		}
		if bind == nil {
			return ep, false, nil
		}
		berr := bind(candidate)
		if berr == nil {
			return ep, false, nil
		}
		// The undo must run even if ctx is what made bind fail.
		if _, err := s.ReleaseReservation(context.WithoutCancel(ctx), ep); err != nil {
			return ExposedPort{}, false, fmt.Errorf("bind host port %d: %w (undo: %w)", candidate, berr, err)
		}
		if !errors.Is(berr, ErrHostPortUnavailable) {
			return ExposedPort{}, false, fmt.Errorf("bind host port %d: %w", candidate, berr)
		}
	}
	return ExposedPort{}, false, &PoolExhaustedError{Pool: "host-port", Lo: pool.Lo, Hi: pool.Hi}
}

// walkStart is a stable offset in [0, size) for req.
func walkStart(req PortRequest, size int) int {
	h := fnv.New32a()
	h.Write([]byte(req.SandboxID))
	h.Write([]byte{0, byte(req.Port >> 8), byte(req.Port)})
	return int(h.Sum32() % uint32(size))
}

// ReleaseReservation deletes the exposure ep only if it is still the row ep's reservation
// created: the undo of a Reserved outcome. It reports whether a row was deleted; releasing
// twice, or after someone else replaced the row, deletes nothing.
func (s *Store) ReleaseReservation(ctx context.Context, ep ExposedPort) (bool, error) {
	n, err := s.exec(ctx, `DELETE FROM exposed_ports WHERE sandbox_id = ? AND port = ? AND reservation = ?`,
		ep.SandboxID, ep.Port, ep.Reservation)
	if err != nil {
		return false, fmt.Errorf("release port %s:%d: %w", ep.SandboxID, ep.Port, err)
	}
	return n > 0, nil
}

// DeleteExposedPort unexposes port of sandboxID. It is idempotent and reports whether a
// row was deleted.
func (s *Store) DeleteExposedPort(ctx context.Context, sandboxID string, port int) (bool, error) {
	n, err := s.exec(ctx, `DELETE FROM exposed_ports WHERE sandbox_id = ? AND port = ?`, sandboxID, port)
	if err != nil {
		return false, fmt.Errorf("delete port %s:%d: %w", sandboxID, port, err)
	}
	return n > 0, nil
}

// ListExposedPorts returns the exposures of sandboxID ordered by port.
func (s *Store) ListExposedPorts(ctx context.Context, sandboxID string) ([]ExposedPort, error) {
	ports, err := queryAll(ctx, s.reader, scanExposedPort, `SELECT `+exposedPortColumns+
		` FROM exposed_ports WHERE sandbox_id = ? ORDER BY port`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list ports of %s: %w", sandboxID, err)
	}
	return ports, nil
}

// ListAllExposedPorts returns every exposure ordered by (sandbox, port): the ingress
// router's state at start.
func (s *Store) ListAllExposedPorts(ctx context.Context) ([]ExposedPort, error) {
	ports, err := queryAll(ctx, s.reader, scanExposedPort, `SELECT `+exposedPortColumns+
		` FROM exposed_ports ORDER BY sandbox_id, port`)
	if err != nil {
		return nil, fmt.Errorf("list ports: %w", err)
	}
	return ports, nil
}

// exec runs one statement in a write transaction and returns the rows it affected.
func (s *Store) exec(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
