package daemon

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/internal/cluster"
)

// Files of cluster mode in a node's data directory. Their presence is what
// makes a daemon a cluster node (docs/cluster.md); `sandboxd cluster
// init|join` writes them, `leave` removes them.
const (
	clusterFileName   = "cluster.json"
	clusterSecretName = "cluster.secret"
	// The embedded member's etcd identity (cluster.TLSFiles): the cluster
	// CA certificate, the node's certificate and key; the CA key only in
	// the data directory of the node that ran `cluster init` (it signs
	// joiners' certificates), never in etcd.
	clusterCAName      = "etcd-ca.crt"
	clusterCAKeyName   = "etcd-ca.key"
	clusterCertName    = "etcd-node.crt"
	clusterCertKeyName = "etcd-node.key"
	// clusterSecretBytes is the cluster secret's size: the key of the node
	// MAC and the root the recovery specs' sealing key is derived from.
	clusterSecretBytes = 32
)

// clusterFile is how a node reaches its cluster.
type clusterFile struct {
	// Endpoints are the etcd client URLs the node's client dials.
	Endpoints []string `json:"endpoints"`
	// Member is the embedded etcd member this node runs, if any (an
	// external etcd has none).
	Member *clusterMember `json:"member,omitempty"`
	// TLS names the node's etcd identity: the CA file it trusts, its
	// certificate and key. Relative paths are in the data directory
	// (the embedded member's files); an external etcd's are the paths
	// the operator gave (--etcd-cacert, --etcd-cert, --etcd-key).
	TLS *clusterTLS `json:"tls,omitempty"`
}

// clusterTLS is the paths of a node's etcd identity.
type clusterTLS struct {
	CACert string `json:"cacert"`
	Cert   string `json:"cert"`
	Key    string `json:"key"`
}

// files resolves t's paths against dataDir.
func (t clusterTLS) files(dataDir string) cluster.TLSFiles {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dataDir, p)
	}
	return cluster.TLSFiles{CA: abs(t.CACert), Cert: abs(t.Cert), Key: abs(t.Key)}
}

// embeddedTLS is the identity files of an embedded member, in the data
// directory.
var embeddedTLS = clusterTLS{CACert: clusterCAName, Cert: clusterCertName, Key: clusterCertKeyName}

// etcdTLS is the TLS configuration of dataDir's etcd clients (f's
// identity). A cluster file without one predates etcd TLS: the node
// refuses to reach etcd in clear.
func (f *clusterFile) etcdTLS(dataDir string) (*tls.Config, error) {
	if f.TLS == nil {
		return nil, fmt.Errorf("%s names no etcd TLS identity (made before etcd spoke TLS only): leave the cluster and init or join it again", clusterFileName)
	}
	return f.TLS.files(dataDir).ClientConfig()
}

// clusterMember is an embedded member's configuration. InitialCluster and
// State only matter at the member's first start; later starts read the
// member's own data directory.
type clusterMember struct {
	ClientURL      string `json:"client_url"`
	PeerURL        string `json:"peer_url"`
	InitialCluster string `json:"initial_cluster"`
	State          string `json:"state"` // "new" or "existing"
}

// loadClusterFile reads dataDir's cluster file: nil when the node is not in
// a cluster.
func loadClusterFile(dataDir string) (*clusterFile, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, clusterFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f clusterFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", clusterFileName, err)
	}
	if len(f.Endpoints) == 0 {
		return nil, fmt.Errorf("%s: no etcd endpoints", clusterFileName)
	}
	return &f, nil
}

// writeClusterFile writes dataDir's cluster file (0600), atomically.
func writeClusterFile(dataDir string, f clusterFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dataDir, clusterFileName), append(b, '\n'))
}

// loadClusterSecret reads the cluster secret (hex in dataDir's secret
// file).
func loadClusterSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(secret) < clusterSecretBytes {
		return nil, fmt.Errorf("%s: not a cluster secret (%d hex digits)", path, 2*clusterSecretBytes)
	}
	return secret, nil
}

// newClusterSecret writes a fresh cluster secret to path (0600), refusing
// to replace one.
func newClusterSecret(path string) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists: this data directory is in a cluster already", path)
	}
	var b [clusterSecretBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand contract)
	return writeAtomic(path, []byte(hex.EncodeToString(b[:])+"\n"))
}

// writeAtomic writes b to path (0600) through a temporary file and a
// rename, so a crash never leaves half a file.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
