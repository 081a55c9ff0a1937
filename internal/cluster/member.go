package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
)

const (
	// memberReadyTimeout bounds StartMember's wait for the member to serve:
	// a joining member must reach the others and catch up first.
	memberReadyTimeout = 60 * time.Second
	// clusterToken keeps members of another etcd cluster (not sandboxd's)
	// from joining ours by mistake when peer URLs are reused.
	clusterToken = "sandboxd"
	// adminDialTimeout bounds dialing the endpoints in AddMember,
	// RemoveMember and ListMembers (the CLI's calls).
	adminDialTimeout = 5 * time.Second
)

// MemberConfig configures an embedded etcd member.
type MemberConfig struct {
	Name           string // the node id
	DataDir        string // the member's data directory (e.g. <data-dir>/etcd)
	ClientURL      string // e.g. https://10.0.0.1:23790
	PeerURL        string // e.g. https://10.0.0.1:23800
	InitialCluster string // "name=peerURL,name2=peerURL2"; empty: Name=PeerURL
	State          string // "new" or "existing"
	// TLS is the member's identity (see pki.go): its certificate serves
	// both listeners and is its client certificate toward other members;
	// both listeners require a client certificate the CA signed. Required:
	// a member never serves in clear.
	TLS TLSFiles
}

// Member is an embedded etcd member running in this process.
type Member struct {
	etcd      *embed.Etcd
	clientURL string
	closeOnce sync.Once
	quiet     *atomic.Bool // silences etcd's log while it closes
}

// StartMember starts an embedded etcd member and returns once it serves
// clients: for State "new", once the initial cluster has elected a leader;
// for "existing", once it has joined (see [AddMember]) and caught up. It
// waits at most 60 s (or until ctx is done), then closes the member and
// fails. A data directory that already holds a member restarts that member
// (InitialCluster and State are then ignored by etcd). etcd's own log goes
// to logger at warning level and above.
//
// Both URLs must be https: the client and the peer listener speak TLS
// only and refuse a connection without a client certificate signed by
// cfg.TLS.CA (etcd's ClientCertAuth and PeerClientCertAuth).
func StartMember(ctx context.Context, cfg MemberConfig, logger *slog.Logger) (*Member, error) {
	if cfg.Name == "" || cfg.DataDir == "" {
		return nil, fmt.Errorf("start etcd member: %w: name and data dir are required", ErrInvalidArgument)
	}
	clientURL, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("start etcd member: client url: %w: %w", ErrInvalidArgument, err)
	}
	peerURL, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("start etcd member: peer url: %w: %w", ErrInvalidArgument, err)
	}
	if clientURL.Scheme != "https" || peerURL.Scheme != "https" {
		return nil, fmt.Errorf("start etcd member: %w: client and peer URLs must be https (%s, %s)", ErrInvalidArgument, cfg.ClientURL, cfg.PeerURL)
	}
	if cfg.TLS.CA == "" || cfg.TLS.Cert == "" || cfg.TLS.Key == "" {
		return nil, fmt.Errorf("start etcd member: %w: a CA, a certificate and a key are required", ErrInvalidArgument)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "etcd", "member", cfg.Name)

	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	ec.InitialCluster = cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = cfg.Name + "=" + cfg.PeerURL
	}
	tlsInfo := transport.TLSInfo{
		CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key, TrustedCAFile: cfg.TLS.CA,
		ClientCertAuth: true,
	}
	ec.ClientTLSInfo = tlsInfo
	ec.PeerTLSInfo = tlsInfo
	ec.InitialClusterToken = clusterToken
	ec.ClusterState = cfg.State
	if ec.ClusterState == "" {
		ec.ClusterState = embed.ClusterStateFlagNew
	}
	// Compact history hourly: watches restart from a fresh Get when their
	// revision is compacted, and nothing else reads old revisions.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"
	ec.Logger = "zap"
	ec.LogLevel = "warn"
	quiet := new(atomic.Bool)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapToSlog(logger, zapcore.WarnLevel, quiet))

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd member %s: %w", cfg.Name, err)
	}
	timer := time.NewTimer(memberReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return &Member{etcd: e, clientURL: cfg.ClientURL, quiet: quiet}, nil
	case err := <-e.Err():
		quiet.Store(true)
		e.Close()
		return nil, fmt.Errorf("start etcd member %s: %w", cfg.Name, err)
	case <-timer.C:
		quiet.Store(true)
		e.Close()
		return nil, fmt.Errorf("start etcd member %s: not ready after %s: %w", cfg.Name, memberReadyTimeout, ErrUnavailable)
	case <-ctx.Done():
		quiet.Store(true)
		e.Close()
		return nil, fmt.Errorf("start etcd member %s: %w", cfg.Name, ctx.Err())
	}
}

// ClientURL is the URL the member serves clients on.
func (m *Member) ClientURL() string { return m.clientURL }

// Close stops the member and waits until it has stopped. The member leaves
// no state behind but its data directory; it stays in the cluster's member
// list until [RemoveMember] removes it. It is idempotent.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		m.quiet.Store(true)
		m.etcd.Close()
	})
	return nil
}

// MemberInfo describes one member of the etcd cluster.
type MemberInfo struct {
	Name      string // empty for a member added but not yet started
	PeerURL   string
	ClientURL string // empty for a member added but not yet started
	ID        uint64
	Leader    bool
}

// adminClient dials endpoints for a membership call, with tlsCfg (the
// node's identity; required).
func adminClient(endpoints []string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrInvalidArgument)
	}
	if err := requireTLS(tlsCfg); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsCfg,
		DialTimeout: adminDialTimeout,
		Logger:      zapToSlog(nil, zapcore.ErrorLevel, nil),
	})
	if err != nil {
		return nil, unavailable("dial "+strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// withAdminTimeout bounds a membership call that ctx does not bound.
func withAdminTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, 2*adminDialTimeout)
}

// AddMember adds a member named name with peerURL to the cluster that
// endpoints reach, and returns the InitialCluster ("name=peer,…") the new
// member must start with (State "existing"). It is idempotent: when a
// member with peerURL already exists (a retry, or a member added but never
// started) it adds nothing and returns the same list. etcd refuses to add a
// member while the cluster is unhealthy or another added member has not
// started; that error is returned (retry after starting it).
func AddMember(ctx context.Context, endpoints []string, tlsCfg *tls.Config, name, peerURL string) (initialCluster string, err error) {
	if name == "" || peerURL == "" {
		return "", fmt.Errorf("add member: %w: name and peer url are required", ErrInvalidArgument)
	}
	cli, err := adminClient(endpoints, tlsCfg)
	if err != nil {
		return "", fmt.Errorf("add member %s: %w", name, err)
	}
	defer cli.Close()
	ctx, cancel := withAdminTimeout(ctx)
	defer cancel()

	// A serializable list: once a member is added and not yet started, a
	// two-member cluster has no quorum until it starts, and a retry must
	// still find it.
	list, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return "", unavailable("add member "+name+": list members", err)
	}
	members := list.Members
	var newID uint64
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peerURL) {
			if m.Name != "" && m.Name != name {
				return "", fmt.Errorf("add member %s: %w: peer url %s belongs to member %s", name, ErrConflict, peerURL, m.Name)
			}
			newID = m.ID
		}
	}
	if newID == 0 {
		resp, err := cli.MemberAdd(ctx, []string{peerURL})
		if err != nil {
			return "", unknownOutcome("add member "+name, err)
		}
		newID, members = resp.Member.ID, resp.Members
	}
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == newID {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ","), nil
}

// RemoveMember removes the member named name from the cluster that
// endpoints reach. An unknown name is ErrNotFound. etcd refuses to remove a
// running member until the others have been connected to it for 5 s; it
// retries that refusal until ctx (or 10 s) runs out. A removed member that
// still runs stops itself; close it too.
func RemoveMember(ctx context.Context, endpoints []string, tlsCfg *tls.Config, name string) error {
	cli, err := adminClient(endpoints, tlsCfg)
	if err != nil {
		return fmt.Errorf("remove member %s: %w", name, err)
	}
	defer cli.Close()
	ctx, cancel := withAdminTimeout(ctx)
	defer cancel()

	list, err := cli.MemberList(ctx)
	if err != nil {
		return unavailable("remove member "+name+": list members", err)
	}
	i := slices.IndexFunc(list.Members, func(m *etcdserverpb.Member) bool { return m.Name == name })
	if i < 0 {
		return fmt.Errorf("remove member %s: %w", name, ErrNotFound)
	}
	for {
		_, err := cli.MemberRemove(ctx, list.Members[i].ID)
		if err == nil || errors.Is(err, rpctypes.ErrMemberNotFound) {
			return nil // a retry of a removal that went through
		}
		// etcd refuses to remove a voting member until the others have
		// been connected for a while (5 s): wait that out within ctx.
		if !errors.Is(err, rpctypes.ErrUnhealthy) {
			return unknownOutcome("remove member "+name, err)
		}
		select {
		case <-ctx.Done():
			return unknownOutcome("remove member "+name, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ListMembers returns the members of the cluster that endpoints reach,
// sorted by name, marking the leader, as the first member that answers
// sees them (it answers without quorum too; then no member leads).
func ListMembers(ctx context.Context, endpoints []string, tlsCfg *tls.Config) ([]MemberInfo, error) {
	cli, err := adminClient(endpoints, tlsCfg)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	defer cli.Close()
	ctx, cancel := withAdminTimeout(ctx)
	defer cancel()

	// Serializable: the list answers from the first member that
	// answers, also without quorum (when it matters most to see it).
	list, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, unavailable("list members", err)
	}
	var leader uint64
	var statusErr error
	for _, ep := range endpoints {
		st, err := cli.Status(ctx, ep)
		if err == nil {
			leader = st.Leader
			break
		}
		statusErr = errors.Join(statusErr, err)
	}
	if leader == 0 && statusErr != nil {
		return nil, unavailable("list members: status", statusErr)
	}
	out := make([]MemberInfo, 0, len(list.Members))
	for _, m := range list.Members {
		mi := MemberInfo{Name: m.Name, ID: m.ID, Leader: m.ID == leader}
		if len(m.PeerURLs) > 0 {
			mi.PeerURL = m.PeerURLs[0]
		}
		if len(m.ClientURLs) > 0 {
			mi.ClientURL = m.ClientURLs[0]
		}
		out = append(out, mi)
	}
	slices.SortFunc(out, func(a, b MemberInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
