// Package operator is the operator's commands of the sandboxd binary,
// which run beside (or instead of) a daemon on the same data directory:
//
//	sandboxd token create|list|revoke          API tokens, in the data directory's database
//	sandboxd cluster init|join|members|leave   cluster mode's files, and etcd membership
//
// They are not the daemon: internal/daemon wires and runs a node and
// imports nothing of this package, and this package imports nothing of
// the daemon (deps_test.go). What both read and write in the data
// directory (the node id, the cluster files) is internal/datadir's.
package operator
