// Package forward is the HTTP side of cluster mode (docs/cluster.md,
// "Placement and forwarding"): it decides, before the API edges run,
// whether a request is served by this node or by another, and carries it
// there. It sees the cluster only through Locator; it imports no etcd.
//
// # What is forwarded
//
// RefOf reads what a request names from its Host and from what the API
// edges registered (Options.Route: the sandbox a request's path or
// headers name, and whether it is a create; package internal/api/router),
// in the order the daemon's own handler routes one listener (preview
// host, custom domain, then the edges). This package knows no edge's
// URLs or bodies. Middleware then:
//
//   - forwards a call that names a sandbox (by id or name, by preview
//     host) or a custom domain to the node Locator.Locate names;
//   - serves a create here, its body kept as the edge reads it: the edge
//     decodes it into the service's typed request, the service places it
//     (volumes pin it, template holders are preferred, a key binds its
//     retries to one node), and when it belongs elsewhere the edge hands
//     it back to Forward, which sends it whole, signed, to that node;
//   - serves everything else here: lists, tokens, health, metrics, and
//     whatever the Locator says is this node's, unknown or unknowable.
//
// Forwarding is a reverse proxy: the method, path, query, body (streamed,
// never buffered or read here), Host header and the caller's credentials
// travel as they came; responses stream back flushed write by write; a
// WebSocket (any Upgrade) is spliced through. The owner authenticates the
// caller like any node would (tokens are cluster-wide), so forwarding
// grants nothing the caller's own credentials do not. A node that cannot
// be reached answers 503 (Options.OnError) within the dial timeout (5 s),
// never a hang; once connected there is no overall deadline, since exec
// streams and WebSockets last as long as the caller keeps them.
//
// A list is served here; the service asks the other nodes for their pages
// itself (docs/cluster.md, "Listings are the cluster's"). An E2B signed
// /files URL names no sandbox: the facade finds it and forwards it through
// this middleware with the sandbox named in E2b-Sandbox-Id.
//
// # The node MAC
//
// A forwarded request carries X-Sandboxd-Node (the sender's id) and
// X-Sandboxd-Node-Auth, "t=<unix seconds>,mac=<hex>", where mac is
// HMAC-SHA256 keyed by the cluster secret over
// "<node>|<unix seconds>|<method>|<request URI>". The verifier refuses a
// timestamp more than MaxSkew (60 s) off its clock, a MAC naming itself
// (a node never forwards to itself), and anything malformed; the MAC is
// compared in constant time. The secret is the cluster's, never a user's
// token.
//
// The MAC does not cover the body, the Host or any other header. That is
// acceptable because of what a valid MAC grants: only that the request is
// served here rather than forwarded again, and that the node headers are
// believed. On a forwarded call it grants no access to any sandbox: the
// caller's own credentials, which travel with the request, are checked by
// the owner as on any node. Someone who captured a signed request could,
// within its minute, replay its method and URI with another body; but
// they then also hold whatever credentials it carried, which work on any
// node without a MAC, so the replay gains nothing but not being
// forwarded. The daemon's own node-to-node calls (lists, pools, event
// streams under /v1/cluster/peer/) carry no user credential and answer
// every tenant's data on the MAC alone: their questions travel in the URI
// with a nonce, and the daemon refuses a MAC it accepted before. Covering the body would mean
// buffering uploads and streams (gigabytes, or unbounded for a Connect
// stream) before the first byte goes out. Node-to-node links should still
// run over TLS (an https Target URL), which protects bodies and
// credentials alike.
//
// # The TLS preamble
//
// A TLS exposure is served by the SNI listener, which never terminates
// TLS, so a ClientHello for another node's sandbox carries no header: the
// forwarding node writes one line before replaying it to the owner's SNI
// listener (SignTLS), "SANDBOXD-PEER <node> <unix seconds> <hex mac>\n",
// where mac is HMAC-SHA256 keyed by the cluster secret over
// "tls\x00<node>|<unix seconds>|<server name>". The NUL byte keeps it
// apart from a request's MAC input, which starts with a node id from a
// header. VerifyTLS applies Verify's rules (MaxSkew, not this node,
// constant-time compare) to a line of at most MaxPreambleLen bytes and the
// server name of the ClientHello that follows. A valid preamble grants
// only that the connection is not forwarded again: the sandbox's TLS
// server sees the client's own handshake, as on any node, and a replayed
// line gains nothing a client connecting to the owner directly does not
// have.
//
// # The loop guard
//
// A request with a valid MAC is never forwarded again: it goes straight
// to the edges, marked (FromNode) so that a create it carries is not
// placed again, so a node that does not own what it was sent answers from
// its own view (404, or 503 while a placement moves), and two nodes with
// stale views cannot bounce a request between them. A TLS connection
// with a valid preamble is likewise routed by the receiving node's own
// table or closed. Every request without
// a valid MAC has all X-Sandboxd-Node* headers stripped before anything
// reads them, so no client can pose as a node, and the forwarding node
// strips them again before signing its own.
package forward
