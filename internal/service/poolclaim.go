package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/store"
)

// errPoolMiss: the pool could not serve the create; the cold path runs.
var errPoolMiss = errors.New("pool miss")

// fromPool serves a normalized create from the warm pool: it takes an idle
// sandbox of the request's class and claims it. The claim is one store
// write (store.ClaimPooled: owner, name, tags, env, sealed secrets, fresh
// tokens and the timeout, with the idempotency claim's target in the same
// transaction), then one agent call that hands over the env and the
// secret env and rotates the agent token (the token the sandbox booted
// with stops working). Nothing is restarted.
//
// errPoolMiss means the pool could not serve it (no idle sandbox, or the
// one taken turned out dead, which is then destroyed): the caller runs
// the cold path, so a miss answers exactly as a create without the pool.
// Any other error is the create's answer (a name conflict, a quota), and
// the idle sandbox goes back to the pool untouched.
func (s *Service) fromPool(ctx context.Context, req CreateRequest, cl *store.Claim, t *stepTimer) (*Created, error) {
	class := poolClass(req)
	e, ok := s.pool.take(class)
	if !ok {
		s.Metrics.poolMiss()
		return nil, errPoolMiss
	}
	start := time.Now()
	id := e.id
	sec, err := s.seal(id, req)
	if err != nil {
		s.pool.giveBack(class, e)
		return nil, err
	}
	// The host's budget already counts the sandbox (under the pool's
	// owner): moving it to its owner only checks the owner's quota.
	size := admission.Request{MilliCPU: req.MilliCPU, MemoryMB: req.MemoryMB}
	own := size
	own.Owner = req.Owner
	if err := s.Admission.ReserveWithin(id, own, req.Quota); err != nil {
		s.pool.giveBack(class, e)
		return nil, admissionErr(err)
	}
	back := func() {
		size.Owner = store.PoolOwner
		_ = s.Admission.ReserveWithin(id, size, admission.Quota{}) // same size: always fits
	}
	var expires time.Time
	if req.Timeout > 0 {
		expires = s.Clock().Add(req.Timeout)
	}
	row, err := s.Store.ClaimPooled(ctx, store.PoolClaim{
		ID: id, Owner: req.Owner, Name: req.Name, Tags: req.Tags, Env: req.Env,
		SealedSecrets: sec.sealedEnv, AgentTokenSealed: sec.sealedToken, BootTokenSealed: e.sealedToken,
		SSHPublicKey: sec.keys.Public, Spec: s.newRow(id, req, sec).Spec, ExpiresAt: expires, Claim: cl,
	})
	if err != nil {
		back()
		if errors.Is(err, store.ErrNotFound) {
			// Destroyed under the pool (a health check, an operator): it is
			// not ours to give back.
			s.pool.gone(class)
			s.Metrics.poolMiss()
			return nil, errPoolMiss
		}
		s.pool.giveBack(class, e)
		return nil, s.mapStoreErr(err, req.Name)
	}
	// The sandbox is its owner's now: from here a failure destroys it.
	cfg := agent.Configuration{Env: mergedEnv(req.Env, req.SecretEnv), NewToken: sec.token}
	boot := agent.NewClient(s.dialer(id), e.token)
	if err = boot.Configure(ctx, cfg); err != nil {
		boot.Close()
		s.Logger.Warn("pool: the claimed sandbox's agent refused its configuration; creating cold", "sandbox", id, "err", err)
		s.destroyDetached(ctx, id, "its claim from the pool failed")
		s.pool.gone(class)
		s.Metrics.poolMiss()
		return nil, errPoolMiss
	}
	// The sandbox's client keeps the claim's connection: its first call
	// (the owner's first exec, say) dials nothing.
	s.replaceClient(id, boot.WithToken(sec.token))
	s.pool.gone(class)
	d := time.Since(start)
	t.timings = append(t.timings, StepTiming{Step: "pool", Desc: "hit", Duration: d})
	s.Metrics.poolHit(d)
	return &Created{Sandbox: fromRow(row), SSHPrivateKey: sec.keys.Private, Timings: t.timings}, nil
}

// mergedEnv is what a pooled sandbox's processes get from the daemon: its
// env and its secret env (they never share a key).
func mergedEnv(env, secret map[string]string) map[string]string {
	out := make(map[string]string, len(env)+len(secret))
	maps.Copy(out, env)
	maps.Copy(out, secret)
	return out
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

// finishClaims configures the agents of sandboxes claimed from the pool
// whose claim a crash may have cut between its store write and its agent
// call (the agent then still has its boot token and no env). It runs once
// after the startup repair; a sandbox that cannot be configured is
// destroyed, since its owner could not use it.
func (s *Service) finishClaims(ctx context.Context) {
	for token := ""; ; {
		rows, next, err := s.Store.ListSandboxes(ctx, store.ListFilter{States: []store.SandboxState{store.StateRunning}, Limit: store.MaxListLimit, PageToken: token})
		if err != nil {
			if ctx.Err() == nil {
				s.Logger.Error("pool: list sandboxes to finish their claims", "err", err)
			}
			return
		}
		for _, row := range slices.DeleteFunc(rows, func(r store.Sandbox) bool { return r.BootTokenSealed == nil }) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.configureAgent(cctx, row)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.Logger.Warn("pool: a claimed sandbox's agent cannot be configured; destroying it", "sandbox", row.ID, "err", err)
				s.destroyDetached(ctx, row.ID, "its claim cannot be finished")
			}
		}
		if token = next; token == "" {
			return
		}
	}
}
