package daytona

import (
	"cmp"
	"encoding/json"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/netpolicy"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Annotation keys: what the facade records at create and shows back
// (plaintext, never secrets). They never change after create.
const (
	annUser     = "daytona.user"
	annTarget   = "daytona.target"
	annPublic   = "daytona.public"
	annDisk     = "daytona.disk"
	annSnapshot = "daytona.snapshot"
)

// sandboxUser is the one account everything Daytona does runs as by
// default: execute, code-run, sessions, files and git. It is Daytona's own
// (examples write to /home/daytona); the base image has it (uid 1001, home
// /home/daytona, passwordless sudo).
const sandboxUser = "daytona"

// legacyUser is the account sandboxes of this facade ran as before they
// ran as daytona (the base image's uid 1000, E2B's default), still valid
// at create.
const legacyUser = "user"

// Daytona's defaults and the units it counts in.
const (
	defaultTarget = "local"
	mibPerGiB     = 1024
)

// createBody is Daytona's CreateSandbox. Fields the facade cannot honour
// are rejected (gpu, for one) rather than ignored.
type createBody struct {
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Target              string            `json:"target"`
	Public              bool              `json:"public"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	CPU                 *float64          `json:"cpu"`
	GPU                 *float64          `json:"gpu"`
	Memory              *float64          `json:"memory"` // GiB
	Disk                *float64          `json:"disk"`   // GiB
	AutoStopInterval    *int              `json:"autoStopInterval"`
	AutoDeleteInterval  *int              `json:"autoDeleteInterval"`
	AutoArchiveInterval *int              `json:"autoArchiveInterval"`
	networkSettings
	Volumes   []json.RawMessage `json:"volumes"`
	BuildInfo *buildInfo        `json:"buildInfo"`
}

// buildInfo is CreateBuildInfo: a Dockerfile, and the hashes of the
// local files (in Daytona's object storage) it copies.
type buildInfo struct {
	DockerfileContent string   `json:"dockerfileContent"`
	ContextHashes     []string `json:"contextHashes"`
}

// sandboxDTO is Daytona's Sandbox (and, without env, SandboxListItem).
type sandboxDTO struct {
	ID                 string            `json:"id"`
	OrganizationID     string            `json:"organizationId"`
	Name               string            `json:"name"`
	Snapshot           string            `json:"snapshot,omitempty"`
	User               string            `json:"user"`
	Env                map[string]string `json:"env,omitzero"`
	Labels             map[string]string `json:"labels"`
	Public             bool              `json:"public"`
	NetworkBlockAll    bool              `json:"networkBlockAll"`
	NetworkAllowList   string            `json:"networkAllowList,omitempty"` // CIDRs, comma-separated
	DomainAllowList    string            `json:"domainAllowList,omitempty"`  // host names, comma-separated
	Target             string            `json:"target"`
	CPU                float64           `json:"cpu"`
	GPU                float64           `json:"gpu"`
	Memory             float64           `json:"memory"`
	Disk               float64           `json:"disk"`
	State              string            `json:"state"`
	DesiredState       string            `json:"desiredState"`
	ErrorReason        string            `json:"errorReason,omitempty"`
	AutoStopInterval   int               `json:"autoStopInterval"`
	AutoDeleteInterval int               `json:"autoDeleteInterval"`
	AutoArchive        int               `json:"autoArchiveInterval"`
	CreatedAt          string            `json:"createdAt"`
	ToolboxProxyURL    string            `json:"toolboxProxyUrl"`
	ExpiresAt          string            `json:"expiresAt,omitempty"`
	Volumes            []sandboxVolume   `json:"volumes,omitempty"`
}

// listResponse is Daytona's paginated list; nextCursor is null on the last
// page.
type listResponse struct {
	Items      []sandboxDTO `json:"items"`
	NextCursor *string      `json:"nextCursor"`
}

// stateName is Daytona's name for a sandbox state.
func stateName(s service.State) string {
	switch s {
	case service.StateRunning:
		return "started"
	case service.StateCreating, service.StatePaused, service.StateStopping, service.StateStopped, service.StateError:
		return string(s) // paused: frozen through the native or E2B API
	}
	return "unknown"
}

// desiredState is where the sandbox is heading: started or stopped.
func desiredState(s service.State) string {
	switch s {
	case service.StateStopping, service.StateStopped:
		return "stopped"
	case service.StatePaused:
		return "paused"
	}
	return "started"
}

// dto renders sb; toolboxURL is the toolbox base the SDK appends /<id> to.
// full adds env (the SDK copies env and the other "full" fields only when
// env is present), which list items leave out.
func dto(sb service.Sandbox, toolboxURL string, full bool) sandboxDTO {
	name := sb.Name
	if name == "" {
		name = sb.ID
	}
	d := sandboxDTO{
		ID:                 sb.ID,
		OrganizationID:     sb.Owner,
		Name:               name,
		Snapshot:           sb.Annotations[annSnapshot],
		User:               userOf(sb),
		Labels:             labelsOf(sb.Tags),
		Public:             sb.Annotations[annPublic] == "true",
		NetworkBlockAll:    blocked(sb.NetworkPolicy),
		Target:             cmp.Or(sb.Annotations[annTarget], defaultTarget),
		CPU:                float64(sb.MilliCPU) / 1000,
		Memory:             round2(float64(sb.MemoryMB) / mibPerGiB),
		State:              daytonaState(sb),
		DesiredState:       desiredState(sb.State),
		ErrorReason:        sb.ErrorReason,
		AutoStopInterval:   minutes(sb.Lifecycle.AutoStop),
		AutoDeleteInterval: autoDeleteOf(sb.Lifecycle),
		AutoArchive:        minutes(sb.Lifecycle.AutoArchive),
		CreatedAt:          sb.CreatedAt.UTC().Format(time.RFC3339Nano),
		ToolboxProxyURL:    toolboxURL,
	}
	if p := sb.NetworkPolicy; p.Mode == netpolicy.ModeRestricted {
		allow, _ := p.CIDRs()
		cidrs := make([]string, len(allow))
		for i, pfx := range allow {
			cidrs[i] = pfx.String()
		}
		d.NetworkAllowList, d.DomainAllowList = strings.Join(cidrs, ","), strings.Join(p.Hosts(), ",")
	}
	if sb.DiskMB > 0 {
		d.Disk = round2(float64(sb.DiskMB) / mibPerGiB)
	} else if disk, err := strconv.ParseFloat(sb.Annotations[annDisk], 64); err == nil {
		d.Disk = disk // a sandbox from before disk limits
	}
	if !sb.ExpiresAt.IsZero() {
		d.ExpiresAt = sb.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	d.Volumes = volumesOf(sb)
	if full {
		d.Env = sb.Env
		if d.Env == nil {
			d.Env = map[string]string{}
		}
	}
	return d
}

// userOf is the account the sandbox's toolbox runs as.
func userOf(sb service.Sandbox) string {
	return cmp.Or(sb.Annotations[annUser], sandboxUser)
}

// labelsOf is the Daytona labels of a sandbox: its tags. Never nil.
func labelsOf(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags))
	maps.Copy(out, tags)
	return out
}

// minutes is d in Daytona's unit.
func minutes(d time.Duration) int { return int(d / time.Minute) }

// autoDeleteOf is Daytona's autoDeleteInterval of l: -1 never, 0 at the
// stop, else minutes.
func autoDeleteOf(l service.Lifecycle) int {
	switch {
	case l.DeleteOnStop:
		return 0
	case l.AutoDelete <= 0:
		return -1
	}
	return minutes(l.AutoDelete)
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// fileInfo is Daytona's FileInfo.
type fileInfo struct {
	Name        string `json:"name"`
	Path        string `json:"path,omitempty"`
	IsDir       bool   `json:"isDir"`
	Size        int64  `json:"size"`
	Mode        string `json:"mode"`        // Go's FileMode.String(), e.g. "-rw-r--r--"
	Permissions string `json:"permissions"` // octal, e.g. "0644"
	ModTime     string `json:"modTime"`
	ModifiedAt  string `json:"modifiedAt"`
	Owner       string `json:"owner"`
	Group       string `json:"group"`
}

// executeBody is ExecuteRequest; timeout is in seconds (0 or absent: none).
type executeBody struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd"`
	Envs    map[string]string `json:"envs"`
	Timeout *float64          `json:"timeout"`
}

// executeResponse is ExecuteResponse: stdout and stderr in write order.
type executeResponse struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// codeRunBody is CodeRunRequest.
type codeRunBody struct {
	Code     string            `json:"code"`
	Language string            `json:"language"`
	Argv     []string          `json:"argv"`
	Envs     map[string]string `json:"envs"`
	Timeout  *float64          `json:"timeout"`
}

type codeRunResponse struct {
	ExitCode  int    `json:"exitCode"`
	Result    string `json:"result"`
	Artifacts struct {
		Charts []any `json:"charts"`
	} `json:"artifacts"`
}

type dirResponse struct {
	Dir string `json:"dir"`
}

type urlResponse struct {
	URL string `json:"url"`
}

type previewResponse struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

type labelsBody struct {
	Labels map[string]string `json:"labels"`
}
