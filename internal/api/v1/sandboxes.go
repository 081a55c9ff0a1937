package v1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Idempotency of POST /v1/sandboxes (docs/design.md, sections 3 and 4).
const (
	createScope = "v1.create"
	// createPendingTTL bounds how long a duplicate waits for the first
	// call: longer than any create takes, short enough that a claim whose
	// daemon died frees itself.
	createPendingTTL = 2 * time.Minute
	// createReplayWindow is how long a retry with the same key still gets
	// the first call's sandbox.
	createReplayWindow = 24 * time.Hour
)

// healthz is liveness: the process answers.
func (s *server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.version})
	return nil
}

// readyz is readiness: 200 once the startup repair has succeeded (routes,
// ports and domains restored, capacity recomputed) and while the engine
// answers, the data directory has space and the database can be written;
// else 503 with why: "starting" (with the cause when a dependency's fault
// is what the startup repair waits for), or "unavailable" with the cause
// (engine, disk, store) and every fault seen. A fault's 503 lasts while the probes
// (at most one every few seconds) see it.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) error {
	if ok, reason := s.svc.Ready(); !ok {
		body := map[string]any{"status": "starting", "reason": reason, "version": s.version}
		if faults := s.svc.Faults(r.Context()); len(faults) > 0 {
			body["cause"], body["faults"] = faults[0].Cause, faults // what the repair waits for
		}
		writeJSON(w, http.StatusServiceUnavailable, body)
		return nil
	}
	if faults := s.svc.Faults(r.Context()); len(faults) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"status": "unavailable", "cause": faults[0].Cause, "reason": faults[0].Detail,
			"faults": faults, "version": s.version,
		})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "version": s.version})
	return nil
}

// createSandbox creates a sandbox: 201 with the sandbox (its private key
// included) and a Server-Timing header with one entry per create step.
//
// With an Idempotency-Key the create runs at most once per (owner, key):
// concurrent duplicates wait for the first and every retry within the
// replay window gets the same sandbox, also with 201, without the private
// key (it is never stored) and with "Idempotent-Replayed: true". The same
// key with another body is idempotency_key_reused.
func (s *server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var body createRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	c := caller(r)
	create, err := body.toService(c.Owner, s.defaultTimeout)
	if err != nil {
		return err
	}
	once := service.CreateOnceRequest{Create: create}
	if key != "" {
		scope, fp := CreateKey(c.Owner, key)
		once.Key = service.OnceKey{
			Scope:        scope,
			Fingerprint:  fp,
			RequestHash:  requestHash(body),
			PendingTTL:   createPendingTTL,
			ReplayWindow: createReplayWindow,
		}
	}
	if elsewhere, err := s.placer.Elsewhere(w, r, c, once); elsewhere || err != nil {
		return err // another node answered, or none can be chosen now
	}
	created, err := s.svc.CreateOnce(r.Context(), c, once)
	if err != nil {
		return err
	}
	writeCreated(w, created)
	return nil
}

// CreateKey is the scope and fingerprint of owner's create with
// Idempotency-Key key: its claim on the node, and (cluster mode) the key a
// cluster binds to one node and to the sandbox the create makes.
func CreateKey(owner, key string) (scope, fingerprint string) {
	return createScope, hashHex(owner + "\x00" + key)
}

func writeCreated(w http.ResponseWriter, c *service.Created) {
	if len(c.Timings) > 0 {
		w.Header().Set("Server-Timing", serverTiming(c.Timings))
	}
	if c.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, toCreatedJSON(c))
}

// toCreatedJSON is a sandbox as a create answers it: with its private key
// (when this call made it).
func toCreatedJSON(c *service.Created) sandboxJSON {
	out := toSandboxJSON(c.Sandbox)
	out.SSHPrivateKey = c.SSHPrivateKey
	return out
}

// requestHash is the SHA-256 of the canonical encoding of a decoded create
// request: field order, whitespace and map order in the client's body do
// not change it.
func requestHash(body createRequest) string {
	b, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("marshal create request: %v", err)) // strings, numbers and maps always marshal
	}
	return hashHex(string(b))
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// serverTiming renders step timings as a Server-Timing header value
// (RFC: W3C Server Timing): "validate;dur=0.1, store;dur=0.4". Step names
// become tokens: anything but letters, digits, '-' and '_' turns into '_'.
func serverTiming(ts []service.StepTiming) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		ms := strconv.FormatFloat(float64(t.Duration.Microseconds())/1000, 'f', -1, 64)
		parts[i] = timingToken(t.Step)
		if t.Desc != "" {
			parts[i] += ";desc=" + timingToken(t.Desc)
		}
		parts[i] += ";dur=" + ms
	}
	return strings.Join(parts, ", ")
}

func timingToken(name string) string {
	if name == "" {
		return "step"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, name)
}

// listSandboxes answers one page of the caller's sandboxes. Filters:
// name, tag.<key>=<value> (all must match), state, limit (1-1000, default
// 100) and page_token.
func (s *server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q, err := query(r, listParam)
	if err != nil {
		return err
	}
	limit, err := intParam(q, "limit", 1, service.MaxListLimit, service.DefaultListLimit)
	if err != nil {
		return err
	}
	f := service.ListFilter{Name: q.Get("name"), Limit: limit, PageToken: q.Get("page_token")}
	if st := q.Get("state"); st != "" {
		if !service.State(st).Valid() {
			return fieldError("state", "%q is not one of creating, running, paused, stopping, stopped, error", st)
		}
		f.States = []service.State{service.State(st)}
	}
	for k, v := range q {
		if tag, ok := strings.CutPrefix(k, "tag."); ok {
			if f.Tags == nil {
				f.Tags = map[string]string{}
			}
			f.Tags[tag] = v[0]
		}
	}
	sbs, next, err := s.svc.List(r.Context(), caller(r), f)
	if err != nil {
		return err
	}
	out := listJSON[sandboxJSON]{Items: make([]sandboxJSON, len(sbs)), NextPageToken: next}
	for i, sb := range sbs {
		out.Items[i] = toSandboxJSON(sb)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listParam accepts the query parameters of GET /v1/sandboxes.
func listParam(k string) bool {
	if tag, ok := strings.CutPrefix(k, "tag."); ok {
		return tag != ""
	}
	return slices.Contains([]string{"name", "state", "limit", "page_token"}, k)
}

func (s *server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.svc.Get(r.Context(), caller(r), r.PathValue("id"))
	return writeSandbox(w, sb, err)
}

// updateSandbox sets the timeout (counted from now; 0 clears it) and/or
// replaces the tags. Fields that are absent stay as they are.
func (s *server) updateSandbox(w http.ResponseWriter, r *http.Request) error {
	var body updateRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	var u service.Update
	if body.TimeoutS != nil {
		u.SetTimeout, u.Timeout = true, seconds(*body.TimeoutS)
	}
	u.Tags = body.Tags
	if body.Lifecycle != nil {
		rules, err := body.Lifecycle.toService()
		if err != nil {
			return err
		}
		u.Lifecycle = &rules
	}
	if body.Network != nil {
		// The policy first: it can be refused; the rest is retried alike.
		sb, err := s.svc.SetNetworkPolicy(r.Context(), caller(r), r.PathValue("id"), body.Network.Policy)
		if err != nil || (body.TimeoutS == nil && body.Tags == nil && body.Lifecycle == nil) {
			return writeSandbox(w, sb, err)
		}
	}
	sb, err := s.svc.UpdateSandbox(r.Context(), caller(r), r.PathValue("id"), u)
	return writeSandbox(w, sb, err)
}

// destroySandbox answers 204, or not_found when the sandbox never existed
// or is already gone (so a retried DELETE learns that its first try won).
func (s *server) destroySandbox(w http.ResponseWriter, r *http.Request) error {
	if err := s.svc.Destroy(r.Context(), caller(r), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) startSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.svc.Start(r.Context(), caller(r), r.PathValue("id"))
	return writeSandbox(w, sb, err)
}

func (s *server) stopSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.svc.Stop(r.Context(), caller(r), r.PathValue("id"))
	return writeSandbox(w, sb, err)
}

// pauseSandbox freezes the sandbox's processes; pausing a paused sandbox
// answers it unchanged.
func (s *server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.svc.Pause(r.Context(), caller(r), r.PathValue("id"))
	return writeSandbox(w, sb, err)
}

// hibernateSandbox checkpoints the sandbox's processes to disk and frees
// its memory, or stops it where the runtime cannot and says why.
func (s *server) hibernateSandbox(w http.ResponseWriter, r *http.Request) error {
	res, err := s.svc.Hibernate(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hibernateJSON{sandboxJSON: toSandboxJSON(res.Sandbox), Stopped: res.Stopped, StoppedReason: res.Reason})
	return nil
}

// resumeSandbox thaws a paused sandbox, or starts a stopped one and says
// that its processes restarted.
func (s *server) resumeSandbox(w http.ResponseWriter, r *http.Request) error {
	res, err := s.svc.Resume(r.Context(), caller(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resumeJSON{sandboxJSON: toSandboxJSON(res.Sandbox), ProcessesRestarted: res.ProcessesRestarted, ConnectionsClosed: res.ConnectionsClosed})
	return nil
}

func writeSandbox(w http.ResponseWriter, sb service.Sandbox, err error) error {
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSandboxJSON(sb))
	return nil
}
