package daytona

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/service"
)

// maxAllowCIDRs is how many CIDRs Daytona's networkAllowList takes.
const maxAllowCIDRs = 5

// networkSettings are Daytona's network options: CreateSandbox's and
// UpdateSandboxNetworkSettings'. A nil field is one the caller left out.
type networkSettings struct {
	NetworkBlockAll  *bool   `json:"networkBlockAll"`
	NetworkAllowList *string `json:"networkAllowList"`
	DomainAllowList  *string `json:"domainAllowList"`
}

// allowed is what the lists name: CIDRs (networkAllowList) and host names
// (domainAllowList), nil where a list is absent. The CIDRs are checked
// here (Daytona's form: IPv4 CIDRs, at most five); the names by the
// service (netpolicy.Normalize).
type allowed struct{ cidrs, hosts *[]string }

func (a allowed) any() bool {
	return a.cidrs != nil && len(*a.cidrs) > 0 || a.hosts != nil && len(*a.hosts) > 0
}

// names are the lists with entries, for a message.
func (a allowed) names() string {
	var names []string
	if a.cidrs != nil && len(*a.cidrs) > 0 {
		names = append(names, "networkAllowList")
	}
	if a.hosts != nil && len(*a.hosts) > 0 {
		names = append(names, "domainAllowList")
	}
	return strings.Join(names, " and ")
}

func (n networkSettings) lists() (allowed, error) {
	var a allowed
	if n.NetworkAllowList != nil {
		cidrs, err := parseCIDRList(*n.NetworkAllowList)
		if err != nil {
			return allowed{}, err
		}
		a.cidrs = &cidrs
	}
	if n.DomainAllowList != nil {
		hosts := splitList(*n.DomainAllowList)
		a.hosts = &hosts
	}
	if n.NetworkBlockAll != nil && *n.NetworkBlockAll && a.any() {
		return allowed{}, badRequest("networkBlockAll true blocks everything, networkAllowList and domainAllowList allow some: set one or the other")
	}
	return a, nil
}

// parseCIDRList splits a networkAllowList: comma-separated IPv4 CIDRs
// (a.b.c.d/n), at most maxAllowCIDRs. "" is an empty list.
func parseCIDRList(s string) ([]string, error) {
	items := splitList(s)
	if len(items) > maxAllowCIDRs {
		return nil, badRequest("networkAllowList: at most %d CIDRs, got %d", maxAllowCIDRs, len(items))
	}
	for _, item := range items {
		pfx, err := netip.ParsePrefix(item)
		if err != nil || !pfx.Addr().Is4() {
			return nil, badRequest("networkAllowList: %q is not an IPv4 CIDR (like 10.0.0.0/8 or 203.0.113.7/32)", item)
		}
	}
	return items, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// restrictedTo is a policy allowing the lists' entries only (none at all
// when both are empty: cut off but for DNS).
func restrictedTo(a allowed) netpolicy.Policy {
	p := netpolicy.Policy{Mode: netpolicy.ModeRestricted}
	for _, l := range []*[]string{a.cidrs, a.hosts} {
		if l != nil {
			p.Allow = append(p.Allow, *l...)
		}
	}
	return p
}

// createPolicy is the policy a create asks for. On a daemon that gives
// sandboxes network (networkAllowed): networkBlockAll is none, an allow
// list restricted to it, neither open (Daytona's default). Without it,
// every sandbox has none, and an allow list, which asks for some network,
// is a 400.
func createPolicy(n networkSettings, networkAllowed bool) (netpolicy.Policy, error) {
	a, err := n.lists()
	switch {
	case err != nil:
		return netpolicy.Policy{}, err
	case a.any() && !networkAllowed:
		return netpolicy.Policy{}, badRequest("%s: this daemon gives sandboxes no network (it runs without --sandbox-network); "+
			"leave the allow lists unset, or set networkBlockAll", a.names())
	case a.any():
		return restrictedTo(a), nil
	case n.NetworkBlockAll != nil && *n.NetworkBlockAll || !networkAllowed:
		return netpolicy.Policy{Mode: netpolicy.ModeNone}, nil
	}
	return netpolicy.Policy{Mode: netpolicy.ModeOpen}, nil
}

// blocked reports whether p lets a sandbox reach nothing: no network, or
// restricted with an empty allow list (DNS only). Daytona's
// networkBlockAll.
func blocked(p netpolicy.Policy) bool {
	return !p.HasNetwork() || p.Mode == netpolicy.ModeRestricted && len(p.Allow) == 0
}

// updatedPolicy is the policy an UpdateSandboxNetworkSettings makes of cur
// (the policy in force), Daytona's way: each field given replaces what it
// names, each left out keeps it.
//
//   - networkBlockAll true: blocked (restricted with nothing allowed: a
//     sandbox with network keeps it for its life). With an allow list as
//     well it is a 400.
//   - networkBlockAll false: unblocked, and the stored allow lists cleared
//     (open, unless the update gives a list).
//   - networkAllowList, domainAllowList: that list replaced ("" clears it);
//     a non-empty list unblocks.
//
// The result is restricted to the lists when either has entries, else
// blocked or open. cur's deny list (set through the native API) is kept.
// ok is false when the update changes nothing a sandbox without network
// could have (it is blocked, and stays so).
func updatedPolicy(cur netpolicy.Policy, n networkSettings) (p netpolicy.Policy, ok bool, err error) {
	if n.NetworkBlockAll == nil && n.NetworkAllowList == nil && n.DomainAllowList == nil {
		return netpolicy.Policy{}, false, badRequest("at least one of networkBlockAll, networkAllowList or domainAllowList must be set")
	}
	a, err := n.lists()
	if err != nil {
		return netpolicy.Policy{}, false, err
	}
	isBlocked := blocked(cur)
	var cidrs, hosts []string
	if cur.Mode == netpolicy.ModeRestricted {
		allow, _ := cur.CIDRs()
		for _, pfx := range allow {
			cidrs = append(cidrs, pfx.String())
		}
		hosts = cur.Hosts()
	}
	if n.NetworkBlockAll != nil {
		isBlocked = *n.NetworkBlockAll
		if !isBlocked {
			cidrs, hosts = nil, nil
		}
	}
	if a.cidrs != nil {
		cidrs = *a.cidrs
	}
	if a.hosts != nil {
		hosts = *a.hosts
	}
	if a.any() {
		isBlocked = false
	}
	switch {
	case isBlocked && !cur.HasNetwork():
		return cur, false, nil
	case isBlocked:
		p = netpolicy.Policy{Mode: netpolicy.ModeRestricted}
	case len(cidrs) > 0 || len(hosts) > 0:
		p = restrictedTo(allowed{cidrs: &cidrs, hosts: &hosts})
	default:
		p = netpolicy.Policy{Mode: netpolicy.ModeOpen}
	}
	p.Deny = cur.Deny
	return p, true, nil
}

// updateNetwork is POST /sandbox/{id}/network-settings
// (UpdateSandboxNetworkSettings): the sandbox's policy is replaced at once
// (updatedPolicy), its next connection obeys it; 200 with the Sandbox. A
// sandbox keeps having network or not for its life: one made without
// (networkBlockAll, or a daemon without --sandbox-network) can be blocked
// (a no-op) but never given network (400). Two updates at once: the last
// one's policy holds, computed from what it read.
func (f *Facade) updateNetwork(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body networkSettings
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	p, change, err := updatedPolicy(sb.NetworkPolicy, body)
	switch {
	case err != nil:
		return err
	case change && !sb.NetworkPolicy.HasNetwork():
		msg := "sandbox %s was created without network and a sandbox keeps having network or not for its life: " +
			"create one without networkBlockAll"
		if !f.svc.NetworkAllowed() {
			msg += " on a daemon started with --sandbox-network (this one gives sandboxes no network)"
		}
		return badRequest(msg, sb.ID)
	case change:
		if sb, err = f.svc.SetNetworkPolicy(r.Context(), c, sb.ID, p); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}
