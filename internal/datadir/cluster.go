package datadir

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
	ClusterFileName   = "cluster.json"
	ClusterSecretName = "cluster.secret"
	// The embedded member's etcd identity (cluster.TLSFiles): the cluster
	// CA certificate, the node's certificate and key; the CA key only in
	// the data directory of the node that ran `cluster init` (it signs
	// joiners' certificates), never in etcd.
	ClusterCAName      = "etcd-ca.crt"
	ClusterCAKeyName   = "etcd-ca.key"
	ClusterCertName    = "etcd-node.crt"
	ClusterCertKeyName = "etcd-node.key"
	// ClusterSecretBytes is the cluster secret's size: the key of the node
	// MAC and the root the recovery specs' sealing key is derived from.
	ClusterSecretBytes = 32
)

// ClusterFile is how a node reaches its cluster.
type ClusterFile struct {
	// Endpoints are the etcd client URLs the node's client dials.
	Endpoints []string `json:"endpoints"`
	// Member is the embedded etcd member this node runs, if any (an
	// external etcd has none).
	Member *ClusterMember `json:"member,omitempty"`
	// TLS names the node's etcd identity: the CA file it trusts, its
	// certificate and key. Relative paths are in the data directory
	// (the embedded member's files); an external etcd's are the paths
	// the operator gave (--etcd-cacert, --etcd-cert, --etcd-key).
	TLS *ClusterTLS `json:"tls,omitempty"`
}

// ClusterTLS is the paths of a node's etcd identity.
type ClusterTLS struct {
	CACert string `json:"cacert"`
	Cert   string `json:"cert"`
	Key    string `json:"key"`
}

// Files resolves t's paths against dataDir.
func (t ClusterTLS) Files(dataDir string) cluster.TLSFiles {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dataDir, p)
	}
	return cluster.TLSFiles{CA: abs(t.CACert), Cert: abs(t.Cert), Key: abs(t.Key)}
}

// EmbeddedTLS is the identity files of an embedded member, in the data
// directory.
func EmbeddedTLS() ClusterTLS {
	return ClusterTLS{CACert: ClusterCAName, Cert: ClusterCertName, Key: ClusterCertKeyName}
}

// EtcdTLS is the TLS configuration of dataDir's etcd clients (f's
// identity). A cluster file without one predates etcd TLS: the node
// refuses to reach etcd in clear.
func (f *ClusterFile) EtcdTLS(dataDir string) (*tls.Config, error) {
	if f.TLS == nil {
		return nil, fmt.Errorf("%s names no etcd TLS identity (made before etcd spoke TLS only): leave the cluster and init or join it again", ClusterFileName)
	}
	return f.TLS.Files(dataDir).ClientConfig()
}

// ClusterMember is an embedded member's configuration. InitialCluster and
// State only matter at the member's first start; later starts read the
// member's own data directory.
type ClusterMember struct {
	ClientURL      string `json:"client_url"`
	PeerURL        string `json:"peer_url"`
	InitialCluster string `json:"initial_cluster"`
	State          string `json:"state"` // "new" or "existing"
}

// LoadClusterFile reads dataDir's cluster file: nil when the node is not in
// a cluster.
func LoadClusterFile(dataDir string) (*ClusterFile, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, ClusterFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f ClusterFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", ClusterFileName, err)
	}
	if len(f.Endpoints) == 0 {
		return nil, fmt.Errorf("%s: no etcd endpoints", ClusterFileName)
	}
	return &f, nil
}

// WriteClusterFile writes dataDir's cluster file (0600), atomically.
func WriteClusterFile(dataDir string, f ClusterFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(filepath.Join(dataDir, ClusterFileName), append(b, '\n'))
}

// LoadClusterSecret reads the cluster secret (hex in dataDir's secret
// file).
func LoadClusterSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(secret) < ClusterSecretBytes {
		return nil, fmt.Errorf("%s: not a cluster secret (%d hex digits)", path, 2*ClusterSecretBytes)
	}
	return secret, nil
}

// NewClusterSecret writes a fresh cluster secret to path (0600), refusing
// to replace one.
func NewClusterSecret(path string) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%s exists: this data directory is in a cluster already", path)
	}
	var b [ClusterSecretBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand contract)
	return WriteAtomic(path, []byte(hex.EncodeToString(b[:])+"\n"))
}

// WriteAtomic writes b to path (0600) through a temporary file and a
// rename, so a crash never leaves half a file.
func WriteAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// WriteFiles writes each file of files in dir (0600, atomically).
func WriteFiles(dir string, files map[string][]byte) error {
	for name, b := range files {
		if err := WriteAtomic(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return nil
}

// LoadClusterCA reads the cluster CA from dataDir when this node holds its
// key (the node that ran `cluster init`): nil, nil when it does not.
func LoadClusterCA(dataDir string) (*cluster.CA, error) {
	keyPEM, err := os.ReadFile(filepath.Join(dataDir, ClusterCAKeyName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	certPEM, err := os.ReadFile(filepath.Join(dataDir, ClusterCAName))
	if err != nil {
		return nil, err
	}
	return cluster.LoadCA(certPEM, keyPEM)
}
