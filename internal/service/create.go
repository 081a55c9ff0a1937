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
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// CreateSandbox creates a sandbox with a new id and returns once its agent
// answers. On any failure every step that succeeded is undone (see the
// package documentation); the caller may retry freely, and through
// CreateOnce a retry never makes a second sandbox.
func (s *Service) CreateSandbox(ctx context.Context, req CreateRequest) (*Created, error) {
	return s.create(ctx, req, "", nil)
}

// CreateSandboxWithID creates a sandbox under a chosen id (the id a
// failed-over sandbox had). When this node already has a sandbox with that
// id it returns it with Replayed set and does nothing else, so the call is
// safe to repeat.
func (s *Service) CreateSandboxWithID(ctx context.Context, id string, req CreateRequest) (*Created, error) {
	if !runtime.ValidSandboxID(id) {
		return nil, invalid("id", "%q is not a valid sandbox id", id)
	}
	return s.createWithID(ctx, req, id, nil)
}

// createWithID is create under id ("" for a fresh one) that answers a
// sandbox already holding the id instead of failing.
func (s *Service) createWithID(ctx context.Context, req CreateRequest, id string, cl *store.Claim) (*Created, error) {
	if id == "" {
		return s.create(ctx, req, "", cl)
	}
	if row, err := s.Store.GetSandbox(ctx, id); err == nil {
		return &Created{Sandbox: fromRow(row), Replayed: true}, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	c, err := s.create(ctx, req, id, cl)
	if errors.Is(err, store.ErrIDConflict) {
		// A concurrent call with the same id won the insert: theirs is the
		// sandbox, ours rolled back.
		row, gerr := s.Store.GetSandbox(ctx, id)
		if gerr != nil {
			return nil, s.mapStoreErr(gerr, id)
		}
		return &Created{Sandbox: fromRow(row), Replayed: true}, nil
	}
	return c, err
}

// create is the one worker behind every create entry point: the chain of
// steps in the package documentation, each undone on a later failure.
//
// cl, when not nil, is the idempotency claim the create runs under: the
// row's id is attached to it before the row exists, so a crash mid-create
// leaves a claim that a retry resolves (adopt the sandbox, or start over).
func (s *Service) create(ctx context.Context, req CreateRequest, idOverride string, cl *store.Claim) (*Created, error) {
	return s.createAs(ctx, req, idOverride, nil, cl)
}

// createAs is create with an idle sandbox already reserved from the pool
// (reservePooled) when reserved is not nil: the create claims it, and its
// id is idOverride. A miss then answers errPoolMiss instead of going cold:
// the caller creates again cold, under an id of its choosing.
func (s *Service) createAs(ctx context.Context, req CreateRequest, idOverride string, reserved *reservation, cl *store.Claim) (*Created, error) {
	spec, err := s.resolveTemplate(ctx, &req)
	var mem *forkMemory
	if err == nil && spec.Memory != nil {
		// A template with its source's memory: the sandbox is restored
		// from it (forkmem.go), and runs no start command of its own.
		mem, err = s.restoreFrom(templateIDOf(req.Image), spec.Memory, &req)
	}
	if err != nil {
		if reserved != nil {
			s.unreservePooled(req, reserved.pooled)
		}
		return nil, err
	}
	created, err := s.createChainFrom(ctx, req, idOverride, reserved, cl, mem)
	if err != nil || spec.StartCmd == "" || mem != nil {
		return created, err
	}
	t := time.Now()
	if err := s.startTemplate(ctx, created.ID, spec); err != nil {
		s.destroyDetached(ctx, created.ID, "its template's start failed")
		return nil, err
	}
	created.Timings = append(created.Timings, StepTiming{Step: "template-start", Duration: time.Since(t)})
	return created, nil
}

// createChain is createAs once the request's template (if any) is
// resolved to its image: the numbered steps of docs/design.md's create
// chain (and the package documentation), one method of creation each.
// Steps 1–5 have no side effect; from 6 on each step pushes its own undo
// once it succeeded, and a failure undoes them all in reverse order
// (rollback) before the error is returned.
func (s *Service) createChain(ctx context.Context, req CreateRequest, idOverride string, reserved *reservation, cl *store.Claim) (_ *Created, err error) {
	return s.createChainFrom(ctx, req, idOverride, reserved, cl, nil)
}

// createChainFrom is createChain, restoring the sandbox from mem when it
// is not nil (a template with memory: createAs).
func (s *Service) createChainFrom(ctx context.Context, req CreateRequest, idOverride string, reserved *reservation, cl *store.Claim, mem *forkMemory) (_ *Created, err error) {
	c := &creation{s: s, t: &stepTimer{}, req: req, cl: cl, id: idOverride, memory: mem}
	defer func() { s.Metrics.observeCreate(c.t.timings, err) }()
	if reserved != nil {
		// Until claimPooled has it, a failure gives the reservation back.
		defer func() {
			if reserved != nil {
				s.unreservePooled(c.req, reserved.pooled)
			}
		}()
	}
	// 1. readiness, topology gate and role check.
	if err := c.gate(ctx); err != nil {
		return nil, err
	}
	// 2. normalize and validate; nothing has happened yet.
	if err := c.validate(); err != nil {
		return nil, err
	}
	// 2b. the warm pool: a tenant's request of a pooled class, without
	// mounts or a chosen id, is a claim of an idle sandbox (poolclaim.go).
	// A miss runs the cold path below, which the refill then yields to.
	if reserved != nil {
		r := *reserved
		reserved = nil
		return s.claimPooled(ctx, c.req, r, cl, c.t)
	}
	if c.req.Owner != store.PoolOwner {
		if created, err := c.servePooled(ctx); !errors.Is(err, errPoolMiss) {
			return created, err
		}
		defer s.pool.ColdCreate()()
	}
	// 2c. the image, before any side effect (pull.go).
	if err := c.image(ctx); err != nil {
		return nil, err
	}
	// 3. choose the id; 4. seal secret env; 5. agent token and SSH keys.
	if err := c.seal(); err != nil {
		return nil, err
	}
	defer c.rollback(&err)
	for _, step := range []func(context.Context) error{
		c.insertRow,     // 6. claim target + row (creating) → delete the row
		c.claimCluster,  // 6b. cluster placement and name → release the keys
		c.admit,         // 7. admission → release
		c.prepareMounts, // 8. mounts → abandon them
		c.startRuntime,  // 9. runtime create + start, agent ready → destroy the container
		c.applyNetwork,  // 9a. the network policy → remove it
		c.handSecretEnv, // 9b. the secret env to the agent (the container's undo)
		c.installRoute,  // 10. route → remove it
		c.storeMounts,   // 11. the mounts' sealed specs (they go with the row)
		c.commit,        // 11. commit: the row goes running
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	s.replaceClient(c.id, agent.NewClient(s.dialer(c.id), c.sec.token))
	if c.missed != nil {
		s.pool.Missed(*c.missed, s.Clock())
	}
	return &Created{Sandbox: fromRow(c.row), SSHPrivateKey: c.sec.keys.Private, Timings: c.t.timings}, nil
}

// creation is one run of the create chain: the request, what the steps
// made so far and the undo of each. Its step methods run in createChain's
// order; from step 6 on each pushes its undo right after it succeeded.
type creation struct {
	s     *Service
	t     *stepTimer
	req   CreateRequest   // normalized from step 2 on
	cl    *store.Claim    // the idempotency claim the create runs under, or nil
	id    string          // the chosen id (idOverride) until step 3 sets it
	sec   sandboxSecrets  // step 4–5
	row   store.Sandbox   // inserted by insertRow, as committed by commit
	binds []runtime.Mount // the prepared mounts, for the runtime
	undo  undoStack
	// missed is the pool class whose idle sandboxes this create found none
	// of (step 2b): its success counts in the class's demand.
	missed *PoolClass
	// memory, for a fork with memory only, is the source's memory image
	// the sandbox is restored from (forkmem.go).
	memory *forkMemory
}

// gate is step 1: the startup repair is done, and in cluster mode the
// topology lets this node create (Deps.Gate).
func (c *creation) gate(ctx context.Context) error {
	s := c.s
	if err := s.requireReady(); err != nil {
		return err
	}
	if s.Gate == nil {
		return nil
	}
	if err := c.t.run("gate", func() error { return s.Gate(ctx) }); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// validate is step 2: the request normalized (defaults, image reference)
// and validated. On an error c.req is what normalize returned beside it.
func (c *creation) validate() error {
	return c.t.run("validate", func() (err error) {
		c.req, err = c.s.normalize(c.req)
		return err
	})
}

// servePooled is step 2b for a request that reserved nothing: a claim of
// an idle sandbox (fromPool), or errPoolMiss when the pool does not serve
// the request (a chosen id, mounts, a build's sandbox) or has none.
func (c *creation) servePooled(ctx context.Context) (*Created, error) {
	if c.id != "" || len(c.req.Mounts) > 0 || c.req.Owner == buildOwner || c.memory != nil {
		return nil, errPoolMiss
	}
	created, err := c.s.fromPool(ctx, c.req, c.cl, c.t)
	if errors.Is(err, errPoolMiss) {
		class := poolClass(c.req)
		c.missed = &class
	}
	return created, err
}

// image is step 2c: the image is present, pulled through the engine when
// it lacks it, once per node however many creates wait. It runs before
// any side effect, so a failed pull leaves nothing to undo.
func (c *creation) image(ctx context.Context) error {
	return c.t.run("image", func() error { return c.s.ensureImage(ctx, c.req.Owner, c.req.Image) })
}

// seal is steps 3–5: the id (the chosen one on the recreate path; the
// secrets are bound to it), the sealed secret env, the agent token and the
// SSH key pair. Memory only: nothing to undo.
func (c *creation) seal() error {
	if c.id == "" {
		c.id = newSandboxID()
	}
	return c.t.run("seal", func() (err error) {
		c.sec, err = c.s.seal(c.id, c.req)
		return err
	})
}

// rollback undoes, in reverse order, every step that succeeded when *err
// is set, each with a fresh context; a failed undo joins *err.
func (c *creation) rollback(err *error) {
	if *err == nil {
		return
	}
	if uerr := c.undo.run(c.s.Logger, c.id); uerr != nil {
		*err = errors.Join(*err, fmt.Errorf("rollback: %w", uerr))
	}
}

// insertRow is step 6: the claim names the id, then the row, in state
// creating without an expiry, claims the id and the name. Undo: delete
// the row (and the agent client a later step may have cached).
func (c *creation) insertRow(ctx context.Context) error {
	s := c.s
	enforced, err := s.diskEnforced(ctx)
	if err != nil {
		return err
	}
	c.row = s.newRow(c.id, c.req, c.sec, enforced)
	if err := c.t.run("store", func() error {
		if c.cl != nil {
			if err := s.Store.AttachClaimTarget(ctx, *c.cl, c.id); err != nil {
				return err
			}
		}
		return s.Store.CreateSandbox(ctx, &c.row)
	}); err != nil {
		if errors.Is(err, store.ErrIDConflict) {
			return err // CreateSandboxWithID resolves this race
		}
		return s.mapStoreErr(err, c.req.Name)
	}
	id := c.id
	c.undo.push("delete row", func(ctx context.Context) error {
		s.forgetClient(id)
		if err := s.Store.DeleteSandbox(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
	return nil
}

// claimCluster is step 6b, in cluster mode: the placement and the name
// cluster-wide, local first (the row above), then the cluster, before
// anything costly. The undo is pushed first: a claim whose outcome is
// unknown (the cluster answered too late) may have been applied, and the
// release is fenced on this id and node, so it never takes another
// sandbox's name. Idle sandboxes of the pool claim nothing.
func (c *creation) claimCluster(ctx context.Context) error {
	s, id := c.s, c.id
	if s.Cluster == nil || c.req.Owner == store.PoolOwner {
		return nil
	}
	c.undo.push("release cluster keys", func(ctx context.Context) error { return s.releaseCluster(ctx, id) })
	return c.t.run("cluster", func() error { return s.claimCluster(ctx, id, c.req) })
}

// admit is step 7: capacity reserved within the owner's quota. A build's
// sandbox reserves nothing: its build holds its capacity, for the build's
// owner, from its request to its end (BuildTemplate). Undo: release.
func (c *creation) admit(ctx context.Context) error {
	s, id, req := c.s, c.id, c.req
	if err := c.t.run("admission", func() error {
		if req.Owner == buildOwner {
			return nil
		}
		ask := admission.Request{MilliCPU: req.MilliCPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Owner: req.Owner}
		err := s.Admission.ReserveWithin(id, ask, req.Quota)
		// Idle sandboxes of the pool never keep a tenant out: while the
		// host is full and the pool holds some, they make room.
		for ex := (*admission.ExhaustedError)(nil); errors.As(err, &ex) && req.Owner != store.PoolOwner && s.evictIdle(ctx); {
			err = s.Admission.ReserveWithin(id, ask, req.Quota)
		}
		return err
	}); err != nil {
		return admissionErr(err)
	}
	c.undo.push("release admission", func(context.Context) error { s.Admission.Release(id); return nil })
	return nil
}

// prepareMounts is step 8. A volume that does not exist yet is made by
// Prepare, its size held in the owner's disk quota first
// (reserveVolumes); Prepare removes what it made before failing. Undo:
// abandon the mounts.
func (c *creation) prepareMounts(ctx context.Context) error {
	s, id, req := c.s, c.id, c.req
	if len(req.Mounts) == 0 {
		return nil
	}
	if err := c.t.run("mounts", func() (err error) {
		c.binds, err = s.Volumes.Prepare(ctx, req.Owner, id, req.Mounts, s.reserveVolumes(Caller{Owner: req.Owner, Quota: req.Quota}))
		return err
	}); err != nil {
		return fmt.Errorf("prepare mounts: %w", err)
	}
	c.undo.push("abandon mounts", func(ctx context.Context) error { return s.Volumes.Abandon(ctx, id) })
	return nil
}

// startRuntime is step 9: runtime create + start, agent ready. Undo:
// destroy the container.
func (c *creation) startRuntime(ctx context.Context) error {
	s, id := c.s, c.id
	spec := s.runtimeSpec(id, c.req, c.sec.token, c.binds)
	if c.memory != nil {
		spec.RestoreImage = c.memory.dir
	}
	if err := c.t.run("runtime", func() error { return s.startRuntime(ctx, spec) }); err != nil {
		var fe *FieldError
		if _, fault := Fault(err); c.memory != nil && ctx.Err() == nil && !fault && !errors.As(err, &fe) {
			// runsc's words name host paths: the log has them.
			s.Logger.Warn("create: restore from a template's memory image", "sandbox", id, "err", err)
			return &UnavailableError{Reason: fmt.Sprintf("sandbox %s could not be restored from its template's memory image, which is damaged or was removed (the daemon's log says how)", id)}
		}
		return err
	}
	c.undo.push("destroy container", func(ctx context.Context) error { return s.Runtime.Destroy(ctx, id) })
	if c.memory != nil {
		// The restored agent takes its source's token: it takes this
		// sandbox's from now on, and the source's no more (forkmem.go).
		if err := c.t.run("token", func() error {
			return s.handForkToken(ctx, id, c.memory, c.sec.token, mergedEnv(c.req.Env, c.req.SecretEnv))
		}); err != nil {
			return err
		}
	}
	return nil
}

// applyNetwork is step 9a, the network policy on the host: until it is
// in, a sandbox with network reaches nothing (netpolicy's chains end in
// REJECT). An idle sandbox of the pool gets none: it reaches nothing
// until its claim applies its owner's. The undo is pushed first (a policy
// half applied is removed).
func (c *creation) applyNetwork(ctx context.Context) error {
	s, id := c.s, c.id
	if !c.req.Network || s.Firewall == nil || c.req.Owner == store.PoolOwner {
		return nil
	}
	c.undo.push("remove network policy", func(ctx context.Context) error { return s.Firewall.Remove(ctx, id) })
	if err := c.t.run("network", func() error { return s.Firewall.Apply(ctx, id, c.req.NetworkPolicy) }); err != nil {
		return fmt.Errorf("apply the network policy: %w", err)
	}
	return nil
}

// handSecretEnv is step 9b: the secret env, over the agent's channel,
// never in the engine's configuration of the container. Its undo is the
// container's.
func (c *creation) handSecretEnv(ctx context.Context) error {
	if len(c.req.SecretEnv) == 0 || c.memory != nil { // a restored sandbox had it with its token
		return nil
	}
	if err := c.t.run("secret env", func() error {
		a := agent.NewClient(c.s.dialer(c.id), c.sec.token)
		defer a.Close()
		return a.Configure(ctx, agent.Configuration{Env: c.req.SecretEnv})
	}); err != nil {
		return fmt.Errorf("hand the secret env to the agent: %w", err)
	}
	return nil
}

// installRoute is step 10. Undo: remove the route.
func (c *creation) installRoute(ctx context.Context) error {
	s, id := c.s, c.id
	if err := c.t.run("route", func() error { return s.Router.Install(ctx, id) }); err != nil {
		return fmt.Errorf("install route: %w", err)
	}
	c.undo.push("remove route", func(ctx context.Context) error { return s.Router.Remove(ctx, id) })
	return nil
}

// storeMounts is step 11's first half: the mounts' sealed specs, which
// cascade with the row (its undo).
func (c *creation) storeMounts(ctx context.Context) error {
	if len(c.req.Mounts) == 0 {
		return nil
	}
	if err := c.t.run("store mounts", func() error { return c.s.putMounts(ctx, c.id, c.req.Mounts) }); err != nil {
		return fmt.Errorf("store mounts: %w", err)
	}
	return nil
}

// commit is step 11's last write: CommitCreate moves the row to running
// and sets its expiry. The timeout counts from here: a sandbox's life
// starts when it runs, and the reaper never sees a creating row as
// expired. Nothing after it can fail.
func (c *creation) commit(ctx context.Context) error {
	s := c.s
	if err := c.t.run("commit", func() error {
		var expires time.Time
		if c.req.Timeout > 0 {
			expires = s.Clock().Add(c.req.Timeout)
		}
		var err error
		c.row, err = s.Store.CommitCreate(ctx, c.id, expires)
		return err
	}); err != nil {
		return s.mapStoreErr(err, c.id)
	}
	return nil
}

// sandboxSecrets are what a create makes for a sandbox before anything else: its
// agent token (plain, for the runtime and the client cache, and sealed for
// the row), its sealed secret env and its SSH key pair.
type sandboxSecrets struct {
	token                  string
	sealedToken, sealedEnv []byte
	keys                   sshKeyPair
}

// seal makes a sandbox's secrets, bound to its id.
func (s *Service) seal(id string, req CreateRequest) (sec sandboxSecrets, err error) {
	sec.token = newAgentToken()
	if len(req.SecretEnv) > 0 {
		plain, _ := json.Marshal(req.SecretEnv)
		if sec.sealedEnv, err = s.Keyring.Seal(plain, secretEnvAD(id)); err != nil {
			return sandboxSecrets{}, fmt.Errorf("seal secret env: %w", err)
		}
	}
	if sec.sealedToken, err = s.Keyring.Seal([]byte(sec.token), agentTokenAD(id)); err != nil {
		return sandboxSecrets{}, fmt.Errorf("seal agent token: %w", err)
	}
	sec.keys, err = newSSHKeyPair(id)
	return sec, err
}

// newRow is the row a create inserts: state creating, no expiry yet (the
// timeout starts at the commit).
func (s *Service) newRow(id string, req CreateRequest, sec sandboxSecrets, diskEnforced bool) store.Sandbox {
	return store.Sandbox{
		ID:               id,
		Name:             req.Name,
		Owner:            req.Owner,
		Image:            req.Image,
		State:            store.StateCreating,
		CPUMillis:        req.MilliCPU,
		MemoryMB:         req.MemoryMB,
		Tags:             req.Tags,
		Env:              req.Env,
		SealedSecrets:    sec.sealedEnv,
		AgentTokenSealed: sec.sealedToken,
		SSHPublicKey:     sec.keys.Public,
		NodeID:           s.cfg.NodeID,
		CreatedAt:        s.Clock(),
		Lifecycle:        storeLifecycle(req.Lifecycle),
		Spec: marshalSpec(sandboxSpec{
			Network:       req.Network,
			Policy:        policyOf(req),
			Failover:      req.Failover,
			Mounts:        req.Mounts,
			Annotations:   req.Annotations,
			Runtime:       req.Runtime,
			SecretEnvKeys: slices.Sorted(maps.Keys(req.SecretEnv)),
			DiskMB:        req.DiskMB,
			DiskEnforced:  diskEnforced && req.DiskMB > 0,
			DiskQuotaMB:   req.Quota.DiskMB,

			PauseOnTimeout: req.Lifecycle.PauseOnTimeout || req.PauseOnTimeout,
			TimeoutPause:   req.Lifecycle.TimeoutPause,
			Wake:           wakeRuleOf(req),
		}),
	}
}

// diskEnforced reports whether the runtime enforces disk limits
// (Deps.Disk). The runtime asks its engine once and latches the answer,
// so this is an atomic load after the first create; an engine that does
// not answer is ErrUnavailable (the runtime's create would fail too).
func (s *Service) diskEnforced(ctx context.Context) (bool, error) {
	if s.Disk == nil {
		return false, nil
	}
	lim, err := s.Disk.DiskLimits(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: ask the runtime whether it enforces disk limits: %w", ErrUnavailable, err)
	}
	return lim.Enforced, nil
}

// runtimeSpec is what the runtime is asked to start: the env (the secret
// env is not in it: the agent gets that once it runs, step 9b), the
// limits, the mounts and the agent.
func (s *Service) runtimeSpec(id string, req CreateRequest, token string, binds []runtime.Mount) runtime.Spec {
	return runtime.Spec{
		SandboxID:   id,
		Image:       req.Image,
		CPU:         float64(req.MilliCPU) / 1000,
		MemoryMB:    req.MemoryMB,
		DiskMB:      req.DiskMB,
		PidsLimit:   defaultPidsLimit,
		Env:         maps.Clone(req.Env),
		Network:     req.Network,
		Mounts:      binds,
		AgentBinary: s.cfg.AgentBinary,
		AgentToken:  token,
		Isolation:   isolation(req.Runtime),
	}
}

// startRuntime creates and starts the container and waits for its agent.
// The runtime cleans up after its own failures, but an answer lost after
// the engine acted (a timeout, a broken connection) can still leave a
// container: on failure it destroys by id, which is idempotent. This runs
// on the failure path only.
func (s *Service) startRuntime(ctx context.Context, spec runtime.Spec) error {
	_, err := s.Runtime.Create(ctx, spec)
	if err == nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	if derr := s.Runtime.Destroy(dctx, spec.SandboxID); derr != nil {
		s.Logger.Warn("create: destroy after failed runtime create", "sandbox", spec.SandboxID, "err", derr)
	}
	cancel()
	if errors.Is(err, runtime.ErrImageNotFound) {
		return &FieldError{Field: "image", Reason: fmt.Sprintf("image %q is not present on this host", spec.Image), Kind: ErrImageNotPresent}
	}
	if errors.Is(err, runtime.ErrInvalidSpec) {
		// normalize checks what it can; what only the engine knows (its
		// limits, its reference rules) it refuses here, and that is still
		// the request's fault, not the daemon's.
		return fmt.Errorf("%w: the engine refused the sandbox: %w", ErrInvalidArgument, err)
	}
	return fmt.Errorf("start sandbox: %w", err)
}

func (s *Service) putMounts(ctx context.Context, id string, mounts []Mount) error {
	sealed := make([][]byte, len(mounts))
	for i, m := range mounts {
		plain, _ := json.Marshal(m)
		blob, err := s.Keyring.Seal(plain, mountAD(id, i))
		if err != nil {
			return err
		}
		sealed[i] = blob
	}
	return s.Store.PutSandboxMounts(ctx, id, sealed)
}

// stepTimer times create steps in order.
type stepTimer struct {
	timings []StepTiming
}

func (t *stepTimer) run(step string, fn func() error) error {
	start := time.Now() // wall time even under an injected clock: this is latency
	err := fn()
	t.timings = append(t.timings, StepTiming{Step: step, Duration: time.Since(start)})
	return err
}

// admissionErr maps admission's refusals: past the free capacity or the
// owner's quota is retryable (ErrCapacityExhausted with a hint; a quota
// also ErrQuotaExceeded, its message naming the quota); bigger than the
// whole host budget or quota never fits, so it is a bad request.
func admissionErr(err error) error {
	var (
		ex *admission.ExhaustedError
		qe *admission.QuotaError
	)
	switch {
	case errors.As(err, &ex):
		return &RetryAfterError{Err: fmt.Errorf("%w: %w", ErrCapacityExhausted, err), After: ex.RetryAfter}
	case errors.As(err, &qe):
		return &RetryAfterError{Err: &QuotaError{Reason: qe.Error()}, After: qe.RetryAfter}
	case errors.Is(err, admission.ErrExceedsBudget), errors.Is(err, admission.ErrExceedsQuota),
		errors.Is(err, admission.ErrInvalidRequest):
		return refuse(ErrInvalidArgument, err, "%v", err)
	}
	return err
}
