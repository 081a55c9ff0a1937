package service_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/ingress"
	"github.com/sandboxd/sandboxd/internal/netpolicy/netpolicytest"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/runtime/docker"
	"github.com/sandboxd/sandboxd/internal/runtime/runtimetest"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/internal/service"
	"github.com/sandboxd/sandboxd/internal/store"
	"github.com/sandboxd/sandboxd/internal/store/storetest"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/internal/volume"
)

// Images built by scripts/build-images.sh (make setup).
const (
	busybox = "sandboxd/busybox:latest"
	base    = "sandboxd/base:bookworm"
)

var agentBinary string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run builds the agent only when the tests that need it will run
// (testenv.HasDocker): without an engine every harness test skips, saying
// why, and the pure tests still run. After the tests it fails the run if a
// container of a node a test used is left.
func run(m *testing.M) int {
	if !testenv.HasDocker() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "service-test-agent")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if agentBinary, err = runtimetest.BuildAgent(context.Background(), dir); err != nil {
		fmt.Fprintln(os.Stderr, "build toolboxd:", err)
		return 1
	}
	return testenv.Exit(m.Run())
}

// harness is a real service — SQLite, Docker, keyring, admission, routes,
// volumes — with a fault-injecting wrapper around every dependency.
type harness struct {
	svc     *service.Service
	store   *faultyStore
	rt      *runtimetest.Faulty
	routes  *faultyRouter
	adm     *admission.Controller
	admFail *faultyAdmission
	vols    *faultyVolumes
	clock   *storetest.Clock
	keyring *secrets.Keyring
	nodeID  string
	volRoot string // the volume directory's root on the host
	hibDir  string // Config.HibernateDir ("" without harnessOptions.hibernate)
	// sockRoot is the runtime's socket root: sandbox id's agent sockets
	// (and a parked agent's marker) are in sockRoot/id.
	sockRoot string
	drt      *docker.Runtime
	netName  string // the test's network and its bridge ("" without harnessOptions.network)
}

type harnessOptions struct {
	budget admission.Budget
	pool   []service.PoolTarget // the warm pool's targets (none: no pool)
	// cluster, when set, is the service's cluster (cluster mode).
	cluster service.Cluster
	// pauseMax is Config.PauseMax (zero: a paused sandbox is never stopped).
	pauseMax time.Duration
	// memory, when set, is Deps.HostMemory, with a 10% floor.
	memory service.HostMemory
	// network gives the service a network of the test's own (a bridge,
	// traffic between its containers off) and the firewall on it, and
	// lets sandboxes have network.
	network bool
	// resolver is Deps.Resolver (nil: the system's).
	resolver service.TXTResolver
	// puller, when set, wraps the engine's Puller and the service pulls
	// (only from 127.0.0.1); nil: no Puller, a missing image is refused
	// as not present. pullIdleGrace is Config.PullIdleGrace.
	puller        func(runtime.Puller) runtime.Puller
	pullIdleGrace time.Duration
	// oci runs the sandboxes with internal/runtime/oci (on the same
	// bridge with network), the engine keeping the images and the oci
	// runtime committing its sandboxes, as the daemon's --engine oci
	// does; SANDBOXD_TEST_ENGINE=oci sets it for every harness.
	oci bool
	// hibernate gives the service a hibernate directory (Config.HibernateDir)
	// and, with oci, gVisor sandboxes (Config.GVisor).
	hibernate bool
	// hibernateMaxMB is Config.HibernateStorageMaxMB.
	hibernateMaxMB int64
	// hibernateTmpfs mounts a file system of its own (a tmpfs) on the
	// hibernate directory, as an operator may give the images a disk.
	hibernateTmpfs bool
	// templateStorageMB is Config.TemplateStorageMB (0: unlimited).
	templateStorageMB int64
}

func newHarness(t *testing.T, opts harnessOptions) *harness {
	t.Helper()
	testenv.NeedsDocker(t)
	if os.Getenv("SANDBOXD_TEST_ENGINE") == "oci" { // daemontest.EnvEngine
		opts.oci = true
	}
	ctx := t.Context()
	var b [6]byte
	rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	nodeID := "svctest-" + suffix
	clk := storetest.NewClockAt(time.Now())

	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "db.sqlite"), store.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	kr, err := secrets.OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Socket paths must fit in 108 bytes: keep the root short.
	sockRoot := filepath.Join(os.TempDir(), "sbt-"+suffix)
	t.Cleanup(func() { os.RemoveAll(sockRoot) })
	testenv.TrackNode(t, nodeID) // runs after the cleanup below: removes what it missed
	netName := ""
	if opts.network {
		netName = "sbt" + suffix // an interface name: at most 15 bytes
	}
	drt, err := docker.New(docker.Options{NodeID: nodeID, SocketRoot: sockRoot, QualifyNames: opts.cluster != nil, Network: netName})
	if err != nil {
		t.Fatal(err)
	}
	var firewall service.Firewall
	if opts.network {
		firewall = netpolicytest.New(t, drt, netName)
	}
	var rt runtime.Runtime = drt
	var images runtime.Images = drt
	if opts.oci {
		ort := newOCIRuntime(t, nodeID, sockRoot, drt, netName, &firewall, kr)
		rt, images = ort, ociImages{Runtime: drt, oci: ort}
	}
	t.Cleanup(func() {
		// Whatever a test leaves, remove it (and fail if a test expected
		// nothing to be left: those tests check ListOurs themselves).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ins, _ := drt.ListOurs(ctx)
		for _, in := range ins {
			drt.Destroy(ctx, in.SandboxID)
		}
		// The images of the templates the test made (the store is open
		// still: its Close was registered before this).
		ts, _ := st.ListTemplates(ctx, "", true)
		for _, tpl := range ts {
			drt.RemoveImage(ctx, tpl.Image)
		}
		drt.Close()
	})
	volRoot := filepath.Join(dir, "volumes")
	vols, _, err := volume.New(volRoot, volume.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if opts.budget == (admission.Budget{}) {
		opts.budget = admission.Budget{MilliCPU: 64_000, MemoryMB: 64 * 1024}
	}
	dialer := &lateDialer{}
	router, err := ingress.New(ingress.Options{Domain: "localhost", Dialer: dialer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Close() })
	h := &harness{
		netName: netName,
		store:   &faultyStore{Store: st},
		rt:      runtimetest.NewFaulty(rt),
		drt:     drt,
		routes:  &faultyRouter{Router: router},
		adm:     admission.New(opts.budget),
		vols:    &faultyVolumes{Dir: vols},
		clock:   clk,
		keyring: kr,
		nodeID:  nodeID,
		volRoot: volRoot,
	}
	h.admFail = &faultyAdmission{Controller: h.adm}
	h.sockRoot = sockRoot
	if opts.oci {
		h.sockRoot += "o" // newOCIRuntime's
	}
	if opts.hibernate {
		h.hibDir = filepath.Join(dir, "hibernate")
	}
	if opts.hibernateTmpfs {
		if err := os.Mkdir(h.hibDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", h.hibDir, "tmpfs", 0, "size=2g,mode=0700"); err != nil {
			t.Skipf("SKIP: mount a tmpfs on the hibernate directory: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(h.hibDir, syscall.MNT_DETACH) })
	}
	h.svc, err = service.New(service.Config{
		NodeID:            nodeID,
		DefaultImage:      busybox,
		AgentBinary:       agentBinary,
		StuckCreating:     time.Minute,
		Pool:              opts.pool,
		PauseMax:          opts.pauseMax,
		PullIdleGrace:     opts.pullIdleGrace,
		RegistryAllow:     []string{"127.0.0.1"},
		AllowNetwork:      opts.network,
		HibernateDir:      h.hibDir,
		TemplateStorageMB: opts.templateStorageMB,
		GVisor:            opts.hibernate && opts.oci,

		HibernateStorageMaxMB: opts.hibernateMaxMB,
		PausedMemoryFloor: func() int {
			if opts.memory != nil {
				return 10
			}
			return 0
		}(),
	}, service.Deps{
		Store:      h.store,
		Runtime:    h.rt,
		Router:     h.routes,
		Admission:  h.admFail,
		Volumes:    h.vols,
		Keyring:    kr,
		Clock:      clk.Now,
		Cluster:    opts.cluster,
		Images:     images,
		Disk:       drt,
		HostMemory: opts.memory,
		Firewall:   firewall,
		Resolver:   opts.resolver,
		Puller: func() runtime.Puller {
			if opts.puller != nil {
				return opts.puller(drt)
			}
			return nil
		}(),
	})
	if err != nil {
		t.Fatal(err)
	}
	dialer.svc = h.svc
	// What a fresh daemon does before it serves; it also makes the service
	// ready for creates.
	if err := h.svc.Reconcile(ctx, true); err != nil {
		t.Fatal(err)
	}
	return h
}

var admin = service.Caller{Owner: "admin", Admin: true}

// assertNothingLeft checks that no trace of any sandbox remains: no
// container of this node, no row, no route, no reserved capacity, no mount.
func (h *harness) assertNothingLeft(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	ins, err := h.rt.ListOurs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 0 {
		t.Errorf("containers left: %v", ins)
	}
	rows, _, err := h.store.ListSandboxes(ctx, store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Errorf("rows left: %d (first: %s in %s)", len(rows), rows[0].ID, rows[0].State)
	}
	if n := h.routes.Installed(); n != 0 {
		t.Errorf("routes left: %d", n)
	}
	if used, _ := h.adm.Usage(); used != (admission.Request{}) {
		t.Errorf("capacity left reserved: %v", used)
	}
	if n := h.vols.prepared(); n != 0 {
		t.Errorf("mounts left prepared: %d", n)
	}
	if m := h.stagedMounts(t); len(m) != 0 {
		t.Errorf("staged mounts left: %v", m)
	}
	if h.hibDir != "" {
		if left, _ := os.ReadDir(h.hibDir); len(left) != 0 {
			t.Errorf("hibernate images left: %v", left)
		}
	}
}

// stagingRoot is where the volume directory stages subpath mounts.
func (h *harness) stagingRoot() string {
	return filepath.Join(filepath.Dir(h.volRoot), "mounts")
}

// stagedMounts lists the mount points under the staging root, as
// /proc/self/mountinfo (the engine's mount namespace too) has them.
func (h *harness) stagedMounts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	root := h.stagingRoot()
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// assertNoVolumes checks that no volume directory exists on the host: a
// create that failed made none or removed those it made. (A sandbox that
// existed keeps its volumes: they outlive it.)
func (h *harness) assertNoVolumes(t *testing.T) {
	t.Helper()
	if left, err := os.ReadDir(h.volRoot); err != nil || len(left) != 0 {
		t.Errorf("volume directories left on the host: %v (%v)", left, err)
	}
	if left, err := os.ReadDir(h.stagingRoot()); err != nil || len(left) != 0 {
		t.Errorf("staging directories left on the host: %v (%v)", left, err)
	}
}

var errInjected = errors.New("injected fault")

// faultyStore fails chosen store methods, or runs a hook in their place.
type faultyStore struct {
	*store.Store
	mu      sync.Mutex
	fail    map[string]bool
	hooks   map[string]func() error
	claimed func(store.Claim) // sees every claim's outcome
}

func (f *faultyStore) onClaimed(fn func(store.Claim)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claimed = fn
}

func (f *faultyStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	if err := f.check("Claim"); err != nil {
		return store.Claim{}, err
	}
	c, err := f.Store.Claim(ctx, req)
	f.mu.Lock()
	seen := f.claimed
	f.mu.Unlock()
	if err == nil && seen != nil {
		seen(c)
	}
	return c, err
}

func (f *faultyStore) inject(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string]bool{}
	}
	f.fail[method] = true
}

// clear removes the fault and the hook of method.
func (f *faultyStore) clear(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.fail, method)
	delete(f.hooks, method)
}

// on runs hook before every call of method (in the call's window); a
// non-nil error fails the call instead of it.
func (f *faultyStore) on(method string, hook func() error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hooks == nil {
		f.hooks = map[string]func() error{}
	}
	f.hooks[method] = hook
}

// check is what every wrapped method asks first.
func (f *faultyStore) check(method string) error {
	f.mu.Lock()
	failing, hook := f.fail[method], f.hooks[method]
	f.mu.Unlock()
	if failing {
		return errInjected
	}
	if hook != nil {
		return hook()
	}
	return nil
}

func (f *faultyStore) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	if err := f.check("CreateSandbox"); err != nil {
		return err
	}
	return f.Store.CreateSandbox(ctx, sb)
}

func (f *faultyStore) MarkHibernated(ctx context.Context, id string) (store.Sandbox, error) {
	if err := f.check("MarkHibernated"); err != nil {
		return store.Sandbox{}, err
	}
	return f.Store.MarkHibernated(ctx, id)
}

func (f *faultyStore) GetSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	if err := f.check("GetSandbox"); err != nil {
		return store.Sandbox{}, err
	}
	return f.Store.GetSandbox(ctx, id)
}

func (f *faultyStore) PutSandboxMounts(ctx context.Context, id string, sealed [][]byte) error {
	if err := f.check("PutSandboxMounts"); err != nil {
		return err
	}
	return f.Store.PutSandboxMounts(ctx, id, sealed)
}

func (f *faultyStore) UpdateSandboxState(ctx context.Context, id string, from []store.SandboxState, to store.SandboxState, reason string) (store.Sandbox, error) {
	if err := f.check("UpdateSandboxState"); err != nil {
		return store.Sandbox{}, err
	}
	return f.Store.UpdateSandboxState(ctx, id, from, to, reason)
}

func (f *faultyStore) ClaimPooled(ctx context.Context, c store.PoolClaim) (store.Sandbox, error) {
	if err := f.check("ClaimPooled"); err != nil {
		return store.Sandbox{}, err
	}
	return f.Store.ClaimPooled(ctx, c)
}

func (f *faultyStore) CommitCreate(ctx context.Context, id string, expiresAt time.Time) (store.Sandbox, error) {
	if err := f.check("CommitCreate"); err != nil {
		return store.Sandbox{}, err
	}
	return f.Store.CommitCreate(ctx, id, expiresAt)
}

func (f *faultyStore) DeleteSandbox(ctx context.Context, id string) error {
	if err := f.check("DeleteSandbox"); err != nil {
		return err
	}
	return f.Store.DeleteSandbox(ctx, id)
}

func (f *faultyStore) ListExpired(ctx context.Context, now time.Time) ([]store.Sandbox, error) {
	rows, err := f.Store.ListExpired(ctx, now)
	if err != nil {
		return nil, err
	}
	// The hook runs after the listing: the window between it and the
	// reaper's destroys.
	return rows, f.check("ListExpired")
}

func (f *faultyStore) ExtendClaim(ctx context.Context, c store.Claim, ttl time.Duration) error {
	if err := f.check("ExtendClaim"); err != nil {
		return err
	}
	if err := f.Store.ExtendClaim(ctx, c, ttl); err != nil {
		return err
	}
	return f.check("ExtendClaim:done") // sees the extension made

}

// faultyRouter fails Install on demand, or runs onInstall first (a window
// in the middle of a create: its container runs, its row is creating).
type faultyRouter struct {
	*ingress.Router
	failInstall bool
	onInstall   func()
}

// lateDialer lets the ingress dial through a service built after it.
type lateDialer struct{ svc *service.Service }

func (d *lateDialer) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return d.svc.DialPort(ctx, id, port)
}

func (f *faultyRouter) Install(ctx context.Context, id string) error {
	if f.failInstall {
		return errInjected
	}
	if f.onInstall != nil {
		f.onInstall()
	}
	return f.Router.Install(ctx, id)
}

// faultyAdmission fails Reserve on demand.
type faultyAdmission struct {
	*admission.Controller
	failReserve bool
	// beforeReserve, when set, runs before each ReserveWithin (to act in
	// its window).
	beforeReserve func(id string)
}

func (f *faultyAdmission) ReserveWithin(id string, req admission.Request, q admission.Quota) error {
	if f.beforeReserve != nil {
		f.beforeReserve(id)
	}
	if f.failReserve {
		return errInjected
	}
	return f.Controller.ReserveWithin(id, req, q)
}

// faultyVolumes counts sandboxes with prepared mounts and fails Prepare on
// demand.
type faultyVolumes struct {
	*volume.Dir
	mu          sync.Mutex
	live        map[string]bool
	failPrepare bool
}

func (f *faultyVolumes) Prepare(ctx context.Context, owner, id string, mounts []service.Mount, reserve service.VolumeReserve) ([]runtime.Mount, error) {
	if f.failPrepare {
		return nil, errInjected
	}
	binds, err := f.Dir.Prepare(ctx, owner, id, mounts, reserve)
	if err == nil {
		f.mu.Lock()
		if f.live == nil {
			f.live = map[string]bool{}
		}
		f.live[id] = true
		f.mu.Unlock()
	}
	return binds, err
}

func (f *faultyVolumes) Release(ctx context.Context, id string) error {
	f.mu.Lock()
	delete(f.live, id)
	f.mu.Unlock()
	return f.Dir.Release(ctx, id)
}

func (f *faultyVolumes) Abandon(ctx context.Context, id string) error {
	f.mu.Lock()
	delete(f.live, id)
	f.mu.Unlock()
	return f.Dir.Abandon(ctx, id)
}

func (f *faultyVolumes) prepared() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}
