package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/naming"
)

// The join hand-over's two ends (internal/cluster/join.go has the
// protocol and why it is safe): serveJoin signs a joining node's etcd
// certificate on the node that holds the cluster CA key; requestCertificate
// is `sandboxd cluster join` asking for it.

// loadClusterCA reads the cluster CA from dataDir when this node holds its
// key (the node that ran `cluster init`): nil, nil when it does not.
func loadClusterCA(dataDir string) (*cluster.CA, error) {
	keyPEM, err := os.ReadFile(filepath.Join(dataDir, clusterCAKeyName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	certPEM, err := os.ReadFile(filepath.Join(dataDir, clusterCAName))
	if err != nil {
		return nil, err
	}
	return cluster.LoadCA(certPEM, keyPEM)
}

// serveJoin answers POST /v1/cluster/join: a JoinRequest whose body the
// cluster secret authenticates (cluster.JoinMAC, within
// cluster.MaxJoinSkew of this node's clock) gets the joiner's etcd
// certificate, signed by the cluster CA, the CA certificate and this
// node's etcd endpoints, authenticated by cluster.ResponseMAC. Anything
// else gets an error and nothing signed: 403 for a MAC that does not
// verify or a stale time, 400 for a malformed request, 409 on a node that
// holds no CA key. It needs no API token: the secret is the credential.
// Signing changes no state, so a retry is harmless.
func (c *clusterNode) serveJoin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "invalid_argument", "POST only", false)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cluster.MaxJoinBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", "the join request is unreadable or larger than 16 KiB", false)
		return
	}
	mac := r.Header.Get(cluster.HeaderJoinAuth)
	want, err := cluster.JoinMAC(c.signer.Secret, body)
	if err != nil || !cluster.VerifyMAC(mac, want) {
		c.logger.Warn("cluster join refused: the MAC does not verify (wrong cluster secret?)", "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, "permission_denied", "the join request is not authenticated by this cluster's secret", false)
		return
	}
	var req cluster.JoinRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", "the join request is not JSON", false)
		return
	}
	if !cluster.CheckJoinTime(req.Time, time.Now()) {
		writeError(w, http.StatusForbidden, "permission_denied", "the join request's time is more than a minute off this node's clock (a replay, or a clock to fix)", false)
		return
	}
	if !naming.ValidLabel(req.Node) {
		writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("node id %q is not a DNS label", req.Node), false)
		return
	}
	for _, h := range req.Hosts {
		if net.ParseIP(h) == nil && !naming.ValidHostname(h) {
			writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("host %q is neither an IP address nor a host name", h), false)
			return
		}
	}
	if c.ca == nil {
		writeError(w, http.StatusConflict, "no_cluster_ca", fmt.Sprintf("node %s holds no cluster CA key: join through the node that ran `sandboxd cluster init`", c.self), false)
		return
	}
	cert, err := c.ca.SignNode([]byte(req.CSR), req.Node, req.Hosts, time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", err.Error(), false)
		return
	}
	out, err := json.Marshal(cluster.JoinResponse{CA: string(c.ca.CertPEM()), Cert: string(cert), Endpoints: c.etcdEndpoints})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "encode the answer", false)
		return
	}
	respMAC, err := cluster.ResponseMAC(c.signer.Secret, mac, out)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "sign the answer", false)
		return
	}
	c.logger.Info("signed an etcd certificate for a joining node", "joiner", req.Node, "hosts", strings.Join(req.Hosts, ","), "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(cluster.HeaderJoinAuth, respMAC)
	w.Write(out)
}

// requestCertificate is the joiner's side: it makes this node's etcd key,
// asks the node at apiURL to sign it under the cluster secret, checks the
// answer's MAC and that the certificate is for its key and verifies under
// the CA it got, then writes the CA certificate, its certificate and key
// into dataDir. It returns the cluster's etcd endpoints. The secret never
// leaves this process: only MACs travel.
func requestCertificate(ctx context.Context, hc *http.Client, apiURL string, secret []byte, node string, hosts []string, dataDir string) ([]string, error) {
	key, keyPEM, err := cluster.NewNodeKey()
	if err != nil {
		return nil, err
	}
	csr, err := cluster.NodeCSR(key, node)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(cluster.JoinRequest{Node: node, Hosts: hosts, CSR: string(csr), Time: time.Now().Unix()})
	if err != nil {
		return nil, err
	}
	mac, err := cluster.JoinMAC(secret, body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(apiURL, "/")+cluster.JoinPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(cluster.HeaderJoinAuth, mac)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask %s for an etcd certificate: %w", apiURL, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("ask %s for an etcd certificate: %w", apiURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ask %s for an etcd certificate: %s: %s", apiURL, resp.Status, bytes.TrimSpace(out))
	}
	want, err := cluster.ResponseMAC(secret, mac, out)
	if err != nil || !cluster.VerifyMAC(resp.Header.Get(cluster.HeaderJoinAuth), want) {
		return nil, fmt.Errorf("ask %s for an etcd certificate: the answer is not authenticated by the cluster secret (is it a node of this cluster?)", apiURL)
	}
	var jr cluster.JoinResponse
	if err := json.Unmarshal(out, &jr); err != nil {
		return nil, fmt.Errorf("ask %s for an etcd certificate: %w", apiURL, err)
	}
	pair, err := tls.X509KeyPair([]byte(jr.Cert), keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the certificate %s signed is not for this node's key: %w", apiURL, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(jr.CA)) {
		return nil, fmt.Errorf("%s sent no CA certificate", apiURL)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("the certificate %s signed does not verify under its CA: %w", apiURL, err)
	}
	if len(jr.Endpoints) == 0 {
		return nil, fmt.Errorf("%s named no etcd endpoints", apiURL)
	}
	if err := writeFiles(dataDir, map[string][]byte{clusterCAName: []byte(jr.CA), clusterCertName: []byte(jr.Cert), clusterCertKeyName: keyPEM}); err != nil {
		return nil, err
	}
	return jr.Endpoints, nil
}
