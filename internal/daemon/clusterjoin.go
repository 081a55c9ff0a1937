package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/cluster"
	"github.com/sandboxd/sandboxd/internal/naming"
)

// The join hand-over's two ends (internal/cluster/join.go has the
// protocol and why it is safe): serveJoin signs a joining node's etcd
// certificate on the node that holds the cluster CA key;
// operator.RequestCertificate is `sandboxd cluster join` asking for it.

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
