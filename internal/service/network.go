package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/store"
)

// The network part of the service is this file: a create's policy
// normalized (normalizePolicy) and applied after its container starts
// (the create chain's step 9a), put in again at a start and taken out
// before a stop or destroy (applyRowPolicy, removeRowPolicy, called by
// lifecycle.go), SetNetworkPolicy, and the policies put back or swept by
// the reconciler (restorePolicies, sweepFirewall). Its policy
// language and the rules on the host are internal/netpolicy's; what it
// needs of the rest is Firewall, below, and the row's spec (policy).

// Firewall holds sandboxes' network policies on the host, outside every
// sandbox's reach (netpolicy.Firewall, given each sandbox's address by the
// engine). A sandbox with network has rules only while its container
// runs: they go in after its container starts (until then it reaches
// nothing) and out before it stops or is destroyed, so an address the
// engine gives another sandbox never carries them.
type Firewall interface {
	// Apply installs p for sandbox id, replacing its rules at once.
	Apply(ctx context.Context, id string, p netpolicy.Policy) error
	// Remove deletes sandbox id's rules; none is not an error.
	Remove(ctx context.Context, id string) error
	// Sweep removes the rules of every sandbox live says is gone.
	Sweep(ctx context.Context, live func(id string) bool) error
}

// normalizePolicy settles a create's network: Network alone is mode open;
// a policy's mode open or restricted sets Network. Network needs the
// daemon's --sandbox-network, and a policy that restricts anything needs
// the firewall.
func (s *Service) normalizePolicy(req *CreateRequest) error {
	p := req.NetworkPolicy
	if p.Mode == "" && req.Network {
		p.Mode = netpolicy.ModeOpen
	}
	p, err := p.Normalize()
	if err != nil {
		return invalid("network", "%v", err)
	}
	switch {
	case req.Network && p.Mode == netpolicy.ModeNone:
		return invalid("network", "network true contradicts mode none")
	case p.HasNetwork() && !s.cfg.AllowNetwork:
		return invalid("network", "outbound network is disabled on this daemon (start it with --sandbox-network)")
	case restricts(p) && s.Firewall == nil:
		return fmt.Errorf("network: a restricted policy or a deny list needs the daemon's firewall, which it does not have: %w", ErrUnavailable)
	}
	if !p.HasNetwork() {
		p = netpolicy.Policy{} // no network: the request's zero value, as before policies
	}
	req.NetworkPolicy, req.Network = p, p.HasNetwork()
	return nil
}

// restricts reports whether p limits where a sandbox with network goes.
func restricts(p netpolicy.Policy) bool {
	return p.Mode == netpolicy.ModeRestricted || len(p.Deny) > 0
}

// policyOf is what a create's row keeps of its policy: nil without
// network (the spec's Network says none).
func policyOf(req CreateRequest) *netpolicy.Policy {
	if !req.Network {
		return nil
	}
	p := req.NetworkPolicy
	return &p
}

// policy is the network policy a row's spec says is in force.
func (sp sandboxSpec) policy() netpolicy.Policy {
	switch {
	case sp.Policy != nil:
		return *sp.Policy
	case sp.Network:
		return netpolicy.Policy{Mode: netpolicy.ModeOpen}
	}
	return netpolicy.Policy{Mode: netpolicy.ModeNone}
}

// applyRowPolicy installs a row's policy, when it has network: after its
// container (re)starts.
func (s *Service) applyRowPolicy(ctx context.Context, row store.Sandbox) error {
	spec := specOf(row)
	if !spec.Network || s.Firewall == nil {
		return nil
	}
	return s.Firewall.Apply(ctx, row.ID, spec.policy())
}

// removeRowPolicy deletes a sandbox's rules: before its container stops
// or goes.
func (s *Service) removeRowPolicy(ctx context.Context, id string) error {
	if s.Firewall == nil {
		return nil
	}
	return s.Firewall.Remove(ctx, id)
}

// SetNetworkPolicy changes a sandbox's network policy while it runs (or
// is paused, or stopped: in force from its next start): its rules are
// replaced at once, so its next connection obeys the new policy. A
// sandbox made without network cannot get one (its container has no
// interface), nor one with network lose it: mode none is refused both
// ways; use restricted with an empty allow list to cut it off.
func (s *Service) SetNetworkPolicy(ctx context.Context, c Caller, idOrName string, p netpolicy.Policy) (Sandbox, error) {
	p, err := p.Normalize()
	if err != nil {
		return Sandbox{}, invalid("network", "%v", err)
	}
	row, unlock, err := s.lockTransition(ctx, c, idOrName)
	if err != nil {
		return Sandbox{}, err
	}
	defer unlock()
	spec := specOf(row)
	switch {
	case row.Owner == store.PoolOwner || row.Owner == buildOwner:
		return Sandbox{}, fmt.Errorf("sandbox %q: %w", idOrName, ErrNotFound)
	case !spec.Network || !p.HasNetwork():
		return Sandbox{}, invalid("network", "a sandbox keeps having network or not for its life: made with network, its mode is open or restricted; made without, none")
	case s.Firewall == nil:
		return Sandbox{}, fmt.Errorf("network: changing a policy needs the daemon's firewall: %w", ErrUnavailable)
	case s.Cluster != nil && spec.Failover == FailoverRecreate:
		// Its recovery record (in the cluster, for another node to use)
		// has its create's policy: a change here would not survive a
		// failover, so it is not made.
		return Sandbox{}, invalid("network", "a sandbox recreated on failover keeps the network policy it was created with")
	}
	spec.Policy = &p
	if row.State == store.StateRunning || row.State == store.StatePaused {
		if err := s.Firewall.Apply(ctx, row.ID, p); err != nil {
			return Sandbox{}, fmt.Errorf("apply the network policy of %s: %w", row.ID, err)
		}
		// A destroy does not take the transition lock: one that began
		// meanwhile may have removed the rules before this apply put them
		// back, for an address the engine is about to give another
		// sandbox. Such rules go again.
		if cur, err := s.Store.GetSandbox(ctx, row.ID); err != nil || !cur.DestroyingSince.IsZero() {
			if rerr := s.Firewall.Remove(context.WithoutCancel(ctx), row.ID); rerr != nil {
				s.Logger.Warn("network: remove the rules of a sandbox destroyed during a policy change", "sandbox", row.ID, "err", rerr)
			}
			return Sandbox{}, fmt.Errorf("sandbox %q: %w", idOrName, ErrNotFound)
		}
	}
	updated, err := s.Store.UpdateSandbox(ctx, row.ID, store.SandboxUpdate{Spec: marshalSpec(spec)})
	if err != nil {
		// The rules are the new policy's, the row the old one's: put the
		// old rules back, so that what is stored is what holds.
		if row.State == store.StateRunning || row.State == store.StatePaused {
			if aerr := s.applyRowPolicy(context.WithoutCancel(ctx), row); aerr != nil {
				err = errors.Join(err, aerr)
			}
		}
		return Sandbox{}, s.mapStoreErr(err, row.ID)
	}
	return fromRow(updated), nil
}

// sweepFirewall removes the rules of sandboxes that have no running row
// (a daemon killed between a destroy's or a stop's firewall step and the
// rest). rows are a snapshot's: a sandbox created since has no row in it,
// so rules of sandboxes this pass does not know are kept when their row
// exists now.
func (s *Service) sweepFirewall(ctx context.Context, rows []store.Sandbox) error {
	if s.Firewall == nil {
		return nil
	}
	running := make(map[string]bool, len(rows))
	for _, r := range rows {
		running[r.ID] = r.State == store.StateRunning || r.State == store.StatePaused || r.State == store.StateCreating
	}
	return s.Firewall.Sweep(ctx, func(id string) bool {
		if live, known := running[id]; known {
			return live
		}
		row, err := s.Store.GetSandbox(ctx, id)
		return err != nil && !errors.Is(err, store.ErrNotFound) || err == nil && row.State != store.StateStopped
	})
}

// restorePolicies applies again, at startup, the policy of every running
// sandbox with network: the host's rules outlive a daemon, but what the
// name proxy knows of them does not (and a host that lost its rules gets
// them back).
func (s *Service) restorePolicies(ctx context.Context, rows []store.Sandbox, lost map[string]bool) error {
	if s.Firewall == nil {
		return nil
	}
	byID := map[string]store.Sandbox{}
	var ids []string
	for _, r := range rows {
		if (r.State == store.StateRunning || r.State == store.StatePaused) && !lost[r.ID] && r.DestroyingSince.IsZero() &&
			specOf(r).Network && r.Owner != store.PoolOwner { // an idle sandbox has none until its claim
			byID[r.ID] = r
			ids = append(ids, r.ID)
		}
	}
	return errors.Join(parallel(ctx, ids, func(ctx context.Context, id string) error {
		return s.applyRowPolicy(ctx, byID[id])
	})...)
}
