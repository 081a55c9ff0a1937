package cluster

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sandboxd/sandboxd/internal/auth"
)

// TokenStore keeps API tokens in etcd, so that a token made on one node
// works on every node: tokens/<id> and tokenhash/<sha256 hex> both hold
// the token's record (the second so that authentication is one read), and
// are written together in one transaction. Only the hash of a token is
// stored. It implements [auth.TokenStore] and [auth.TokenLookup].
type TokenStore struct {
	n   *Node
	now func() time.Time
}

var (
	_ auth.TokenStore  = (*TokenStore)(nil)
	_ auth.TokenLookup = (*TokenStore)(nil)
)

// NewTokenStore returns the token store of the cluster n belongs to.
func NewTokenStore(n *Node) *TokenStore { return &TokenStore{n: n, now: time.Now} }

// tokenRecord is the value of tokens/<id> and tokenhash/<hex>.
type tokenRecord struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	Owner     string     `json:"owner"`
	Quota     auth.Quota `json:"quota"`
	SHA256    string     `json:"sha256"` // hex of the whole token's hash
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt time.Time  `json:"revoked_at,omitzero"`
}

func (r tokenRecord) record() auth.Record {
	return auth.Record{
		Token:     auth.Token{ID: r.ID, Role: auth.Role(r.Role), Owner: r.Owner, Name: r.Name, Quota: r.Quota},
		CreatedAt: r.CreatedAt,
		RevokedAt: r.RevokedAt,
	}
}

// CreateAPIToken stores rec with the hash of its secret, both keys only if
// neither exists, and returns rec with CreatedAt set. Creating the
// identical token again (same id, hash, name, role, owner, quota, not
// revoked) returns the stored record: retries are safe. An id or hash
// another token holds is [auth.ErrTokenIDTaken]. Failure modes:
// ErrUnavailable (the token may have been stored: retry).
func (s *TokenStore) CreateAPIToken(ctx context.Context, rec auth.Record, secretSHA256 [32]byte) (auth.Record, error) {
	if err := segment("token id", rec.ID); err != nil {
		return auth.Record{}, fmt.Errorf("create api token: %w", err)
	}
	h := hex.EncodeToString(secretSHA256[:])
	tr := tokenRecord{
		ID: rec.ID, Name: rec.Name, Role: string(rec.Role), Owner: rec.Owner, Quota: rec.Quota,
		SHA256: h, CreatedAt: s.now().UTC().Truncate(time.Millisecond),
	}
	val, err := json.Marshal(tr)
	if err != nil {
		return auth.Record{}, err
	}
	ik, hk := tokensPrefix+rec.ID, tokenHashPrefix+h
	ctx, cancel := s.n.op(ctx)
	defer cancel()
	resp, err := s.n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ik), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(hk), "=", 0)).
		Then(clientv3.OpPut(ik, string(val)), clientv3.OpPut(hk, string(val))).
		Else(clientv3.OpGet(ik)).Commit()
	if err != nil {
		return auth.Record{}, unknownOutcome("create api token "+rec.ID, err)
	}
	if resp.Succeeded {
		return tr.record(), nil
	}
	// A uniqueness rule said no: a retry of this very call, or a real
	// conflict.
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var cur tokenRecord
		if json.Unmarshal(kvs[0].Value, &cur) == nil && cur.SHA256 == h && cur.Name == tr.Name &&
			cur.Role == tr.Role && cur.Owner == tr.Owner && cur.Quota == tr.Quota && cur.RevokedAt.IsZero() {
			return cur.record(), nil
		}
	}
	return auth.Record{}, fmt.Errorf("create api token %s: %w", rec.ID, auth.ErrTokenIDTaken)
}

// ListAPITokens returns every token, revoked ones included, oldest first
// (ties by id). Failure modes: ErrUnavailable.
func (s *TokenStore) ListAPITokens(ctx context.Context) ([]auth.Record, error) {
	ctx, cancel := s.n.op(ctx)
	defer cancel()
	resp, err := s.n.cli.Get(ctx, tokensPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable("list api tokens", err)
	}
	out := make([]auth.Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var tr tokenRecord
		if err := json.Unmarshal(kv.Value, &tr); err != nil {
			return nil, fmt.Errorf("list api tokens: %s: %w", kv.Key, err)
		}
		out = append(out, tr.record())
	}
	slices.SortFunc(out, func(a, b auth.Record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// RevokeAPIToken marks token id revoked in both of its keys, in one
// transaction fenced on the record read. Revoking a revoked token keeps
// the first time and succeeds; an id that never existed is
// [auth.ErrTokenNotFound]. Failure modes: ErrUnavailable (the revocation
// may have been applied: retry).
func (s *TokenStore) RevokeAPIToken(ctx context.Context, id string) error {
	if err := segment("token id", id); err != nil {
		return fmt.Errorf("revoke api token: %w", err)
	}
	ik := tokensPrefix + id
	for range updateAttempts {
		gctx, cancel := s.n.op(ctx)
		resp, err := s.n.cli.Get(gctx, ik)
		cancel()
		if err != nil {
			return unavailable("revoke api token "+id, err)
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("revoke api token %s: %w", id, auth.ErrTokenNotFound)
		}
		var tr tokenRecord
		if err := json.Unmarshal(resp.Kvs[0].Value, &tr); err != nil {
			return fmt.Errorf("revoke api token %s: %w", id, err)
		}
		if !tr.RevokedAt.IsZero() {
			return nil
		}
		tr.RevokedAt = s.now().UTC().Truncate(time.Millisecond)
		val, err := json.Marshal(tr)
		if err != nil {
			return err
		}
		tctx, cancel := s.n.op(ctx)
		tresp, err := s.n.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.ModRevision(ik), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(ik, string(val)), clientv3.OpPut(tokenHashPrefix+tr.SHA256, string(val))).
			Commit()
		cancel()
		if err != nil {
			return unknownOutcome("revoke api token "+id, err)
		}
		if tresp.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("revoke api token %s: %w: it kept changing", id, ErrConflict)
}

// LookupAPITokenByHash returns the token whose whole-token hash is hash
// (revoked ones too, marked Revoked: the authenticator refuses them), or
// [auth.ErrTokenNotFound]. It reads the node's watch-fed copy of
// tokenhash/: authentication costs no cluster call, and goes on during a
// quorum loss with what the node last saw. A token made on another node a
// moment ago, which the watch has not delivered yet, is read from etcd
// once (Node.fetchToken), so that a token works on every node as soon as
// its create answered; those reads are rate-limited, so a flood of
// made-up tokens cannot load etcd. A revocation holds here once the watch
// delivers it (milliseconds on a healthy cluster).
func (s *TokenStore) LookupAPITokenByHash(ctx context.Context, hash [32]byte) (auth.StoredToken, error) {
	hexHash := hex.EncodeToString(hash[:])
	tr, ok := s.n.token(hexHash)
	if !ok {
		if tr, ok = s.n.fetchToken(ctx, hexHash); !ok {
			return auth.StoredToken{}, auth.ErrTokenNotFound
		}
	}
	var stored [32]byte
	if b, err := hex.DecodeString(tr.SHA256); err != nil || len(b) != len(stored) {
		return auth.StoredToken{}, fmt.Errorf("lookup api token %s: bad stored hash", tr.ID)
	} else {
		copy(stored[:], b)
	}
	return auth.StoredToken{
		ID: tr.ID, Role: tr.Role, Owner: tr.Owner, SecretSHA256: stored,
		Revoked: !tr.RevokedAt.IsZero(), Quota: tr.Quota,
	}, nil
}
