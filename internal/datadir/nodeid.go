package datadir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// NodeIDName is the file, in the data directory, that holds the node id.
const NodeIDName = "node-id"

// NodeIDPath is dataDir's node id file.
func NodeIDPath(dataDir string) string { return filepath.Join(dataDir, NodeIDName) }

// LoadOrCreateNodeID returns the node id kept in path, creating one at
// first start: the host name and a random suffix. Containers carry it as
// their sandboxd.node label; the reconciler only ever touches its own.
func LoadOrCreateNodeID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "node"
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:]) // never fails
	id := host + "-" + hex.EncodeToString(suffix[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", err
	}
	return id, os.Rename(tmp, path)
}
