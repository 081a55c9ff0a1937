// Package datadir reads and writes the files of a node's data directory
// that both the daemon and the operator's commands (internal/operator:
// `sandboxd token`, `sandboxd cluster`) use: the node id, and the files of
// cluster mode (cluster.json, the cluster secret, the etcd identity and,
// on the node that ran `cluster init`, the cluster CA's key). Every file
// is written 0600, through a temporary file and a rename, so a crash
// never leaves half a file. The database and the daemon's own keys are
// not here: only the daemon opens those (internal/store, internal/daemon).
package datadir
