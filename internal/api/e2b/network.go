package e2b

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/service"
)

// E2B's egress settings on sandboxd's network policy.
//
// E2B decides a connection in this order: a destination in allowOut is
// allowed; else one in denyOut is refused (allow_internet_access false is
// denyOut ALL_TRAFFIC); else it is allowed. sandboxd's policy has deny
// over allow instead, so egressPolicy maps the settings onto it without
// changing what reaches what:
//
//   - deny all (denyOut has ALL_TRAFFIC, or allow_internet_access false)
//     and no allowOut: no network (mode none);
//   - deny all and an allowOut: restricted to allowOut (CIDRs, addresses,
//     host names); the rest of denyOut says nothing more and is dropped;
//   - otherwise open, denyOut the deny list. allowOut then only matters
//     where it punches a hole in denyOut, which sandboxd cannot: that is a
//     400, as host names in allowOut are (E2B refuses those too without
//     ALL_TRAFFIC).
//
// Reads show the policy in force (egressJSON), not the request's lists.

// allTraffic is the SDK's ALL_TRAFFIC: every IPv4 destination.
const allTraffic = "0.0.0.0/0"

// msgDomainsNeedDenyAll is E2B's own answer to host names in allowOut
// without ALL_TRAFFIC in denyOut.
const msgDomainsNeedDenyAll = "When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all other traffic."

// egress is what of a create's or an update's body decides where the
// sandbox's connections go.
type egress struct {
	AllowInternet *bool // allow_internet_access; nil: not given (true)
	AllowOut      []string
	DenyOut       []string
	// EgressProxy and Rules are the parts sandboxd does not do (a SOCKS5
	// proxy, header transforms): refused rather than ignored, since either
	// changes where or how traffic goes.
	EgressProxy json.RawMessage
	Rules       json.RawMessage
}

// networkBody is the part of SandboxNetworkConfig (a create's network, a
// PUT /sandboxes/{id}/network body) that egress reads.
type networkBody struct {
	AllowOut    []string        `json:"allowOut"`
	DenyOut     []string        `json:"denyOut"`
	EgressProxy json.RawMessage `json:"egressProxy"`
	Rules       json.RawMessage `json:"rules"`
}

// updateNetworkBody is SandboxNetworkUpdateConfig.
type updateNetworkBody struct {
	networkBody
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

func (n networkBody) egress(allowInternet *bool) egress {
	return egress{AllowInternet: allowInternet, AllowOut: n.AllowOut, DenyOut: n.DenyOut, EgressProxy: n.EgressProxy, Rules: n.Rules}
}

func given(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// egressPolicy is the network policy e asks for, normalized, or a 400
// saying what is wrong with it (see the mapping above). It does no I/O.
func egressPolicy(e egress) (netpolicy.Policy, error) {
	if given(e.EgressProxy) {
		return netpolicy.Policy{}, badRequest("network.egressProxy is not supported: sandboxd has no egress proxy, and sending the traffic directly instead would not be what was asked")
	}
	if given(e.Rules) && string(e.Rules) != "{}" {
		return netpolicy.Policy{}, badRequest("network.rules (request transforms) are not supported")
	}
	// Every entry is checked, whatever the mode keeps of it.
	deny, err := netpolicy.Policy{Mode: netpolicy.ModeOpen, Deny: e.DenyOut}.Normalize()
	if err != nil {
		return netpolicy.Policy{}, badRequest("network.denyOut: %v (an IP address or a CIDR; domain names are not supported for deny rules)", err)
	}
	allow, err := netpolicy.Policy{Mode: netpolicy.ModeRestricted, Allow: e.AllowOut}.Normalize()
	if err != nil {
		return netpolicy.Policy{}, badRequest("network.allowOut: %v (an IP address, a CIDR or a domain name)", err)
	}
	denyAll := e.AllowInternet != nil && !*e.AllowInternet || slices.Contains(deny.Deny, allTraffic)
	switch {
	case denyAll && len(allow.Allow) == 0:
		return netpolicy.Policy{Mode: netpolicy.ModeNone}, nil
	case denyAll:
		return allow, nil
	case len(allow.Hosts()) > 0:
		return netpolicy.Policy{}, badRequest("%s", msgDomainsNeedDenyAll)
	}
	allowed, _ := allow.CIDRs()
	_, denied := deny.CIDRs()
	for _, a := range allowed {
		for _, d := range denied {
			if a.Overlaps(d) {
				return netpolicy.Policy{}, badRequest("network: allowOut %s is inside denyOut %s: sandboxd cannot make an exception to a deny rule; deny ALL_TRAFFIC and list what is allowed instead", a, d)
			}
		}
	}
	return deny, nil
}

// egressJSON is the policy in force on the wire: allowOut and denyOut of
// SandboxNetworkConfig (nil: the field is absent) and allowInternetAccess.
// No network and restricted both deny ALL_TRAFFIC; open denies its deny
// list. Entries are in canonical form (an address is its /32 or /128).
func egressJSON(p netpolicy.Policy) (allowOut, denyOut []string, internet bool) {
	switch p.Mode {
	case netpolicy.ModeOpen:
		return nil, p.Deny, true
	case netpolicy.ModeRestricted:
		// A deny rule of a restricted policy (set through the native API)
		// cuts into its allow list: E2B has no way to say so, and allowOut
		// would claim more than holds. Show only what is allowed for sure.
		allow := make([]string, 0, len(p.Allow))
		for _, a := range p.Allow {
			pfx, err := netip.ParsePrefix(a)
			if err == nil && slices.ContainsFunc(p.Deny, func(d string) bool { return netip.MustParsePrefix(d).Overlaps(pfx) }) {
				continue
			}
			allow = append(allow, a)
		}
		return allow, []string{allTraffic}, false
	}
	return nil, []string{allTraffic}, false
}

// networkJSON is SandboxDetail's network: the create's network object
// (allowPublicTraffic, maskRequestHost, …) with allowOut and denyOut those
// of the policy in force.
func networkJSON(sb service.Sandbox) json.RawMessage {
	obj := map[string]json.RawMessage{}
	if v := sb.Annotations[annNetwork]; v != "" {
		_ = json.Unmarshal([]byte(v), &obj) // ours, compacted at create: always an object
	}
	delete(obj, "allowOut")
	delete(obj, "denyOut")
	delete(obj, "egressProxy")
	delete(obj, "rules")
	allowOut, denyOut, _ := egressJSON(sb.NetworkPolicy)
	if allowOut != nil {
		obj["allowOut"], _ = json.Marshal(allowOut)
	}
	if len(denyOut) > 0 {
		obj["denyOut"], _ = json.Marshal(denyOut)
	}
	if len(obj) == 0 {
		return nil
	}
	b, _ := json.Marshal(obj) // maps of raw JSON always marshal
	return b
}

// createPolicy is a create's network: the policy its egress settings ask
// for on a daemon that gives sandboxes network (--sandbox-network), else
// none whatever they ask (checked all the same, so that a bad CIDR is a
// 400 on every daemon).
func (f *Facade) createPolicy(allowInternet *bool, network json.RawMessage) (netpolicy.Policy, error) {
	var n networkBody
	if given(network) {
		if err := json.Unmarshal(network, &n); err != nil {
			return netpolicy.Policy{}, badRequest("invalid network: %v", err)
		}
	}
	p, err := egressPolicy(n.egress(allowInternet))
	if err != nil || !f.svc.NetworkAllowed() {
		return netpolicy.Policy{Mode: netpolicy.ModeNone}, err
	}
	return p, nil
}

// updateNetwork is PUT /sandboxes/{id}/network (SandboxNetworkUpdateConfig):
// the sandbox's egress replaced at once, its next connection obeying it
// (service.SetNetworkPolicy); 204. Omitted fields are cleared, as on E2B:
// an empty body opens the sandbox. A sandbox keeps having network or not
// for its life, so denying everything to one with network restricts it
// to nothing, and one without network (made with no internet access, or
// on a daemon without --sandbox-network) takes only "deny everything"
// (a no-op); anything else is a 400 saying why.
func (f *Facade) updateNetwork(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body updateNetworkBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	p, err := egressPolicy(body.egress(body.AllowInternetAccess))
	if err != nil {
		return err
	}
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	switch {
	case !sb.NetworkPolicy.HasNetwork() && p.Mode == netpolicy.ModeNone:
		w.WriteHeader(http.StatusNoContent) // what holds already
		return nil
	case !sb.NetworkPolicy.HasNetwork() && !f.svc.NetworkAllowed():
		return badRequest("sandbox %s has no network: this daemon gives sandboxes none (start it with --sandbox-network)", sb.ID)
	case !sb.NetworkPolicy.HasNetwork():
		return badRequest("sandbox %s was created without internet access and has no network interface: a sandbox keeps having network or not for its life; create one with internet access to change its egress", sb.ID)
	case p.Mode == netpolicy.ModeNone:
		p = netpolicy.Policy{Mode: netpolicy.ModeRestricted} // deny everything, keep the interface
	}
	if _, err := f.svc.SetNetworkPolicy(r.Context(), c, sb.ID, p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
