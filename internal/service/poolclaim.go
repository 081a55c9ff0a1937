package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/store"
)

// errPoolMiss: the pool could not serve the create; the cold path runs.
var errPoolMiss = errors.New("pool miss")

// fromPool serves a normalized create from the warm pool: it takes an idle
// sandbox of the request's class and claims it (claimPooled).
//
// errPoolMiss means the pool could not serve it (no idle sandbox, or the
// one taken turned out dead, which is then destroyed): the caller runs
// the cold path, so a miss answers exactly as a create without the pool.
// Any other error is the create's answer (a name conflict, a quota), and
// the idle sandbox goes back to the pool untouched.
func (s *Service) fromPool(ctx context.Context, req CreateRequest, cl *store.Claim, t *stepTimer) (*Created, error) {
	e, ok := s.pool.Take(poolClass(req), s.Clock())
	if !ok {
		s.Metrics.poolMiss()
		return nil, errPoolMiss
	}
	return s.claimPooled(ctx, req, reservation{pooled: e}, cl, t)
}

// reservation is an idle sandbox taken from the pool before its create
// runs (reservePooled), for a caller that must know the sandbox's id
// first: an unkeyed E2B create, whose delivery claim is keyed by it.
type reservation struct {
	pooled
	// delivery is the create's delivery claim (store.NewDelivery), which
	// the claim's store write writes too, so that no delivery row ever
	// names a sandbox that is still the pool's; window is its window.
	delivery *store.Claim
	window   time.Duration
}

// reservePooled takes an idle sandbox for req: ok is false when req cannot
// be served from the pool, and the caller creates cold. The caller passes
// the reservation to createAs, or gives it back with unreservePooled.
func (s *Service) reservePooled(req CreateRequest) (pooled, bool) {
	// The cases createChain does not serve from the pool, and a template
	// (its image is not the request's Image until createAs resolves it).
	if req.Owner == store.PoolOwner || req.Owner == buildOwner || len(req.Mounts) > 0 || req.Template != "" {
		return pooled{}, false
	}
	n, err := s.normalize(req)
	if err != nil {
		return pooled{}, false // the create answers the error itself
	}
	return s.pool.Take(poolClass(n), s.Clock())
}

// unreservePooled gives back a sandbox reservePooled took and no create
// claimed.
func (s *Service) unreservePooled(req CreateRequest, e pooled) {
	n, _ := s.normalize(req) // reservePooled normalized it without error
	s.returnPooled(context.Background(), poolClass(n), e)
}

// returnPooled gives an untouched idle sandbox back to its class, or
// destroys it when the class no longer wants it (a stop drained the pool,
// or its target shrank, while a claim held it).
func (s *Service) returnPooled(ctx context.Context, class PoolClass, e pooled) {
	if !s.pool.GiveBack(class, e) {
		s.destroyPooled(ctx, e.ID, "the pool no longer wants it")
	}
}

// poolConfigureTimeout bounds a claim's agent call: an idle agent on a
// local socket answers in a millisecond, so one that takes seconds is
// dead or hostile, and the create goes cold instead of waiting on it.
const poolConfigureTimeout = 5 * time.Second

// claimPooled claims r, an idle sandbox of req's class that take handed
// out, for req, in two steps that run at once:
//
//   - one agent call that hands over the env and the secret env and
//     rotates the agent token (the token the sandbox booted with stops
//     working), bounded by poolConfigureTimeout;
//   - one store write (store.ClaimPooled): the row takes its owner, name,
//     tags, env, sealed secrets, fresh tokens and spec, and is running,
//     its timeout counted from now; the idempotency claim's target (cl)
//     and the delivery row (r.delivery) are written in the same
//     transaction. In cluster mode the row goes back to creating instead,
//     the cluster claims its keys, and the commit (store.CommitCreate)
//     ends the claim, as a cold create's does.
//
// The claim costs the longer of the two, not their sum. Nothing is
// restarted. Both must succeed, and a crash may cut either short:
//   - the agent configured, the row still the pool's: the agent no longer
//     takes its boot token, and the next start destroys the row
//     (adoptPooled);
//   - the row written, the agent not configured: the next start hands the
//     agent its env and token before it serves (finishClaims).
//
// Before the two steps a refusal (the quota, a name the owner already
// has) gives the sandbox back to the pool untouched. From them on the
// sandbox may have seen the owner's secrets and is never given back: a
// failure of either destroys it (and deletes the delivery row); a failed
// agent call is then a miss, and the create goes cold.
func (s *Service) claimPooled(ctx context.Context, req CreateRequest, r reservation, cl *store.Claim, t *stepTimer) (*Created, error) {
	class := poolClass(req)
	start := time.Now()
	id := r.ID
	sec, err := s.seal(id, req)
	if err != nil {
		s.returnPooled(ctx, class, r.pooled)
		return nil, err
	}
	// The host's budget already counts the sandbox (under the pool's
	// owner): moving it to its owner only checks the owner's quota.
	size := admission.Request{MilliCPU: req.MilliCPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB}
	own := size
	own.Owner = req.Owner
	if err := s.Admission.ReserveWithin(id, own, req.Quota); err != nil {
		s.returnPooled(ctx, class, r.pooled)
		return nil, admissionErr(err)
	}
	back := func() {
		size.Owner = store.PoolOwner
		_ = s.Admission.ReserveWithin(id, size, admission.Quota{}) // same size, back to the pool's owner: always fits
		s.returnPooled(ctx, class, r.pooled)
	}
	// A name the owner has already costs no idle sandbox (a create racing
	// for the name past this read costs this one: the write refuses it).
	if req.Name != "" {
		if _, err := s.Store.GetSandboxByName(ctx, req.Owner, req.Name); !errors.Is(err, store.ErrNotFound) {
			back()
			if err == nil {
				err = fmt.Errorf("claim pooled sandbox %s: %w", id, store.ErrNameConflict)
			}
			return nil, s.mapStoreErr(err, req.Name)
		}
	}

	// From here the sandbox is never given back.
	fail := func(why string, err error) {
		s.Logger.Warn("pool: "+why, "sandbox", id, "err", err)
		if r.delivery != nil {
			if _, derr := s.Store.DeleteClaim(context.WithoutCancel(ctx), *r.delivery); derr != nil {
				s.Logger.Warn("pool: delete the delivery claim of a failed claim", "sandbox", id, "err", derr)
			}
		}
		s.destroyDetached(ctx, id, "its claim from the pool failed")
	}
	// The agent call and the store write run at once: neither needs the
	// other's answer, and the claim waits for the longer of the two, not
	// their sum. Both must succeed; either failing destroys the sandbox.
	boot := s.bootClient(id, r.Token)
	configured := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, poolConfigureTimeout)
		defer cancel()
		configured <- boot.Configure(cctx, agent.Configuration{Env: mergedEnv(req.Env, req.SecretEnv), NewToken: sec.token})
	}()
	// A sandbox with network gets its owner's policy at the same time:
	// until then it reached nothing (an idle sandbox has no rules).
	firewalled := make(chan error, 1)
	if req.Network && s.Firewall != nil {
		go func() { firewalled <- s.Firewall.Apply(ctx, id, req.NetworkPolicy) }()
	} else {
		firewalled <- nil
	}
	var expires time.Time
	if req.Timeout > 0 {
		expires = s.Clock().Add(req.Timeout)
	}
	commit := s.Cluster == nil
	// The pooled sandbox was created by this runtime, so its answer is
	// latched: no I/O.
	enforced, _ := s.diskEnforced(ctx)
	row, err := s.Store.ClaimPooled(ctx, store.PoolClaim{
		ID: id, Owner: req.Owner, Name: req.Name, Tags: req.Tags, Env: req.Env,
		SealedSecrets: sec.sealedEnv, AgentTokenSealed: sec.sealedToken, BootTokenSealed: r.SealedToken,
		SSHPublicKey: sec.keys.Public, Spec: s.newRow(id, req, sec, enforced).Spec, Claim: cl,
		Delivery: r.delivery, DeliveryWindow: r.window,
		Commit: commit, ExpiresAt: expires, Lifecycle: storeLifecycle(req.Lifecycle),
	})
	// Both awaited whatever the write did: a destroy below must not race
	// a policy still going in.
	cerr := errors.Join(<-configured, <-firewalled)
	s.pool.Gone(class)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// No longer the pool's running sandbox: destroyed under the pool
		// (a health check, an eviction), or failed (the reconciler marked
		// it). Its delivery row was not written, and a destroy that
		// already ran released its reservation before ours was made.
		s.Admission.Release(id)
		if _, gerr := s.Store.GetSandbox(ctx, id); gerr == nil {
			s.destroyDetached(ctx, id, "it failed in the pool")
		}
		s.Metrics.poolMiss()
		return nil, errPoolMiss
	case err != nil:
		s.Logger.Warn("pool: the claim's write failed; destroying the sandbox", "sandbox", id, "err", err)
		s.destroyDetached(ctx, id, "its claim from the pool failed") // its delivery row was not written
		return nil, s.mapStoreErr(err, req.Name)
	case cerr != nil:
		// The row is the owner's already, but nobody has been given it:
		// it is destroyed, and the create goes cold (a cold create moves
		// the idempotency claim's target to its own sandbox).
		fail("the claimed sandbox's agent refused its configuration, or its network policy failed; creating cold", cerr) // its destroy closes boot
		s.Metrics.poolMiss()
		return nil, errPoolMiss
	}
	if !commit {
		// Cluster mode: the claimed sandbox's placement and name, as a
		// cold create's (a conflict destroys it: its row is its owner's).
		if err := s.claimCluster(ctx, id, req); err != nil {
			fail("the cluster refused the claimed sandbox's keys", err)
			return nil, err
		}
		if row, err = s.Store.CommitCreate(ctx, id, expires); err != nil {
			fail("commit a claimed sandbox", err)
			return nil, s.mapStoreErr(err, id)
		}
	}
	// The sandbox's client keeps the claim's connection: its first call
	// (the owner's first exec, say) dials nothing. The boot token's client
	// shares it, so it is dropped without closing.
	if old, loaded := s.clients.Swap(id, boot.WithToken(sec.token)); loaded && old.(*agent.Client) != boot {
		old.(*agent.Client).Close()
	}
	d := time.Since(start)
	t.timings = append(t.timings, StepTiming{Step: "pool", Desc: "hit", Duration: d})
	s.Metrics.poolHit(d)
	return &Created{Sandbox: fromRow(row), SSHPrivateKey: sec.keys.Private, Timings: t.timings}, nil
}

// bootClient is the client of an idle sandbox's agent under its boot
// token: the one its health checks cached, whose connection is warm (a
// dial and the agent's first answer on it cost milliseconds on a busy
// host), else a new one.
func (s *Service) bootClient(id, token string) *agent.Client {
	if c, ok := s.clients.Load(id); ok && c.(*agent.Client).Token() == token {
		return c.(*agent.Client)
	}
	return s.cacheClient(id, token)
}

// mergedEnv is what a pooled or restored sandbox's processes get from the
// daemon: its env and its secret env (mergeMap, never nil).
func mergedEnv(env, secret map[string]string) map[string]string {
	if out := mergeMap(env, secret); out != nil {
		return out
	}
	return map[string]string{}
}

// configureAgent hands a sandbox's freshly started agent what it lost with
// its memory: the env its container's configuration lacks (the secret env;
// all of it for a sandbox claimed from the pool) and, for such a sandbox,
// its current token in place of the one it booted with. A sandbox that
// needs neither costs nothing. It runs after every Start, and at startup
// for sandboxes whose claim a crash cut short.
func (s *Service) configureAgent(ctx context.Context, row store.Sandbox) error {
	env := map[string]string{}
	if row.BootTokenSealed != nil {
		maps.Copy(env, row.Env)
	}
	if len(row.SealedSecrets) > 0 {
		plain, err := s.Keyring.Open(row.SealedSecrets, secretEnvAD(row.ID))
		if err != nil {
			return fmt.Errorf("open the secret env: %w", err)
		}
		var secret map[string]string
		if err := json.Unmarshal(plain, &secret); err != nil {
			return fmt.Errorf("decode the secret env: %w", err)
		}
		maps.Copy(env, secret)
	}
	if row.BootTokenSealed == nil {
		if len(env) == 0 {
			return nil
		}
		c, err := s.Agent(ctx, row.ID)
		if err != nil {
			return err
		}
		return c.Configure(ctx, agent.Configuration{Env: env})
	}
	bootToken, err := s.Keyring.Open(row.BootTokenSealed, agentTokenAD(row.ID))
	if err != nil {
		return fmt.Errorf("open the boot token: %w", err)
	}
	current, err := s.openToken(row)
	if err != nil {
		return err
	}
	boot := agent.NewClient(s.dialer(row.ID), string(bootToken))
	defer boot.Close()
	err = boot.Configure(ctx, agent.Configuration{Env: env, NewToken: current})
	var he *agent.HTTPError
	if errors.As(err, &he) && he.StatusCode == 401 {
		// The agent has the current token already (it was not restarted
		// since its claim): hand the env over again with that.
		c, cerr := s.Agent(ctx, row.ID)
		if cerr != nil {
			return cerr
		}
		return c.Configure(ctx, agent.Configuration{Env: env})
	}
	return err
}
