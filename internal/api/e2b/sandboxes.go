package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/service"
)

// handler is a control-plane handler: it gets the authenticated caller and
// returns an error for writeError.
type handler func(w http.ResponseWriter, r *http.Request, c service.Caller) error

// routes is the control plane. What E2B has and the facade does not is 501
// (unsupportedAPIs); everything else under the control paths that no route
// matches is 404 in the E2B shape.
func (f *Facade) routes() http.Handler {
	mux := http.NewServeMux()
	for pattern, h := range map[string]handler{
		"POST /sandboxes":                 f.createV1,
		"POST /v2/sandboxes":              f.createV2,
		"GET /sandboxes":                  f.listV1,
		"GET /v2/sandboxes":               f.listV2,
		"GET /sandboxes/{id}":             f.get,
		"DELETE /sandboxes/{id}":          f.kill,
		"POST /sandboxes/{id}/connect":    f.connect,
		"POST /v2/sandboxes/{id}/connect": f.connect,
		"POST /sandboxes/{id}/resume":     f.resume,
		"POST /sandboxes/{id}/timeout":    f.setTimeout,
		"POST /sandboxes/{id}/pause":      f.pause,
		"GET /sandboxes/{id}/metrics":     f.metrics,
		"GET /sandboxes/metrics":          f.batchMetrics,
		"GET /sandboxes/{id}/logs":        f.logsV1,
		"GET /v2/sandboxes/{id}/logs":     f.logsV2,
		"POST /sandboxes/{id}/snapshots":  f.createSnapshot,
		"GET /snapshots":                  f.listSnapshots,
		"DELETE /templates/{templateID}":  f.deleteTemplate,
		"POST /sandboxes/{id}/fork":       f.fork,
		"PUT /sandboxes/{id}/network":     f.updateNetwork,

		"POST /v3/templates":                                  f.requestBuild,
		"GET /templates/{templateID}/files/{hash}":            f.fileUpload,
		"POST /v2/templates/{templateID}/builds/{buildID}":    f.startBuild,
		"GET /templates/{templateID}/builds/{buildID}/status": f.buildStatus,
		"GET /templates/{a}/{b}":                              f.templatePair,
		"POST /templates/tags":                                f.assignTags,
		"DELETE /templates/tags":                              f.removeTags,
	} {
		mux.Handle(pattern, f.wrap(h))
	}
	// The upload URL fileUpload hands out: its token is the credential.
	mux.HandleFunc("PUT /templates/{templateID}/files/{hash}", f.putFiles)
	for pattern, what := range unsupportedAPIs {
		mux.Handle(pattern, f.wrap(f.unsupported(what)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			f.writeError(w, r, errorf(http.StatusNotFound, "no route for %s %s", r.Method, r.URL.Path))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// wrap authenticates the request and writes a returned error.
func (f *Facade) wrap(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := f.authenticate(r)
		if err == nil {
			err = h(w, r, c)
		}
		if err != nil {
			f.writeError(w, r, err)
		}
	})
}

// authenticate reads the API key from X-API-KEY (or a Bearer token), in our
// token form or its e2b_ hex form.
func (f *Facade) authenticate(r *http.Request) (service.Caller, error) {
	key := r.Header.Get("X-API-KEY")
	if key == "" {
		if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			key = strings.TrimSpace(tok)
		}
	}
	// Every way the key can be wrong is auth.ErrUnauthenticated, one
	// answer (package apierr).
	if key == "" {
		return service.Caller{}, fmt.Errorf("%w: no X-API-KEY", auth.ErrUnauthenticated)
	}
	if strings.HasPrefix(key, "e2b_") {
		tok, err := auth.FromE2BKey(key)
		if err != nil {
			return service.Caller{}, fmt.Errorf("%w: %v", auth.ErrUnauthenticated, err)
		}
		key = tok
	}
	p, err := f.auth.AuthenticateToken(r.Context(), key)
	if err != nil {
		return service.Caller{}, err
	}
	return service.Caller{Owner: p.Owner, Admin: p.IsAdmin(), Quota: service.Quota(p.Quota)}, nil
}

// get is GET /sandboxes/{id}: SandboxDetail.
func (f *Facade) get(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, f.detail(r, sb))
	return nil
}

// kill is DELETE /sandboxes/{id}: 204, or 404 with body code 404 (the SDK's
// kill() then returns false).
func (f *Facade) kill(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	if err := f.svc.Destroy(r.Context(), c, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// maxTimeoutSeconds is the longest timeout accepted (7 days, the service's
// bound).
const maxTimeoutSeconds = 7 * 24 * 3600

// defaultTimeout is a sandbox's life when the request names none.
const defaultTimeout = 300 * time.Second

// timeoutOf converts a wire timeout in seconds: nil or 0 is def.
func timeoutOf(s *int64, def time.Duration) (time.Duration, error) {
	switch {
	case s == nil || *s == 0:
		return def, nil
	case *s < 0:
		return 0, badRequest("timeout must be a positive number of seconds")
	case *s > maxTimeoutSeconds:
		// Checked before the multiplication, which would overflow.
		return 0, badRequest("timeout must be at most %d seconds", maxTimeoutSeconds)
	}
	return time.Duration(*s) * time.Second, nil
}

// connect is POST /sandboxes/{id}/connect and its v2 twin: 200 with the
// sandbox when it was running (the timeout, when given, extends its
// expiry to now+timeout if that is later; never shortens it), 201 when it
// was paused and is now resumed (with the timeout, else 300 s).
func (f *Facade) connect(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body connectBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	sb, resumed, err := f.resumeSandbox(r.Context(), c, r.PathValue("id"), body.Timeout)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	writeJSON(w, status, f.sandbox(r, sb))
	return nil
}

// resume is the legacy POST /sandboxes/{id}/resume: like connect, but 409
// when the sandbox is already running.
func (f *Facade) resume(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body connectBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if sb.State == service.StateRunning {
		return errorf(http.StatusConflict, "sandbox %s is already running", sb.ID)
	}
	sb, _, err = f.resumeSandbox(r.Context(), c, sb.ID, body.Timeout)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, f.sandbox(r, sb))
	return nil
}

// resumeSandbox resumes the sandbox unless it is running and sets its
// timeout: on resume the given one or the default (a paused sandbox has
// none); on a running sandbox the given one, only if it extends. A paused
// sandbox is thawed (Service.Resume: its processes continue); a stopped
// one, or one paused past the daemon's --pause-max, is started (its
// processes restart; E2B's answer has no word for that). It makes sure the
// interpreter server of a resumed code-interpreter sandbox runs (it does
// after a thaw; it is started again after a restart).
func (f *Facade) resumeSandbox(ctx context.Context, c service.Caller, id string, timeout *int64) (sb service.Sandbox, resumed bool, err error) {
	sb, err = f.svc.Get(ctx, c, id)
	if err != nil {
		return sb, false, err
	}
	if sb.State != service.StateRunning {
		r, err := f.svc.Resume(ctx, c, sb.ID)
		if err != nil {
			return sb, false, err
		}
		sb, resumed = r.Sandbox, true
	}
	if timeout != nil || resumed {
		d, err := timeoutOf(timeout, defaultTimeout)
		if err != nil {
			return sb, resumed, err
		}
		// On a running sandbox connect only ever extends: the SDK sends a
		// timeout (5 min by default) on every connect, which must not cut a
		// long-lived sandbox short. A resumed one had no expiry: it gets d.
		u := service.Update{SetTimeout: true, Timeout: d, ExtendOnly: !resumed}
		if sb, err = f.svc.UpdateSandbox(ctx, c, sb.ID, u); err != nil {
			return sb, resumed, err
		}
	}
	if resumed {
		if err := f.ensureInterpreter(ctx, sb); err != nil {
			return sb, resumed, err
		}
	}
	return sb, resumed, nil
}

// setTimeout is POST /sandboxes/{id}/timeout {timeout: seconds}: the
// sandbox now expires that long from now (the reaper destroys it then).
func (f *Facade) setTimeout(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body timeoutBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if body.Timeout == nil {
		return badRequest("timeout is required")
	}
	d, err := timeoutOf(body.Timeout, 0)
	if err != nil {
		return err
	}
	if d == 0 {
		return badRequest("timeout must be a positive number of seconds")
	}
	if _, err := f.svc.UpdateSandbox(r.Context(), c, r.PathValue("id"), service.Update{SetTimeout: true, Timeout: d}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause is POST /sandboxes/{id}/pause, body {memory?} (the SDK's
// keepMemory): without it, freeze the sandbox's processes in memory
// (Service.Pause); with memory true, hibernate them to disk
// (Service.Hibernate: where the runtime cannot, the sandbox is stopped);
// with memory false, stop it, keeping only its file system (its connect
// is a fresh start, as E2B's is). Then clear the timeout (a paused
// sandbox does not expire; connect gives it one again). 409 with body
// code 409 when it is already paused, or stopped (pause() is then false).
func (f *Facade) pause(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var body struct {
		Memory *bool `json:"memory"`
	}
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if sb.State != service.StateRunning {
		return errorf(http.StatusConflict, "sandbox %s is already paused", sb.ID)
	}
	switch {
	case body.Memory == nil:
		_, err = f.svc.Pause(r.Context(), c, sb.ID)
	case *body.Memory:
		_, err = f.svc.Hibernate(r.Context(), c, sb.ID)
	default:
		_, err = f.svc.Stop(r.Context(), c, sb.ID)
	}
	if err != nil {
		return err
	}
	if _, err := f.svc.UpdateSandbox(r.Context(), c, sb.ID, service.Update{SetTimeout: true}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// metrics is GET /sandboxes/{id}/metrics: the sandbox's statistics,
// one sample taken now (no history is kept), for a running sandbox whose
// [start, end] window (unix seconds, both optional) holds now; none for a
// paused sandbox or a window in the past or future. end gets a second of
// slack, since the SDK rounds it from milliseconds.
func (f *Facade) metrics(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	start, err := unixParam(r.URL.Query(), "start")
	if err != nil {
		return err
	}
	end, err := unixParam(r.URL.Query(), "end")
	if err != nil {
		return err
	}
	if start > 0 && end > 0 && start > end {
		return badRequest("start must not be after end")
	}
	sb, err := f.svc.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := []sandboxMetric{}
	now := time.Now().Unix()
	inWindow := (start == 0 || start <= now) && (end == 0 || now <= end+1)
	if sb.State == service.StateRunning && inWindow {
		m, err := f.sample(r.Context(), c, sb)
		if err != nil {
			return err
		}
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// maxBatchMetrics bounds the sandboxes of one batch metrics call.
const maxBatchMetrics = 100

// batchMetrics is GET /sandboxes/metrics?sandbox_ids=a,b: a sample of each
// running sandbox named, keyed by id; ids that are unknown, invisible to
// the caller or not running are left out.
func (f *Facade) batchMetrics(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return badRequest("sandbox_ids is required")
	}
	if len(ids) > maxBatchMetrics {
		return badRequest("at most %d sandbox_ids", maxBatchMetrics)
	}
	out := map[string]sandboxMetric{}
	for _, id := range ids {
		sb, err := f.svc.Get(r.Context(), c, id)
		if service.Is(err, service.ErrNotFound) || (err == nil && sb.State != service.StateRunning) {
			continue
		}
		if err != nil {
			return err
		}
		m, err := f.sample(r.Context(), c, sb)
		if service.Is(err, service.ErrNotFound) || service.Is(err, service.ErrConflict) {
			continue // gone or stopped since
		}
		if err != nil {
			return err
		}
		out[sb.ID] = m
	}
	writeJSON(w, http.StatusOK, struct {
		Sandboxes map[string]sandboxMetric `json:"sandboxes"`
	}{out})
	return nil
}

// sample takes one SandboxMetric of a running sandbox: CPU and memory from
// the engine, disk from df in the sandbox. A disk that cannot be read (no
// df in the image, a sandbox too busy) is reported as 0 and logged, rather
// than failing the call.
func (f *Facade) sample(ctx context.Context, c service.Caller, sb service.Sandbox) (sandboxMetric, error) {
	st, err := f.svc.Stats(ctx, c, sb.ID)
	if err != nil {
		return sandboxMetric{}, err
	}
	disk, err := f.svc.SandboxDisk(ctx, c, sb.ID)
	if err != nil {
		if ctx.Err() != nil {
			return sandboxMetric{}, ctx.Err()
		}
		f.log.DebugContext(ctx, "e2b: metrics: disk usage", "sandbox", sb.ID, "err", err)
	}
	cpus := max(1, (sb.MilliCPU+999)/1000)
	return sandboxMetric{
		Timestamp:     st.At.UTC().Format(time.RFC3339Nano),
		TimestampUnix: st.At.Unix(),
		CPUCount:      cpus,
		// E2B's percentage is of the sandbox's CPUs, ours of one core.
		CPUUsedPct: st.CPUPercent / float64(cpus),
		MemUsed:    st.MemoryUsed,
		MemTotal:   st.MemoryLimit,
		DiskUsed:   disk.Used,
		DiskTotal:  disk.Total,
	}, nil
}

// unixParam reads query parameter name as unix seconds; absent is 0.
func unixParam(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s must be unix seconds, not %q", name, v)
	}
	return n, nil
}

// listV1 is GET /sandboxes: the running sandboxes, all of them.
func (f *Facade) listV1(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	return f.list(w, r, c, []string{stateRunning})
}

// listV2 is GET /v2/sandboxes: running and paused by default.
func (f *Facade) listV2(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	return f.list(w, r, c, []string{stateRunning, statePaused})
}

// maxListLimit caps one page, as E2B does.
const maxListLimit = 100

// list answers ListedSandbox[] for the query's filters: metadata (an
// urlencoded k=v&… whose keys and values are urlencoded again, as the JS
// SDK sends it; all pairs must match), state (running and/or paused, comma
// separated or repeated), template (the template id the sandbox was
// created from), startedAfter and startedBefore (RFC 3339, inclusive),
// order (asc or desc by start time; E2B's default is desc, newest first),
// limit and nextToken. The next page's token goes in the x-next-token
// response header. One keyset over creation time covers running and paused
// sandboxes alike, so a page never repeats or skips a sandbox that was
// paused or resumed between pages.
func (f *Facade) list(w http.ResponseWriter, r *http.Request, c service.Caller, defaultStates []string) error {
	q := r.URL.Query()
	filter := service.ListFilter{PageToken: q.Get("nextToken"), Limit: maxListLimit, NewestFirst: true}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badRequest("limit must be a positive integer")
		}
		filter.Limit = min(n, maxListLimit)
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		filter.NewestFirst = false
	default:
		return badRequest("order must be asc or desc, not %q", o)
	}
	var err error
	if filter.CreatedFrom, err = parseTimeParam(q, "startedAfter"); err != nil {
		return err
	}
	if filter.CreatedUntil, err = parseTimeParam(q, "startedBefore"); err != nil {
		return err
	}
	if t := q.Get("template"); t != "" {
		filter.Annotations = map[string]string{annTemplate: t}
	}
	tags, err := parseMetadataFilter(q.Get("metadata"))
	if err != nil {
		return err
	}
	filter.Tags = tags
	states := defaultStates
	if vs := q["state"]; len(vs) > 0 {
		states = nil
		for _, v := range vs {
			states = append(states, strings.Split(v, ",")...)
		}
	}
	for _, s := range states {
		ss := storeStates(strings.TrimSpace(s))
		if ss == nil {
			return badRequest("unknown state %q (want running or paused)", s)
		}
		filter.States = append(filter.States, ss...)
	}
	items, next, err := f.svc.List(r.Context(), c, filter)
	if err != nil {
		return err
	}
	out := make([]listedSandbox, 0, len(items))
	for _, sb := range items {
		out = append(out, listed(sb))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseTimeParam reads query parameter name as an RFC 3339 time (what the
// SDK's toISOString sends); absent is the zero time.
func parseTimeParam(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, badRequest("%s must be an RFC 3339 time, not %q", name, v)
	}
	return t, nil
}

// parseMetadataFilter decodes the metadata query parameter. The JS SDK
// encodes each key and value, joins them as a query string (encoding
// again) and the whole is encoded once more as the parameter's value; after
// the query is parsed, one url.ParseQuery and one unescape per key and
// value remain. A key or value that does not unescape is taken as is.
func parseMetadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	pairs, err := url.ParseQuery(raw)
	if err != nil {
		return nil, badRequest("invalid metadata filter: %v", err)
	}
	tags := make(map[string]string, len(pairs))
	for k, vs := range pairs {
		if len(vs) == 0 {
			continue
		}
		tags[unescape(k)] = unescape(vs[len(vs)-1])
	}
	return tags, nil
}

func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
