package e2b

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// envdVersion is the envd version every sandbox reports: the highest whose
// SDK-gated features the agent implements (see the package documentation).
const envdVersion = "0.6.4"

// clientID fills Sandbox.clientID, deprecated but required by the spec.
const clientID = "sandboxd"

// Annotation keys: what the facade keeps with a sandbox (plaintext; never
// secrets).
const (
	annTemplate      = "e2b.template"
	annSecure        = "e2b.secure" // "false" when envd is open; absent or "true": secure
	annUser          = "e2b.user"   // envd's default user for requests that name none
	annAllowInternet = "e2b.allow_internet_access"
	annNetwork       = "e2b.network" // the create's network object, JSON (its egress is the policy's: networkJSON)
	annPrivate       = "e2b.private" // "true": network.allowPublicTraffic was false
	annAutoPause     = "e2b.auto_pause"
	annAutoResume    = "e2b.auto_resume"
	// annAutoPauseMemory is autoPauseMemory as sent (absent: not sent).
	annAutoPauseMemory = "e2b.auto_pause_memory"
)

// newSandboxBody is NewSandbox (v1, with secure) and NewSandboxV2.
type newSandboxBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             json.RawMessage   `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Secure       *bool           `json:"secure"`
	MCP          json.RawMessage `json:"mcp"`
	IAM          json.RawMessage `json:"iam"`
	VolumeMounts []volumeMount   `json:"volumeMounts"`
}

// connectBody is ConnectSandbox (v1: timeout required by the spec, but the
// facade does not insist) and ConnectSandboxV2.
type connectBody struct {
	Timeout *int64 `json:"timeout"`
	Memory  *bool  `json:"memory"`
}

type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

type volumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// sandboxJSON is Sandbox, the create and connect answer.
type sandboxJSON struct {
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	TemplateID         string  `json:"templateID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	Domain             *string `json:"domain"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

// listedSandbox is ListedSandbox.
type listedSandbox struct {
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	TemplateID   string            `json:"templateID"`
	EnvdVersion  string            `json:"envdVersion"`
	CPUCount     int64             `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	StartedAt    string            `json:"startedAt"`
	EndAt        string            `json:"endAt"`
	State        string            `json:"state"`
	Metadata     map[string]string `json:"metadata"`
	VolumeMounts []volumeMount     `json:"volumeMounts"`
}

// sandboxDetail is SandboxDetail, GET /sandboxes/{id}.
type sandboxDetail struct {
	listedSandbox
	Domain              *string         `json:"domain"`
	EnvdAccessToken     string          `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool           `json:"allowInternetAccess"`
	Network             json.RawMessage `json:"network,omitempty"`
	Lifecycle           lifecycle       `json:"lifecycle"`
}

type lifecycle struct {
	OnTimeout  string `json:"onTimeout"` // "kill" or "pause"
	AutoResume bool   `json:"autoResume"`
}

// sandboxMetric is SandboxMetric.
type sandboxMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int64   `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       uint64  `json:"memUsed"`
	MemTotal      uint64  `json:"memTotal"`
	MemCache      uint64  `json:"memCache"`
	DiskUsed      uint64  `json:"diskUsed"`
	DiskTotal     uint64  `json:"diskTotal"`
}

// E2B's two states. A paused sandbox is paused, and so is a stopped one
// (paused past --pause-max, or stopped through another API); one in error
// (its container died) is shown paused too: it is not running, and
// connect starts it again.
const (
	stateRunning = "running"
	statePaused  = "paused"
)

func e2bState(s service.State) string {
	if s == service.StateRunning {
		return stateRunning
	}
	return statePaused
}

// storeStates is the inverse of e2bState for list filters.
func storeStates(e2b string) []service.State {
	switch e2b {
	case stateRunning:
		return []service.State{service.StateRunning}
	case statePaused:
		return []service.State{service.StatePaused, service.StateStopped, service.StateError}
	}
	return nil
}

// noExpiry is endAt for a sandbox without a timeout (one made through the
// native API, or paused): E2B always has an end.
var noExpiry = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

func templateOf(sb service.Sandbox) string {
	if t := sb.Annotations[annTemplate]; t != "" {
		return t
	}
	return sb.Image
}

func listed(sb service.Sandbox) listedSandbox {
	end := sb.ExpiresAt
	if end.IsZero() {
		end = noExpiry
	}
	meta := sb.Tags
	if meta == nil {
		meta = map[string]string{}
	}
	mounts := make([]volumeMount, 0, len(sb.Mounts))
	for _, m := range sb.Mounts {
		mounts = append(mounts, volumeMount{Name: m.Volume, Path: m.Path})
	}
	return listedSandbox{
		SandboxID:    sb.ID,
		ClientID:     clientID,
		TemplateID:   templateOf(sb),
		EnvdVersion:  envdVersion,
		CPUCount:     max(1, (sb.MilliCPU+999)/1000),
		MemoryMB:     sb.MemoryMB,
		DiskSizeMB:   sb.DiskMB,
		StartedAt:    sb.CreatedAt.UTC().Format(time.RFC3339Nano),
		EndAt:        end.UTC().Format(time.RFC3339Nano),
		State:        e2bState(sb.State),
		Metadata:     meta,
		VolumeMounts: mounts,
	}
}

// domainJSON is the domain an answer to r reports: null without a preview
// domain; with Options.DomainPortFromHost, the domain with the port r's
// Host names (a Host that names none, or no valid one, gets the bare
// domain); else the advertised domain.
func (f *Facade) domainJSON(r *http.Request) *string {
	if f.domain == "" {
		return nil
	}
	d := f.advertised
	if f.portFromHost {
		d = f.domain
		if _, port, err := net.SplitHostPort(r.Host); err == nil {
			if n, err := strconv.ParseUint(port, 10, 16); err == nil && n > 0 {
				d = net.JoinHostPort(f.domain, strconv.FormatUint(n, 10))
			}
		}
	}
	return &d
}

func (f *Facade) sandbox(r *http.Request, sb service.Sandbox) sandboxJSON {
	return sandboxJSON{
		SandboxID:          sb.ID,
		ClientID:           clientID,
		TemplateID:         templateOf(sb),
		EnvdVersion:        envdVersion,
		EnvdAccessToken:    f.accessTokenFor(sb),
		TrafficAccessToken: f.trafficTokenFor(sb),
		Domain:             f.domainJSON(r),
	}
}

func (f *Facade) detail(r *http.Request, sb service.Sandbox) sandboxDetail {
	d := sandboxDetail{
		listedSandbox:   listed(sb),
		Domain:          f.domainJSON(r),
		EnvdAccessToken: f.accessTokenFor(sb),
		Lifecycle:       lifecycle{OnTimeout: "kill"},
	}
	// allowInternetAccess is E2B's "explicitly set" flag: the create's
	// value, or null; but false whenever the sandbox has no network, so
	// that it never claims internet the sandbox does not have.
	if v, ok := sb.Annotations[annAllowInternet]; ok {
		b := v == "true"
		d.AllowInternetAccess = &b
	}
	if !sb.NetworkPolicy.HasNetwork() {
		no := false
		d.AllowInternetAccess = &no
	}
	d.Network = networkJSON(sb)
	if sb.Lifecycle.PauseOnTimeout || sb.Annotations[annAutoPause] == "true" {
		d.Lifecycle.OnTimeout = "pause"
	}
	d.Lifecycle.AutoResume = sb.Annotations[annAutoResume] == "true"
	return d
}

// ServesPortHosts reports whether a sandbox created with annotations is
// one of the facade's (an E2B sandbox), whose ports ServePort serves by
// preview host with no expose call: the cluster publishes it so that
// other nodes end TLS only for the port hosts its node would serve.
func ServesPortHosts(annotations map[string]string) bool {
	return annotations[annTemplate] != ""
}
