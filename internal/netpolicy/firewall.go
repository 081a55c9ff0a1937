package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// The firewall lives in the host's iptables (filter and nat tables of the
// host's network namespace), not in the sandbox's: a sandbox has no
// CAP_NET_ADMIN, and even with it would reach only its own namespace. It
// works the same for containers and gVisor, whose packets both leave
// through the sandbox's veth into the host.
//
//	filter FORWARD (first)      -i <bridge> -j SBXD-F-<bridge>
//	filter DOCKER-USER (first)  -i <bridge> -j SBXD-F-<bridge>
//	filter SBXD-F-<bridge>      -s <ip>/32 -g SBX-<hash>  (one per sandbox)
//	                            -j REJECT                 (a sandbox without rules reaches nothing)
//	filter SBX-<hash>           the sandbox's policy: REJECT or RETURN (to Docker's own rules)
//	filter INPUT (first)        -i <bridge> -j SBXD-I-<bridge>
//	filter SBXD-I-<bridge>      the name proxies' ports, then REJECT: no host service answers a sandbox
//	nat PREROUTING (first)      -i <bridge> -j SBXD-N-<bridge>
//	nat SBXD-N-<bridge>         -s <ip>/32 tcp 80,443 -j DNAT <gateway>:<proxy port>  (sandboxes with name rules)
//
// SBXD-F is hooked twice. DOCKER-USER is where the engine keeps a user's
// rules ahead of its own, but every network the engine creates (any
// daemon's, any operator's) makes it delete FORWARD's jump to DOCKER-USER
// and insert it again, with two iptables processes: in between, the
// engine's "-i <bridge> ! -o <bridge> -j ACCEPT" passes a restricted
// sandbox's first packet, and that connection's ESTABLISHED packets are
// let through after. FORWARD's own first rule is never touched by the
// engine, so the policy holds through that moment; the chain is then
// walked twice on a packet, with the same verdict.
//
// A restricted sandbox's established traffic passes only on connections
// its current policy allowed. The allow rules mark the connection
// (CONNMARK, the bits of connMarkMask) with the sandbox's current mark,
// drawn anew at every Apply; ESTABLISHED and RELATED packets the sandbox
// sends pass only when their connection carries it. Any other
// established packet is judged as a new one: a connection that got past
// while no rule held (a packet that slipped through a rewrite, an open
// sandbox restricted since), or that an earlier policy allowed, goes on
// if the policy allows it now (and is marked again) and is cut (REJECT,
// a TCP reset) if not. Replies of connections the sandbox did not open
// (conntrack's reply direction) pass as before: the policy is about what
// the sandbox reaches.
//
//	filter SBX-<hash>  (restricted)  the deny rules: REJECT
//	                   ESTABLISHED,RELATED --ctdir REPLY: RETURN
//	                   ESTABLISHED,RELATED with the mark: RETURN
//	                   DNS and each allow rule: CONNMARK --set-xmark <mark>,
//	                   then RETURN
//	                   anything else: REJECT
//
// Daemons that share the bridge (a host's daemons share one network)
// share its chains: a sandbox's rules are its own, by id. A sandbox's
// rules are replaced in one iptables-restore batch, so a policy change
// never passes through an open moment. Jump rules carry the sandbox's id
// in a comment, which is how Sweep finds the rules of sandboxes that are
// gone.
const (
	sandboxChain = "SBX-"
	commentTag   = "sandbox:"
)

// connMarkMask are the conntrack mark bits the restricted chains use:
// bits 16 to 27 (the engine sets no conntrack mark; kube-proxy's and
// most others' marks are the packet's, below bit 16). A sandbox's mark
// is one of their non-zero values (4063: newMark leaves out 32).
const connMarkMask = 0x0fff0000

// markPattern finds a restricted chain's mark in `iptables -S`.
var markPattern = regexp.MustCompile(`--mark (0x[0-9a-f]+)/` + fmt.Sprintf("%#x", connMarkMask))

// newMark draws a sandbox's mark: random, non-zero, not prev. Random
// rather than counted: a sandbox that gets an address a destroyed one
// had must not find that one's connections marked as its own. Two values
// are never drawn: a host running Tailscale copies conntrack bits 16 to
// 23 into the packet mark, where 0x04 and 0x08 there are its own
// (subnet route, bypass) marks.
func newMark(prev uint32) uint32 {
	for {
		var b [2]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand contract)
		m := (uint32(b[0])<<8 | uint32(b[1])) & 0x0fff << 16
		if low := m >> 16 & 0xff; low == 0x04 || low == 0x08 {
			continue
		}
		if m != 0 && m != prev {
			return m
		}
	}
}

func (f *Firewall) chainForward() string { return "SBXD-F-" + f.opts.Bridge }
func (f *Firewall) chainInput() string   { return "SBXD-I-" + f.opts.Bridge }
func (f *Firewall) chainNAT() string     { return "SBXD-N-" + f.opts.Bridge }

// Options configure a Firewall.
type Options struct {
	// Bridge is the sandboxes' bridge interface, Subnet its addresses and
	// Gateway the host's address on it.
	Bridge  string
	Subnet  netip.Prefix
	Gateway netip.Addr
	// ProxyPort is the name proxy's port on Gateway (0: none, and host
	// name rules let nothing through).
	ProxyPort int
	// Resolvers are the DNS servers the engine's resolver asks for the
	// sandboxes (HostResolvers): a restricted sandbox reaches port 53 of
	// these and of no other address.
	Resolvers []netip.Addr
	// PrivateReachable are private ranges the name proxy may connect to
	// by name (a name rule reaches public addresses only otherwise).
	PrivateReachable []netip.Prefix
	// Denied are addresses no sandbox reaches whatever its policy says
	// (the cluster's template registry, which holds every tenant's
	// templates), beside link-local.
	Denied []netip.Prefix
	Logger *slog.Logger
	// Run runs an iptables command with stdin (nil: the host's binaries).
	Run func(ctx context.Context, stdin string, name string, args ...string) (string, error)
}

// Firewall applies sandboxes' policies. Safe for concurrent use: calls
// are serialized (iptables has one lock per host anyway).
type Firewall struct {
	opts Options
	mu   sync.Mutex
	// jumps is the copy of every sandbox's jump rules (nil: read them
	// from iptables first), so that a policy change is one iptables-restore.
	jumps map[string]sandboxJumps
	// marks is each restricted sandbox's chain's current connection mark
	// (by chain), marksRead whether the chains were read for those this
	// process did not set (markOf).
	marks     map[string]uint32
	marksRead bool

	// The policies this process applied, for the name proxy: by address,
	// and each sandbox's address.
	pmu    sync.Mutex
	byAddr map[netip.Addr]Policy
	addrOf map[string]netip.Addr
}

// remember records (or, with an invalid ip, forgets) sandbox id's policy
// for the proxy.
func (f *Firewall) remember(id string, ip netip.Addr, p Policy) {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	if f.byAddr == nil {
		f.byAddr, f.addrOf = map[netip.Addr]Policy{}, map[string]netip.Addr{}
	}
	if old, ok := f.addrOf[id]; ok {
		delete(f.byAddr, old)
		delete(f.addrOf, id)
	}
	if ip.IsValid() {
		f.byAddr[ip], f.addrOf[id] = p, ip
	}
}

// policyAt is the policy of the sandbox at ip, if this process applied
// one with host name rules.
func (f *Firewall) policyAt(ip netip.Addr) (Policy, bool) {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	p, ok := f.byAddr[ip]
	return p, ok && len(p.Hosts()) > 0
}

// New returns a firewall for the bridge; Setup installs its base rules.
func New(opts Options) *Firewall {
	if opts.Run == nil {
		opts.Run = runCommand
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Firewall{opts: opts}
}

func runCommand(ctx context.Context, stdin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (f *Firewall) iptables(ctx context.Context, table string, args ...string) (string, error) {
	return f.opts.Run(ctx, "", "iptables", append([]string{"-w", "-t", table}, args...)...)
}

func (f *Firewall) restore(ctx context.Context, batch string) error {
	_, err := f.opts.Run(ctx, batch, "iptables-restore", "-w", "--noflush")
	return err
}

// Setup installs the bridge's chains and jumps, keeping every sandbox's
// rules a previous process installed. Idempotent.
func (f *Firewall) Setup(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ensureLocked(ctx)
}

func (f *Firewall) ensureLocked(ctx context.Context) error {
	br := f.opts.Bridge
	for _, c := range []struct{ table, chain string }{
		{"filter", "DOCKER-USER"}, {"filter", f.chainForward()}, {"filter", f.chainInput()}, {"nat", f.chainNAT()},
	} {
		if _, err := f.iptables(ctx, c.table, "-S", c.chain); err != nil {
			if _, err := f.iptables(ctx, c.table, "-N", c.chain); err != nil {
				return fmt.Errorf("firewall setup: %w", err)
			}
		}
	}
	type rule struct {
		table, chain, spec string
		first              bool
	}
	ensure := []rule{
		{"filter", f.chainForward(), "-j REJECT", false},
		{"filter", f.chainInput(), "-j REJECT", false},
		{"filter", "DOCKER-USER", "-i " + br + " -j " + f.chainForward(), true},
		{"filter", "FORWARD", "-i " + br + " -j " + f.chainForward(), true},
		{"filter", "INPUT", "-i " + br + " -j " + f.chainInput(), true},
		{"nat", "PREROUTING", "-i " + br + " -j " + f.chainNAT(), true},
	}
	if f.opts.ProxyPort > 0 {
		ensure = append(ensure, rule{"filter", f.chainInput(), fmt.Sprintf("-d %s/32 -p tcp -m tcp --dport %d -j ACCEPT", f.opts.Gateway, f.opts.ProxyPort), true})
	}
	for _, e := range ensure {
		spec := strings.Fields(e.spec)
		if _, err := f.iptables(ctx, e.table, append([]string{"-C", e.chain}, spec...)...); err == nil {
			continue
		}
		op := []string{"-A", e.chain}
		if e.first {
			op = []string{"-I", e.chain, "1"}
		}
		if _, err := f.iptables(ctx, e.table, append(op, spec...)...); err != nil {
			return fmt.Errorf("firewall setup: %w", err)
		}
	}
	return nil
}

// Teardown removes the bridge's chains, jumps and every sandbox rule in
// them: for a bridge that is going away (tests). A daemon that stops
// keeps them, for its sandboxes that run on.
func (f *Firewall) Teardown(ctx context.Context) error {
	f.mu.Lock()
	all, err := f.listJumps(ctx)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for id := range all {
		if err := f.Remove(ctx, id); err != nil {
			return err
		}
	}
	br := f.opts.Bridge
	for _, j := range []struct{ table, chain, spec string }{
		{"filter", "DOCKER-USER", "-i " + br + " -j " + f.chainForward()},
		{"filter", "FORWARD", "-i " + br + " -j " + f.chainForward()},
		{"filter", "INPUT", "-i " + br + " -j " + f.chainInput()},
		{"nat", "PREROUTING", "-i " + br + " -j " + f.chainNAT()},
	} {
		_, _ = f.iptables(ctx, j.table, append([]string{"-D", j.chain}, strings.Fields(j.spec)...)...)
	}
	for _, c := range []struct{ table, chain string }{{"filter", f.chainForward()}, {"filter", f.chainInput()}, {"nat", f.chainNAT()}} {
		_, _ = f.iptables(ctx, c.table, "-F", c.chain)
		_, _ = f.iptables(ctx, c.table, "-X", c.chain)
	}
	return nil
}

// chainOf is sandbox id's chain: a hash, as ids may be longer than a
// chain name (28 bytes).
func chainOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return sandboxChain + hex.EncodeToString(sum[:])[:20]
}

// Apply installs p for sandbox id at ip, replacing whatever it had, in
// one batch. A policy of mode none removes its rules (a sandbox without
// network has no address to match).
func (f *Firewall) Apply(ctx context.Context, id string, ip netip.Addr, p Policy) error {
	if p.Mode == ModeNone {
		return f.Remove(ctx, id)
	}
	if !ip.Is4() {
		return fmt.Errorf("firewall: sandbox %s has no IPv4 address (%v)", id, ip)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.applyLocked(ctx, id, ip, p)
	if err != nil {
		// The copy of the rules may be stale (another daemon on the bridge,
		// a hand edit): read them again and try once more.
		f.jumps = nil
		err = f.applyLocked(ctx, id, ip, p)
	}
	if err != nil {
		return fmt.Errorf("firewall: apply the policy of %s: %w", id, err)
	}
	f.remember(id, ip, p)
	return nil
}

func (f *Firewall) applyLocked(ctx context.Context, id string, ip netip.Addr, p Policy) error {
	all, err := f.loadedJumps(ctx)
	if err != nil {
		return err
	}
	// Its own rules go, and any other sandbox's for the same address: a
	// dead process's leftovers must never be this sandbox's policy.
	old := all[id]
	src := "-s " + ip.String() + "/32 "
	for other, j := range all {
		if other == id {
			continue
		}
		var keep sandboxJumps
		for _, r := range j.filter {
			if strings.Contains(r, src) {
				old.filter = append(old.filter, r)
			} else {
				keep.filter = append(keep.filter, r)
			}
		}
		for _, r := range j.nat {
			if strings.Contains(r, src) {
				old.nat = append(old.nat, r)
			} else {
				keep.nat = append(keep.nat, r)
			}
		}
		defer func() {
			if err == nil {
				f.setJumps(other, keep)
			}
		}()
	}
	var mark uint32
	if p.Mode == ModeRestricted {
		mark = newMark(f.markOf(ctx, id, len(old.filter) > 0))
	}
	batch, added := f.batch(id, ip, p, mark, old.filter, old.nat)
	if err = f.restore(ctx, batch); err != nil {
		return err
	}
	f.setJumps(id, added)
	if mark != 0 {
		// An open policy keeps the last mark remembered: a later
		// restricted one must not draw it again while connections an
		// earlier one allowed may still carry it.
		f.setMark(id, mark)
	}
	return nil
}

// markOf is sandbox id's current mark (0: none). A sandbox with rules
// (hasChain) whose mark this process has not set (a restarted daemon)
// has it read from its chain: the next mark must differ from it, or the
// connections the old policy allowed would pass the new one unjudged.
// The marks of every chain are read at once, with one `iptables -S` the
// first time one is needed; a fresh sandbox (no chain) needs none, so a
// create never runs it.
func (f *Firewall) markOf(ctx context.Context, id string, hasChain bool) uint32 {
	if hasChain && !f.marksRead {
		if f.marks == nil {
			f.marks = map[string]uint32{}
		}
		text, err := f.iptables(ctx, "filter", "-S")
		if err != nil {
			f.opts.Logger.Warn("firewall: read the restricted chains' marks (read again next time)", "err", err)
		} else {
			f.marksRead = true
		}
		for line := range strings.Lines(text) {
			rest, ok := strings.CutPrefix(line, "-A "+sandboxChain)
			if !ok {
				continue
			}
			chain := sandboxChain + strings.Fields(rest)[0]
			if m := markPattern.FindStringSubmatch(line); m != nil {
				if v, err := strconv.ParseUint(m[1], 0, 32); err == nil {
					f.marks[chain] = uint32(v)
				}
			}
		}
	}
	return f.marks[chainOf(id)]
}

func (f *Firewall) setMark(id string, mark uint32) {
	if mark == 0 {
		delete(f.marks, chainOf(id))
		return
	}
	if f.marks == nil {
		f.marks = map[string]uint32{}
	}
	f.marks[chainOf(id)] = mark
}

// loadedJumps is the copy of every sandbox's jump rules, read from
// iptables the first time (and after a failed batch).
func (f *Firewall) loadedJumps(ctx context.Context) (map[string]sandboxJumps, error) {
	if f.jumps == nil {
		all, err := f.listJumps(ctx)
		if err != nil {
			return nil, err
		}
		f.jumps = all
	}
	return f.jumps, nil
}

func (f *Firewall) setJumps(id string, j sandboxJumps) {
	if f.jumps == nil {
		return
	}
	if len(j.filter) == 0 && len(j.nat) == 0 {
		delete(f.jumps, id)
		return
	}
	f.jumps[id] = j
}

// batch is the iptables-restore input that installs p for id at ip and
// deletes the jump rules old* (the sandbox's previous ones); mark is a
// restricted sandbox's connection mark (newMark).
func (f *Firewall) batch(id string, ip netip.Addr, p Policy, mark uint32, oldFilter, oldNAT []string) (string, sandboxJumps) {
	var added sandboxJumps
	chain, comment, src := chainOf(id), commentTag+id, ip.String()+"/32"
	allow, deny := p.CIDRs()
	var b strings.Builder
	b.WriteString("*filter\n")
	fmt.Fprintf(&b, ":%s - [0:0]\n", chain) // declared: created, or emptied
	for _, d := range deny {
		fmt.Fprintf(&b, "-A %s -d %s -j REJECT\n", chain, d)
	}
	fmt.Fprintf(&b, "-A %s -d 169.254.0.0/16 -j REJECT\n", chain)
	for _, d := range f.opts.Denied {
		if d.Addr().Is4() {
			fmt.Fprintf(&b, "-A %s -d %s -j REJECT\n", chain, d)
		}
	}
	if p.Mode == ModeRestricted {
		// See "established traffic" above.
		marked := fmt.Sprintf("-m connmark --mark %#x/%#x", mark, connMarkMask)
		setMark := fmt.Sprintf("-j CONNMARK --set-xmark %#x/%#x", mark, connMarkMask)
		fmt.Fprintf(&b, "-A %s -m conntrack --ctstate ESTABLISHED,RELATED --ctdir REPLY -j RETURN\n", chain)
		fmt.Fprintf(&b, "-A %s -m conntrack --ctstate ESTABLISHED,RELATED %s -j RETURN\n", chain, marked)
		// Each allowed destination marks its connection and returns in
		// its own right: a packet conntrack does not track (NOTRACK, an
		// entry expired under nf_conntrack_tcp_loose=0) carries no mark
		// and must still pass where the policy allows it.
		allowRule := func(match string) {
			fmt.Fprintf(&b, "-A %s %s %s\n", chain, match, setMark)
			fmt.Fprintf(&b, "-A %s %s -j RETURN\n", chain, match)
		}
		for _, r := range f.opts.Resolvers {
			allowRule(fmt.Sprintf("-d %s/32 -p udp -m udp --dport 53", r))
			allowRule(fmt.Sprintf("-d %s/32 -p tcp -m tcp --dport 53", r))
		}
		for _, a := range allow {
			if a.Addr().Is4() {
				allowRule("-d " + a.String())
			}
		}
		fmt.Fprintf(&b, "-A %s -p tcp -j REJECT --reject-with tcp-reset\n", chain)
		fmt.Fprintf(&b, "-A %s -j REJECT\n", chain)
	} else {
		fmt.Fprintf(&b, "-A %s -j RETURN\n", chain)
	}
	for _, old := range oldFilter {
		fmt.Fprintf(&b, "-D %s\n", old)
	}
	jump := fmt.Sprintf("%s -s %s -m comment --comment %s -g %s", f.chainForward(), src, comment, chain)
	added.filter = append(added.filter, jump)
	fmt.Fprintf(&b, "-I %s\n", strings.Replace(jump, " ", " 1 ", 1))
	b.WriteString("COMMIT\n*nat\n")
	for _, old := range oldNAT {
		fmt.Fprintf(&b, "-D %s\n", old)
	}
	if p.Mode == ModeRestricted && len(p.Hosts()) > 0 && f.opts.ProxyPort > 0 {
		dnat := fmt.Sprintf("%s -s %s -p tcp -m multiport --dports 80,443 -m comment --comment %s -j DNAT --to-destination %s:%d",
			f.chainNAT(), src, comment, f.opts.Gateway, f.opts.ProxyPort)
		added.nat = append(added.nat, dnat)
		fmt.Fprintf(&b, "-A %s\n", dnat)
	}
	b.WriteString("COMMIT\n")
	return b.String(), added
}

type sandboxJumps struct{ filter, nat []string }

// listJumps reads every sandbox's jump rules, by the id in their comment.
func (f *Firewall) listJumps(ctx context.Context) (map[string]sandboxJumps, error) {
	out := map[string]sandboxJumps{}
	for _, t := range []struct{ table, chain string }{{"filter", f.chainForward()}, {"nat", f.chainNAT()}} {
		text, err := f.iptables(ctx, t.table, "-S", t.chain)
		if err != nil {
			return nil, fmt.Errorf("firewall: list %s: %w", t.chain, err)
		}
		sc := bufio.NewScanner(strings.NewReader(text))
		for sc.Scan() {
			rule, ok := strings.CutPrefix(sc.Text(), "-A ")
			if !ok {
				continue
			}
			id := commentID(rule)
			if id == "" {
				continue
			}
			j := out[id]
			if t.table == "filter" {
				j.filter = append(j.filter, rule)
			} else {
				j.nat = append(j.nat, rule)
			}
			out[id] = j
		}
	}
	return out, nil
}

// commentID is the sandbox id in a rule's "--comment sandbox:<id>".
func commentID(rule string) string {
	_, after, ok := strings.Cut(rule, "--comment ")
	if !ok {
		return ""
	}
	c := strings.Fields(after)[0]
	if unq, err := strconv.Unquote(c); err == nil {
		c = unq
	}
	id, _ := strings.CutPrefix(c, commentTag)
	if id == c {
		return ""
	}
	return id
}

// Remove deletes sandbox id's rules; none is not an error.
func (f *Firewall) Remove(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	all, err := f.loadedJumps(ctx)
	if err != nil {
		return err
	}
	if err := f.remove(ctx, id, all[id]); err != nil {
		f.jumps = nil // stale copy: read again, try once more
		if all, err = f.loadedJumps(ctx); err != nil {
			return err
		}
		return f.remove(ctx, id, all[id])
	}
	return nil
}

func (f *Firewall) remove(ctx context.Context, id string, j sandboxJumps) error {
	f.remember(id, netip.Addr{}, Policy{})
	f.setMark(id, 0)
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, r := range j.filter {
		fmt.Fprintf(&b, "-D %s\n", r)
	}
	b.WriteString("COMMIT\n*nat\n")
	for _, r := range j.nat {
		fmt.Fprintf(&b, "-D %s\n", r)
	}
	b.WriteString("COMMIT\n")
	if len(j.filter) > 0 || len(j.nat) > 0 {
		if err := f.restore(ctx, b.String()); err != nil {
			return fmt.Errorf("firewall: remove the rules of %s: %w", id, err)
		}
		f.setJumps(id, sandboxJumps{})
	}
	// The chain: flushed and deleted in one batch when it exists (a
	// sandbox without rules has none: nothing more to run).
	if len(j.filter) == 0 {
		return nil
	}
	chain := chainOf(id)
	if err := f.restore(ctx, fmt.Sprintf("*filter\n:%s - [0:0]\n-X %s\nCOMMIT\n", chain, chain)); err != nil {
		return fmt.Errorf("firewall: remove the chain of %s: %w", id, err)
	}
	return nil
}

// Sweep removes the rules of every sandbox live says is gone (a daemon
// killed between a destroy and its firewall step).
func (f *Firewall) Sweep(ctx context.Context, live func(id string) bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The base rules again: a firewall reload or an engine restart may
	// have dropped a jump, which would leave every sandbox unfiltered.
	if err := f.ensureLocked(ctx); err != nil {
		return err
	}
	all, err := f.listJumps(ctx)
	if err != nil {
		return err
	}
	f.jumps = all // the copy, refreshed
	for id, j := range all {
		if live(id) {
			continue
		}
		if err := f.remove(ctx, id, j); err != nil {
			return err
		}
		f.opts.Logger.Info("firewall: removed the rules of a sandbox that is gone", "sandbox", id)
	}
	return nil
}

// Addressed is a Firewall that finds each sandbox's address itself (from
// the engine), for callers that know sandboxes by id only.
type Addressed struct {
	*Firewall
	IPOf func(ctx context.Context, id string) (netip.Addr, error)
}

// Apply installs p for sandbox id at the address IPOf gives.
func (a Addressed) Apply(ctx context.Context, id string, p Policy) error {
	ip, err := a.IPOf(ctx, id)
	if err != nil {
		return err
	}
	return a.Firewall.Apply(ctx, id, ip, p)
}

// HostResolvers are the DNS servers the engine's resolver forwards the
// sandboxes' queries to: the host's resolv.conf's nameservers but
// loopback ones (which the engine cannot use from a sandbox), else the
// engine's defaults.
func HostResolvers(resolvConf []byte) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(resolvConf))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() && !a.IsLoopback() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("8.8.4.4")}
	}
	return out
}
