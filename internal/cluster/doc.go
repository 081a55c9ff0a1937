// Package cluster is the etcd side of cluster mode (docs/cluster.md):
// an embedded etcd member, the membership calls the CLI makes, a node's
// lease and its watch-fed directory, and the transactions on the keys
// that must agree across nodes.
//
// # What lives in etcd, and why
//
// Everything under /sandboxd/v1/, values JSON:
//
//	nodes/<id>                  a live node: API URL, headroom; under the node's lease
//	placements/<id>             where a sandbox lives and how to recreate it elsewhere
//	names/<owner>/<name>        the sandbox a name names (unique per owner, cluster-wide)
//	hostnames/<host>            the sandbox a custom hostname routes to
//	idem/<scope>/<owner>/<hash> the node that took an idempotency key's first attempt; leased
//	tokens/<id>                 an API token's record (its hash, never the token)
//	tokenhash/<sha256 hex>      the same record, found by hash in one read
//
// Only what another node must know lives here: which node owns a sandbox,
// the names and hostnames that are unique across nodes, the tokens that
// work on every node, and which nodes are alive. What describes one host's
// resources (rows, host ports, containers) stays in that node's SQLite.
// Owners and names are path-escaped in keys; ids, hostnames and scopes may
// not contain "/".
//
// # etcd is closed
//
// Nobody reaches etcd without a certificate of the cluster's CA (pki.go):
// an embedded member serves client and peer URLs over TLS only and
// requires a client certificate the CA signed on both; every client here
// (Open, AddMember, RemoveMember, ListMembers, ListNodes) takes the node's
// identity as a *tls.Config and refuses to dial without one. A joining
// node gets its certificate under the cluster secret (join.go). No value
// in etcd is a credential: token hashes of 256-bit secrets, recovery
// specs sealed under a key derived from the cluster secret, which is
// never written there (docs/cluster.md, "What etcd holds").
//
// # Uniqueness
//
// Every uniqueness rule is one transaction that writes a key only if it
// does not exist, If(CreateRevision(key) == 0), never a read followed by a
// write: the code proposes, etcd rejects, the code observes (the Else
// branch reads what holds the key, so that a retry of a claim that
// succeeded is told apart from a loser). Changes to an existing key
// compare its ModRevision with the one read (UpdatePlacement, TakeOver:
// of racing callers exactly one wins), and deletes are fenced on the value
// still naming the caller's sandbox (ReleasePlacement, ReleaseHostname).
//
// # Failure modes
//
// Every etcd call is bounded by Config.OpTimeout (2 s). A call that does
// not finish in time, or finds no quorum or no leader, fails with
// ErrUnavailable: retryable, answered 503. A write that fails so may still
// have been applied; its error says "outcome unknown". Every write here is
// idempotent, so the caller retries it or undoes it (ReleasePlacement and
// ReleaseHostname are fenced, so an undo never removes another sandbox's
// key). A request etcd refuses on its merits (too large) is
// ErrInvalidArgument, not ErrUnavailable.
//
// Reads of the directory (Nodes, Placement, PlacementsOf, HostnameTarget)
// make no etcd call: they answer from what the watches last delivered,
// also while the cluster has no quorum. LookupName, Healthy and the token
// lookups are linearizable reads and fail with ErrUnavailable then.
//
// # Membership
//
// A node's nodes/<id> key lives under a lease (Config.LeaseTTL, 5 s) that
// the client keeps alive. Close revokes it, so other nodes see the node
// leave at once; a node that crashes or is cut off departs when the lease
// expires. Either way every other node's directory drops it and Departed
// delivers its id (the start of failover). A node whose keepalive ended
// while it still runs grants a new lease and puts its key again.
package cluster
