package daytona

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// create is POST /sandbox: CreateSandbox → 200 with the Sandbox, already
// started (the SDK then makes no further call). A duplicate name is 409.
//
// With an Idempotency-Key header (1-255 printable ASCII; the native API's
// and the E2B facade's rule, which the SDK does not send but any other
// client may) the create runs at most once per (owner, key): a retry
// within the replay window answers the first call's sandbox, and the same
// key with another body is 422.
func (f *Facade) create(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := f.decodeJSON(w, r, &raw); err != nil {
		return err
	}
	var body createBody
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			return badRequest("invalid JSON body: %v", err)
		}
		if err := refuseUnhonoured(raw); err != nil {
			return err
		}
	}
	req, err := f.createRequest(c.Owner, body)
	if err != nil {
		return err
	}
	req.Quota = c.Quota
	build := body.BuildInfo != nil && declarative(body.BuildInfo.DockerfileContent)
	if b := body.BuildInfo; !build && (b == nil || strings.TrimSpace(b.DockerfileContent) == "") {
		// A snapshot of the caller's comes before an image of that name.
		id, ok, err := f.snapshotTemplate(r.Context(), c, body.Snapshot)
		if err != nil {
			return err
		}
		if ok {
			req.Image, req.Template = "", id
		}
	}
	if req.Mounts, err = f.volumeMounts(r.Context(), c, body.Volumes); err != nil {
		return err
	}
	once := service.CreateOnceRequest{Create: req}
	if key != "" {
		once.Key = service.OnceKey{
			Scope:        createKeyScope,
			Fingerprint:  hashHex(c.Owner + "\x00" + key),
			RequestHash:  hashHex(canonical(raw)),
			PendingTTL:   createPendingTTL,
			ReplayWindow: createReplayWindow,
		}
	}
	// Placed before the first side effect (the image build); a keyed
	// create goes where its key is bound.
	if elsewhere, err := f.placer.Elsewhere(w, r, c, once); elsewhere || err != nil {
		return err // another node answered, or none can be chosen now
	}
	if build {
		id, err := f.buildForCreate(r.Context(), c, body.BuildInfo.DockerfileContent, len(body.BuildInfo.ContextHashes) > 0)
		if err != nil {
			return err
		}
		once.Create.Image, once.Create.Template = "", id
	}
	created, err := f.svc.CreateOnce(r.Context(), c, once)
	if err != nil {
		return err
	}
	if userOf(created.Sandbox) == sandboxUser {
		f.ensureAccount(r.Context(), c, created.ID)
	}
	writeJSON(w, http.StatusOK, dto(created.Sandbox, toolboxBase(r), true))
	return nil
}

// A keyed create's claim (create): the scope of its key, how long a create
// in flight holds it, and how long a finished one answers retries, as on
// the native API.
const (
	createKeyScope     = "daytona.create.key"
	createPendingTTL   = 2 * time.Minute
	createReplayWindow = 24 * time.Hour
)

// idempotencyKey returns the Idempotency-Key header ("" when absent): one
// header of 1-255 printable ASCII characters.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", badRequest("more than one Idempotency-Key header")
	}
	k := vs[0]
	if len(k) < 1 || len(k) > 255 {
		return "", badRequest("Idempotency-Key must be 1 to 255 characters")
	}
	for i := range len(k) {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", badRequest("Idempotency-Key must be printable ASCII")
		}
	}
	return k, nil
}

// canonical is raw JSON with its objects' keys sorted and no spacing, so
// that field order and whitespace do not make a retry another request.
func canonical(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return string(raw) // create refused it already
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(b)
}

func hashHex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// ensureAccountScript gives a sandbox Daytona's account when its image has
// none (a snapshot or FROM image, or a base image built from an older
// recipe): daytona, home /home/daytona, passwordless sudo; with useradd,
// else (busybox) by appending to /etc/passwd and /etc/group. An image that
// has the account (the base image) costs one `id`.
const ensureAccountScript = `id -u daytona >/dev/null 2>&1 && exit 0
if command -v useradd >/dev/null 2>&1; then useradd -m -d /home/daytona -s /bin/bash -U daytona || exit 1
else
	uid=1001
	while cut -d: -f3 /etc/passwd /etc/group | grep -qx "$uid"; do uid=$((uid + 1)); done
	echo "daytona:x:$uid:$uid:daytona:/home/daytona:/bin/sh" >>/etc/passwd &&
		echo "daytona:x:$uid:" >>/etc/group && mkdir -p /home/daytona && chown "$uid:$uid" /home/daytona || exit 1
fi
mkdir -p /etc/sudoers.d && echo 'daytona ALL=(ALL) NOPASSWD:ALL' >/etc/sudoers.d/daytona && chmod 0440 /etc/sudoers.d/daytona`

// ensureAccount runs ensureAccountScript as root in a sandbox just
// created. A failure is logged, not the caller's: the sandbox works as
// root, and toolbox calls as daytona then say the user is unknown.
func (f *Facade) ensureAccount(ctx context.Context, c service.Caller, id string) {
	res, err := f.svc.Exec(ctx, c, id, service.ExecRequest{
		Cmd: []string{"/bin/sh", "-c", ensureAccountScript}, User: "root",
		Timeout: 30 * time.Second, MaxOutput: 4 << 10,
	})
	switch {
	case err != nil:
		f.log.WarnContext(ctx, "daytona: could not check the sandbox's daytona account", "sandbox", id, "err", err)
	case res.ExitCode != 0:
		f.log.WarnContext(ctx, "daytona: the sandbox's image has no daytona account and none could be added", "sandbox", id,
			"exit_code", res.ExitCode, "stderr", string(res.Stderr))
	}
}

// createRequest validates a CreateSandbox body and translates it. What
// sandboxd cannot honour is refused with 400, never silently dropped.
func (f *Facade) createRequest(owner string, b createBody) (service.CreateRequest, error) {
	switch {
	case b.GPU != nil && *b.GPU > 0:
		return service.CreateRequest{}, badRequest("gpu: sandboxd has no GPUs")
	}
	policy, err := createPolicy(b.networkSettings, f.svc.NetworkAllowed())
	if err != nil {
		return service.CreateRequest{}, err
	}
	image, err := f.image(b)
	if err != nil {
		return service.CreateRequest{}, err
	}
	user := cmp.Or(b.User, sandboxUser)
	if _, ok := homes[user]; !ok {
		return service.CreateRequest{}, badRequest("user %q: the sandbox accounts are %q, %q and %q", user, sandboxUser, legacyUser, "root")
	}
	autoStop, autoDelete := 0, -1
	if b.AutoStopInterval != nil {
		autoStop = *b.AutoStopInterval
	}
	if b.AutoDeleteInterval != nil {
		autoDelete = *b.AutoDeleteInterval
	}
	rules, err := intervals(service.Lifecycle{}, autoStop, autoDelete)
	if err != nil {
		return service.CreateRequest{}, err
	}
	archive := defaultAutoArchive
	if b.AutoArchiveInterval != nil {
		archive = *b.AutoArchiveInterval
	}
	if rules.AutoArchive, err = autoArchive(archive); err != nil {
		return service.CreateRequest{}, err
	}
	req := service.CreateRequest{
		Owner:     owner,
		Image:     image,
		Name:      b.Name,
		Env:       b.Env,
		Tags:      maps.Clone(b.Labels),
		Lifecycle: rules,
		// Daytona's default is network on; this daemon's policy decides.
		NetworkPolicy: policy,
		Annotations: map[string]string{
			annUser:   user,
			annTarget: cmp.Or(b.Target, defaultTarget),
		},
	}
	if b.Public {
		req.Annotations[annPublic] = "true"
	}
	if b.Snapshot != "" {
		req.Annotations[annSnapshot] = b.Snapshot
	}
	if b.CPU != nil {
		if *b.CPU <= 0 || math.IsInf(*b.CPU, 0) {
			return service.CreateRequest{}, badRequest("cpu must be a positive number of cores")
		}
		req.MilliCPU = int64(math.Round(*b.CPU * 1000))
	}
	if b.Memory != nil {
		if *b.Memory <= 0 || *b.Memory > 1<<20 {
			return service.CreateRequest{}, badRequest("memory must be a positive number of GiB")
		}
		req.MemoryMB = int64(math.Round(*b.Memory * mibPerGiB))
	}
	if b.Disk != nil {
		if *b.Disk < 0 || *b.Disk > 1<<20 || math.IsNaN(*b.Disk) {
			return service.CreateRequest{}, badRequest("disk must be a number of GiB, 0 or more (0: the daemon's default)")
		}
		// The sandbox's disk limit (0 takes the daemon's default), enforced
		// by the kernel where the engine can.
		req.DiskMB = int64(math.Round(*b.Disk * mibPerGiB))
		req.Annotations[annDisk] = strconv.FormatFloat(*b.Disk, 'f', -1, 64)
	}
	return req, nil
}

// honouredFields are the CreateSandbox fields createRequest acts on (or
// refuses itself, with its own message, when set to what it cannot do).
var honouredFields = map[string]bool{
	"name": true, "snapshot": true, "user": true, "target": true, "public": true,
	"env": true, "labels": true, "cpu": true, "gpu": true, "memory": true, "disk": true,
	"autoStopInterval": true, "autoDeleteInterval": true, "autoArchiveInterval": true,
	"networkBlockAll": true, "networkAllowList": true, "domainAllowList": true,
	"volumes": true, "buildInfo": true,
}

// refuseUnhonoured refuses a CreateSandbox body that sets a field the
// facade does not honour (linkedSandbox, ttlMinutes, secrets, kvm, …, and
// any field Daytona's API does not have), naming the field. A field set to
// its zero value (null, false, 0, "", [], {}) asks for nothing and passes:
// that is what the SDK sends for options left alone.
func refuseUnhonoured(raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return badRequest("invalid JSON body: %v", err)
	}
	names := slices.Sorted(maps.Keys(fields))
	for _, name := range names {
		if honouredFields[name] || zeroJSON(fields[name]) {
			continue
		}
		return badRequest("%s: not supported by sandboxd's Daytona facade; leave it unset", name)
	}
	return nil
}

// zeroJSON reports whether v is null, false, 0, "", [] or {}.
func zeroJSON(v json.RawMessage) bool {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return false
	}
	switch x := x.(type) {
	case nil:
		return true
	case bool:
		return !x
	case float64:
		return x == 0
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// image resolves the sandbox image: a buildInfo that is a single FROM line
// (what the SDK sends for `image: "<ref>"`), else the snapshot (a name in
// Options.Images or a locally present image), else the daemon's default.
// A declarative image (a Dockerfile that builds something) has none here:
// create builds it (buildForCreate), as it resolves a snapshot that is
// one of the caller's templates (snapshotTemplate) before this image.
func (f *Facade) image(b createBody) (string, error) {
	if b.BuildInfo != nil && strings.TrimSpace(b.BuildInfo.DockerfileContent) != "" {
		ref, _ := singleFrom(b.BuildInfo.DockerfileContent)
		return ref, nil
	}
	if img, ok := f.images[b.Snapshot]; ok {
		return img, nil
	}
	return b.Snapshot, nil
}

// declarative reports a Dockerfile that builds something: more than one
// FROM line.
func declarative(dockerfile string) bool {
	_, single := singleFrom(dockerfile)
	return strings.TrimSpace(dockerfile) != "" && !single
}

// buildForCreate builds a create's declarative image as an unnamed
// template of the caller's (a build of the same Dockerfile before is
// reused) and waits for it, within the request, before the create goes
// on from it: the sandbox answers started, as every create here. A build
// that fails is a 400 with its error, and no sandbox is made.
func (f *Facade) buildForCreate(ctx context.Context, c service.Caller, dockerfile string, withContext bool) (string, error) {
	if withContext {
		return "", errorf(http.StatusNotImplemented, "%s", msgImageContext)
	}
	base, steps, err := recipeFromDockerfile(dockerfile, f.images)
	if err != nil {
		return "", err
	}
	t, _, err := f.svc.BuildTemplate(ctx, c, service.Recipe{Base: base, Steps: steps})
	if service.Is(err, service.ErrImageNotPresent) && !service.IsPullRefusal(err) {
		return "", badRequest("%v", err)
	}
	if err != nil {
		return "", err
	}
	if t.State == service.TemplateBuilding {
		if err := f.svc.FollowBuildLog(ctx, c, t.ID, func([]byte) error { return nil }); err != nil {
			return "", err
		}
		if t, err = f.svc.GetTemplate(ctx, c, t.ID); err != nil {
			return "", err
		}
	}
	switch t.State {
	case service.TemplateReady:
		return t.ID, nil
	case service.TemplateFailed:
		return "", badRequest("image: the build failed: %s", t.Error)
	}
	return "", fmt.Errorf("image build %s is %s: %w", t.ID, t.State, service.ErrConflict)
}

// singleFrom returns the image of a Dockerfile whose only instruction is
// FROM <image>.
func singleFrom(dockerfile string) (string, bool) {
	var ref string
	for line := range strings.Lines(dockerfile) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if ref != "" || len(fields) != 2 || !strings.EqualFold(fields[0], "FROM") {
			return "", false
		}
		ref = fields[1]
	}
	return ref, ref != ""
}

// Bounds of Daytona's auto-stop and auto-delete intervals, in minutes:
// the service's (7 days).
const maxIntervalMinutes = 7 * 24 * 60

// intervals is l with Daytona's auto-stop (minutes, 0: never) and
// auto-delete (minutes, -1: never, 0: at the stop) intervals.
func intervals(l service.Lifecycle, autoStop, autoDelete int) (service.Lifecycle, error) {
	switch {
	case autoStop < 0 || autoStop > maxIntervalMinutes:
		return l, badRequest("autoStopInterval must be between 0 and %d minutes", maxIntervalMinutes)
	case autoDelete < -1 || autoDelete > maxIntervalMinutes:
		return l, badRequest("autoDeleteInterval must be between -1 and %d minutes", maxIntervalMinutes)
	}
	l.AutoStop = time.Duration(autoStop) * time.Minute
	l.AutoDelete, l.DeleteOnStop = 0, autoDelete == 0
	if autoDelete > 0 {
		l.AutoDelete = time.Duration(autoDelete) * time.Minute
	}
	return l, nil
}

// get is GET /sandbox/{idOrName}.
func (f *Facade) get(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}

// maxListLimit caps one page.
const maxListLimit = 200

// list is GET /sandbox: one page of the caller's sandboxes, oldest first,
// as {items, nextCursor}. labels is a JSON object every item's labels must
// contain (AND); states (comma separated or repeated) are Daytona's names;
// cursor is the previous page's nextCursor; limit defaults to 100.
func (f *Facade) list(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	q := r.URL.Query()
	filter := service.ListFilter{PageToken: q.Get("cursor"), Limit: 100, Name: q.Get("name")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badRequest("limit must be a positive integer")
		}
		filter.Limit = min(n, maxListLimit)
	}
	if v := q.Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &filter.Tags); err != nil {
			return badRequest("labels must be a JSON object of strings: %v", err)
		}
	}
	var states map[string]bool // Daytona's names asked for; nil: any
	for _, v := range q["states"] {
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			st, ok := serviceState(s)
			if !ok {
				return badRequest("unknown state %q", s)
			}
			filter.States = append(filter.States, st)
			if s == "archived" {
				// Archived by a hibernate: paused in the service.
				filter.States = append(filter.States, service.StatePaused)
			}
			if states == nil {
				states = map[string]bool{}
			}
			states[s] = true
		}
	}
	items, next, err := f.svc.List(r.Context(), c, filter)
	if err != nil {
		return err
	}
	out := listResponse{Items: make([]sandboxDTO, 0, len(items))}
	base := toolboxBase(r)
	for _, sb := range items {
		d := dto(sb, base, false)
		if states != nil && !states[d.State] {
			continue // stopped and archived are one service state, as are paused and hibernated-archived
		}
		out.Items = append(out.Items, d)
	}
	if next != "" {
		out.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// serviceState maps a Daytona state name to ours.
func serviceState(s string) (service.State, bool) {
	switch s {
	case "started":
		return service.StateRunning, true
	case "creating", "paused", "stopping", "stopped", "error":
		return service.State(s), true
	case "archived":
		return service.StateStopped, true
	}
	return "", false
}

// delete is DELETE /sandbox/{id}: the sandbox is gone when it answers (200
// with its last view, state destroyed); unknown is 404.
func (f *Facade) delete(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	f.dropSessions(sb.ID)
	if err := f.svc.Destroy(r.Context(), c, sb.ID); err != nil {
		return err
	}
	d := dto(sb, toolboxBase(r), true)
	d.State, d.DesiredState = "destroyed", "destroyed"
	writeJSON(w, http.StatusOK, d)
	return nil
}

// start is POST /sandbox/{id}/start (and /recover): answers once the
// sandbox is started; an archived one is recovered. Its auto-stop clock
// restarts (the service's: a start is activity).
func (f *Facade) start(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	before, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	sb, err := f.svc.Start(r.Context(), c, before.ID)
	if err != nil {
		return err
	}
	if before.State != service.StatePaused {
		f.dropSessions(sb.ID) // their shells died with the container; a paused (or archived by a hibernate) one's live on
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}

// stop is POST /sandbox/{id}/stop: answers once the sandbox is stopped
// (force is accepted and changes nothing: the stop is always final). With
// auto-delete 0 the sandbox is then destroyed at once, as on Daytona.
func (f *Facade) stop(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	d, err := f.stopSandbox(r, c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// stopSandbox stops a sandbox and returns its view: destroyed when its
// auto-delete is 0 (the service destroys it with its stop).
func (f *Facade) stopSandbox(r *http.Request, c service.Caller, id string) (sandboxDTO, error) {
	sb, err := f.svc.Stop(r.Context(), c, id)
	if err != nil {
		return sandboxDTO{}, err
	}
	f.dropSessions(sb.ID)
	return stoppedDTO(sb, toolboxBase(r)), nil
}

// stoppedDTO is the view of sb as a stop left it: destroyed when its
// rules delete it at the stop.
func stoppedDTO(sb service.Sandbox, toolboxURL string) sandboxDTO {
	d := dto(sb, toolboxURL, true)
	if sb.Lifecycle.DeleteOnStop {
		d.State, d.DesiredState = "destroyed", "destroyed"
	}
	return d
}

// setLabels is PUT /sandbox/{id}/labels {labels}: the labels are replaced.
func (f *Facade) setLabels(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body labelsBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	tags := maps.Clone(body.Labels)
	if tags == nil {
		tags = map[string]string{}
	}
	sb, err := f.svc.UpdateSandbox(r.Context(), c, r.PathValue("id"), service.Update{Tags: tags})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}

// setAutoStop is POST /sandbox/{id}/autostop/{minutes} (0: never). The
// sandbox's idle time starts again.
func (f *Facade) setAutoStop(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	return f.setInterval(w, r, c, func(l service.Lifecycle, n int) (service.Lifecycle, error) {
		return intervals(l, n, autoDeleteOf(l))
	})
}

// setAutoDelete is POST /sandbox/{id}/autodelete/{minutes} (-1: never, 0:
// at stop).
func (f *Facade) setAutoDelete(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	return f.setInterval(w, r, c, func(l service.Lifecycle, n int) (service.Lifecycle, error) {
		return intervals(l, minutes(l.AutoStop), n)
	})
}

func (f *Facade) setInterval(w http.ResponseWriter, r *http.Request, c service.Caller, set func(service.Lifecycle, int) (service.Lifecycle, error)) error {
	n, err := strconv.Atoi(r.PathValue("minutes"))
	if err != nil {
		return badRequest("minutes must be an integer")
	}
	return f.setRules(w, r, c, func(l *service.Lifecycle) (err error) {
		*l, err = set(*l, n)
		return err
	})
}

// setRules changes the sandbox's lifecycle rules with change and answers
// its view; a change that fails writes nothing.
func (f *Facade) setRules(w http.ResponseWriter, r *http.Request, c service.Caller, change func(*service.Lifecycle) error) error {
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	l := sb.Lifecycle
	if err := change(&l); err != nil {
		return err
	}
	if sb, err = f.svc.UpdateSandbox(r.Context(), c, sb.ID, service.Update{Lifecycle: &l}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, dto(sb, toolboxBase(r), true))
	return nil
}

// toolboxProxyURL is GET /sandbox/{id}/toolbox-proxy-url: {url}, the base
// the SDK appends /<id> to (the same as the Sandbox's toolboxProxyUrl).
func (f *Facade) toolboxProxyURL(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	if _, err := f.svc.Get(r.Context(), c, r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, urlResponse{URL: toolboxBase(r)})
	return nil
}

// previewURL is GET /sandbox/{id}/ports/{port}/preview-url: the port is
// exposed over HTTP through the ingress (idempotently; public when the
// sandbox is) and its URL returned. The token is the caller's own API
// token: one that opens this port of this sandbox and nothing else (the
// ingress accepts it in X-Daytona-Preview-Token, as Daytona's SDK sends
// it), never the caller's API token.
func (f *Facade) previewURL(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return badRequest("port must be between 1 and 65535")
	}
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	exp, err := f.svc.ExposePort(r.Context(), c, sb.ID, port, "http", sb.Annotations[annPublic] == "true")
	if err != nil {
		return err
	}
	var token string
	if f.previewToken != nil {
		token = f.previewToken(sb.ID, port)
	}
	writeJSON(w, http.StatusOK, previewResponse{URL: exp.URL, Token: token})
	return nil
}

// toolboxBase is the toolboxProxyUrl for this request: this facade's
// toolbox on the host the client reached.
func toolboxBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + Prefix + "/toolbox"
}

// decodeJSON reads r's JSON body into v. An empty body leaves v alone.
func (f *Facade) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("read body: %w", err) // 413 (package apierr)
		}
		return badRequest("read body: %v", err)
	}
	if strings.TrimSpace(string(body)) == "" {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("invalid JSON body: %v", err)
	}
	return nil
}
