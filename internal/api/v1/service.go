package v1

import (
	"context"
	"errors"
	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"io"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Service is everything the API asks of the domain layer; *service.Service
// implements it. Handlers call nothing else, so this interface is the whole
// dependency surface of the edge (and the seam for fault injection).
type Service interface {
	CreateOnce(ctx context.Context, c service.Caller, r service.CreateOnceRequest) (*service.Created, error)
	Ready() (ok bool, reason string)
	// Faults are the dependencies' faults now (engine, disk, store),
	// probed at most every few seconds.
	Faults(ctx context.Context) []service.HealthFault
	Get(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	List(ctx context.Context, c service.Caller, f service.ListFilter) ([]service.Sandbox, string, error)
	// ListLocal is List of this node's sandboxes only (the same in a single node).
	ListLocal(ctx context.Context, c service.Caller, f service.ListFilter) ([]service.Sandbox, string, error)
	Destroy(ctx context.Context, c service.Caller, idOrName string) error
	Start(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Stop(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Pause(ctx context.Context, c service.Caller, idOrName string) (service.Sandbox, error)
	Resume(ctx context.Context, c service.Caller, idOrName string) (service.Resumed, error)
	Hibernate(ctx context.Context, c service.Caller, idOrName string) (service.Hibernated, error)
	UpdateSandbox(ctx context.Context, c service.Caller, idOrName string, u service.Update) (service.Sandbox, error)
	SetNetworkPolicy(ctx context.Context, c service.Caller, idOrName string, p netpolicy.Policy) (service.Sandbox, error)

	Exec(ctx context.Context, c service.Caller, idOrName string, req service.ExecRequest) (*service.ExecResult, error)
	StartProcess(ctx context.Context, c service.Caller, idOrName string, req service.ProcessRequest) (*agent.Process, error)
	Logs(ctx context.Context, c service.Caller, idOrName string, q service.LogQuery, emit func([]service.LogLine) error) error
	SandboxUsage(ctx context.Context, c service.Caller, idOrName string) (service.SandboxMetrics, error)

	Upload(ctx context.Context, c service.Caller, idOrName, path, user string, r io.Reader) error
	Download(ctx context.Context, c service.Caller, idOrName, path, user string) (rc io.ReadCloser, size int64, err error)
	UploadArchive(ctx context.Context, c service.Caller, idOrName, dir, user string, r io.Reader) error
	DownloadArchive(ctx context.Context, c service.Caller, idOrName, path, user string) (io.ReadCloser, error)
	ListFiles(ctx context.Context, c service.Caller, idOrName, path, user string) ([]service.FileEntry, error)
	RemoveFile(ctx context.Context, c service.Caller, idOrName, path, user string) error

	ExposePort(ctx context.Context, c service.Caller, idOrName string, port int, protocol string, public bool) (service.Exposure, error)
	UnexposePort(ctx context.Context, c service.Caller, idOrName string, port int) error
	ListPorts(ctx context.Context, c service.Caller, idOrName string) ([]service.Exposure, error)
	AddDomain(ctx context.Context, c service.Caller, idOrName, hostname string, port int) (service.Domain, error)
	RemoveDomain(ctx context.Context, c service.Caller, idOrName, hostname string) error
	VerifyDomain(ctx context.Context, c service.Caller, idOrName, hostname string) (service.Domain, error)
	ListDomains(ctx context.Context, c service.Caller, idOrName string) ([]service.Domain, error)

	PoolStatus() []service.PoolStatus
	PeerPools(ctx context.Context) []service.NodePools
	SetPool(ctx context.Context, targets []service.PoolTarget) ([]service.PoolStatus, error)

	BuildTemplate(ctx context.Context, c service.Caller, r service.Recipe) (t service.Template, cached bool, err error)
	TagTemplate(ctx context.Context, c service.Caller, target, name string, tags []string) (service.Template, error)
	UntagTemplate(ctx context.Context, c service.Caller, name string, tags []string) error
	FollowBuildLog(ctx context.Context, c service.Caller, idOrName string, w func([]byte) error) error
	GetTemplate(ctx context.Context, c service.Caller, idOrName string) (service.Template, error)
	ListTemplates(ctx context.Context, c service.Caller) ([]service.Template, error)

	PutRegistryCredential(ctx context.Context, c service.Caller, in service.RegistryCredentialInput) (service.RegistryCredential, error)
	ListRegistryCredentials(ctx context.Context, c service.Caller) ([]service.RegistryCredential, error)
	DeleteRegistryCredential(ctx context.Context, c service.Caller, host string) error
	ImageStatus(ctx context.Context, c service.Caller, ref string) (service.PullState, error)
	PullImage(ctx context.Context, c service.Caller, ref string) error
	DeleteTemplate(ctx context.Context, c service.Caller, idOrName string) error
	Snapshot(ctx context.Context, c service.Caller, sandboxIDOrName, name string, memory service.SnapshotMemory) (service.Template, error)
	Fork(ctx context.Context, c service.Caller, sandboxIDOrName string, n int) ([]*service.Created, error)
	ForkWithMemory(ctx context.Context, c service.Caller, sandboxIDOrName string, n int) ([]*service.Created, error)
}

var _ Service = (*service.Service)(nil)

// execTimedOut reports whether err from Service.Exec means the command's
// own timeout killed it. The service passes the agent's error through: a
// connect deadline_exceeded from the wire, or the local context's. This is
// the one place the edge knows about the agent's transport; it goes away
// once the service maps the timeout to a sentinel of its own (or returns
// the partial result with a flag).
func execTimedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded
}
