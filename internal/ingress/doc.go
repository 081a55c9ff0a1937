// Package ingress is sandboxd's in-process router: it carries traffic from
// outside to ports inside sandboxes, by preview host and custom domain
// over HTTP, by host port over TCP, and by SNI over TLS.
//
// # Routes
//
// The route table (Table) holds which sandboxes are installed, which of
// their ports are exposed (number, protocol http|tcp|tls, public flag),
// and which custom hostnames point at which sandbox port. Every change is
// a map update under one lock: installing a route costs the same with one
// sandbox or ten thousand, and nothing is reloaded. Every change is
// idempotent, and removals never undo another sandbox's routes. The store
// is the source of truth; the service replays it into the router at
// start (Install, then ExposePort, ListenTCP and BindDomain).
//
// # The path to a port
//
// Traffic never takes a network path to a sandbox: the injected Dialer
// (the service's, over the agent tunnel) opens a raw TCP stream to
// 127.0.0.1:<port> inside the sandbox. Router tracks every such
// connection by sandbox and port, so UnexposePort and Remove cut live
// traffic too (pooled idle HTTP connections and WebSockets included), and
// a dial that races them is closed rather than leaked.
//
// # HTTP
//
// Wrap puts the router in front of the daemon's API mux on the same
// listener. A request whose Host (any listener port stripped) is
// "<port>-<sandbox-id>.<domain>" or a bound custom domain goes to the
// sandbox port through an httputil.ReverseProxy whose transport dials
// with the Dialer; its idle pool is per (sandbox, port). Bodies stream
// (FlushInterval -1) and Upgrade requests become spliced connections.
// Unknown or unexposed targets are 404, private ports without
// authorization 401, both with the API's JSON error shape. The caller's
// credentials never reach the sandbox (auth.StripCredentials; the app's
// own Authorization passes).
//
// The router holds only custom domains whose owner proved control of them
// (the service binds a domain here once it is verified; a pending claim
// never reaches the table), so a Host the table knows is always one its
// owner may route.
//
// # L4: TCP and TLS
//
// ListenTCP binds a host port chosen by the service's allocator and
// splices every connection to the sandbox port, half-close aware. A host
// port that another process holds fails with ErrHostPortInUse (which is
// also syscall.EADDRINUSE) so the allocator can release the candidate and
// walk on. One SNI listener (Options.TLSAddr) serves every port exposed
// as tls: it reads the ClientHello without answering it, routes its
// server name like a preview host, and replays the bytes it read to the
// sandbox port; TLS ends inside the sandbox.
//
// In cluster mode (Options.Remote and Options.Peers) a server name this
// node does not route is asked of Remote, which names the SNI listener of
// the node that owns the sandbox; the connection goes there, the
// ClientHello behind one preamble line that Peers signs with the cluster
// secret. A connection that starts with a byte other than 0x16 (a
// handshake record's) must start with such a line, at most MaxPreambleLen
// bytes read under the hello deadline, which must verify for the
// ClientHello's server name; it was forwarded, so it is routed here or
// closed, never forwarded again. Anything else is closed, and without
// Peers every preamble is.
//
// The L4 machinery starts lazily, on the first TCP or TLS exposure, with
// the lazy latch: an atomic fast path, a mutex slow
// path with a double check, latched only on success. A failed start fails
// that call (ErrL4Unavailable) and the next call tries again; the daemon
// never fails for it and no request pays for it after the first success.
//
// # Certificates
//
// HTTPS for preview hosts terminates in the daemon, on a listener the
// daemon owns, with the same Wrap handler: NewACME (certmagic, on-demand
// issuance gated by Router.Routable) in production, NewLocalCA (a CA made
// in memory) in local mode and tests. Neither is needed for the SNI
// listener, which never terminates TLS. A handshake comes before any
// credential, so the local CA's issuance is bounded (names the caller's
// check admits, single flight per name, signing slots, rates per sandbox,
// per owner and for the CA, an LRU cache where one owner holds at most a
// quarter): see LocalCA. The check is the daemon's: routes, API hosts,
// the E2B facade's ports that listen (ServesHost probes them) and, in a
// cluster, preview hosts of sandboxes on other nodes; it names each
// name's owner, so that one tenant's names neither empty the budget nor
// evict the leaves of another's.
package ingress
