// Package ingress is sandboxd's in-process router: the table of routable
// sandboxes behind preview URLs (<port>-<sandbox-id>.<domain>), and later
// the TCP and TLS listeners of exposed ports.
//
// Route changes are map updates under a mutex: installing a route costs
// the same with one sandbox or ten thousand, and nothing is reloaded.
package ingress
