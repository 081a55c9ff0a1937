package daemon

import (
	"crypto/tls"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/datadir"
)

// The data directory's cluster files are internal/datadir's (the operator's
// `sandboxd cluster` commands write them); these are the names the
// daemon's cluster wiring (cluster.go's openCluster) reads them by.

const clusterSecretName = datadir.ClusterSecretName

// clusterFile is a node's datadir.ClusterFile as openCluster reads it.
type clusterFile struct {
	datadir.ClusterFile
	TLS *clusterTLS
}

// clusterTLS is the paths of a node's etcd identity.
type clusterTLS struct{ datadir.ClusterTLS }

// files resolves t's paths against dataDir.
func (t clusterTLS) files(dataDir string) cluster.TLSFiles { return t.Files(dataDir) }

// etcdTLS is the TLS configuration of dataDir's etcd clients.
func (f *clusterFile) etcdTLS(dataDir string) (*tls.Config, error) {
	return f.ClusterFile.EtcdTLS(dataDir)
}

// loadClusterFile reads dataDir's cluster file: nil when the node is not
// in a cluster.
func loadClusterFile(dataDir string) (*clusterFile, error) {
	f, err := datadir.LoadClusterFile(dataDir)
	if err != nil || f == nil {
		return nil, err
	}
	out := &clusterFile{ClusterFile: *f}
	if f.TLS != nil {
		out.TLS = &clusterTLS{*f.TLS}
	}
	return out, nil
}

func loadClusterSecret(path string) ([]byte, error) { return datadir.LoadClusterSecret(path) }

func loadClusterCA(dataDir string) (*cluster.CA, error) { return datadir.LoadClusterCA(dataDir) }
