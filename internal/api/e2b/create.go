package e2b

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Dedupe is the rule for creates without an Idempotency-Key (see the
// package documentation).
type Dedupe string

const (
	// DedupeUndelivered (the default): every create makes a sandbox; only a
	// create whose client went away before its answer is adopted, by one
	// identical create within the window, and destroyed after it.
	DedupeUndelivered Dedupe = "undelivered"
	// DedupeBody is the old rule: identical bodies within the window give
	// one sandbox, whether or not the first answer was delivered.
	DedupeBody Dedupe = "body"
	// DedupeOff: no dedupe; a create whose client went away lives until its
	// timeout.
	DedupeOff Dedupe = "off"
)

// Create dedupe (see the package documentation).
const (
	dedupeScope = "e2b.create"
	// deliveryScope holds the claims of DedupeUndelivered, one per create.
	deliveryScope      = "e2b.create.delivery"
	keyScope           = "e2b.create.key"
	dedupePendingTTL   = 2 * time.Minute
	dedupeReplayWindow = 10 * time.Second
	// keyReplayWindow is how long an explicit Idempotency-Key keeps
	// answering with its sandbox, as on the native API.
	keyReplayWindow = 24 * time.Hour
	// maxIdempotencyKey bounds the header, as on the native API.
	maxIdempotencyKey = 255
)

const codeInterpreterTemplate = "code-interpreter-v1"

// createV1 is POST /sandboxes: NewSandbox, where `secure` defaults to true.
func (f *Facade) createV1(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	return f.create(w, r, c, true)
}

// createV2 is POST /v2/sandboxes: NewSandboxV2, always secure.
func (f *Facade) createV2(w http.ResponseWriter, r *http.Request, c service.Caller) error {
	return f.create(w, r, c, false)
}

// create answers 201 with the Sandbox: a new one, or, for a duplicate (see
// the package documentation on dedupe), the first call's.
func (f *Facade) create(w http.ResponseWriter, r *http.Request, c service.Caller, v1 bool) error {
	var body newSandboxBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if !v1 {
		body.Secure = nil // not part of v2; E2B secures every v2 sandbox
	}
	from, err := f.resolveTemplate(r.Context(), c, body.TemplateID)
	if err != nil {
		return err
	}
	req, err := f.createRequest(c.Owner, body, from)
	if err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey {
		return badRequest("Idempotency-Key is longer than %d bytes", maxIdempotencyKey)
	}
	once := service.CreateOnceRequest{Create: req, After: f.afterCreate}
	switch fp := fingerprint(req); {
	case key != "":
		once.Key = service.OnceKey{
			Scope:        keyScope,
			Fingerprint:  hashHex(c.Owner + "\x00" + key),
			RequestHash:  fp,
			PendingTTL:   dedupePendingTTL,
			ReplayWindow: keyReplayWindow,
		}
		once.DeriveID = true
	case f.bodyDedupe == DedupeBody:
		once.Key = service.OnceKey{
			Scope:        dedupeScope,
			Fingerprint:  fp,
			PendingTTL:   dedupePendingTTL,
			ReplayWindow: f.window,
		}
		once.DeriveID = true
	case f.bodyDedupe == DedupeUndelivered:
		once.Key = service.OnceKey{
			Scope:        deliveryScope,
			Fingerprint:  fp,
			PendingTTL:   dedupePendingTTL,
			ReplayWindow: f.window,
			Delivery:     true,
		}
	}
	if elsewhere, err := f.placer.Elsewhere(w, r, c, once); elsewhere || err != nil {
		return err // another node answered, or none can be chosen now
	}
	created, err := f.svc.CreateOnce(r.Context(), c, once)
	if err != nil {
		return templateErr(body.TemplateID, err)
	}
	return f.deliver(w, r, created)
}

// deliver writes the create's answer and tells its Delivery (if any)
// whether it reached the client: HandOver right before the write (a client
// that went away gets nothing written, and its sandbox waits for its
// retry), Failed when the write or the flush fails. The body goes out with
// its length and is flushed before the handler returns, so "written without
// error" means the whole answer left the process.
func (f *Facade) deliver(w http.ResponseWriter, r *http.Request, created *service.Created) error {
	b, err := json.Marshal(f.sandbox(r, created.Sandbox))
	if err != nil {
		return fmt.Errorf("encode sandbox: %w", err)
	}
	b = append(b, '\n')
	switch err := created.Delivery.HandOver(r.Context()); {
	case errors.Is(err, service.ErrUndelivered):
		f.log.Info("e2b: create's client went away before its answer; the sandbox waits for its retry", "sandbox", created.ID)
		return nil // nobody to answer
	case err != nil:
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusCreated)
	_, err = w.Write(b)
	if err == nil {
		if ferr := http.NewResponseController(w).Flush(); !errors.Is(ferr, http.ErrNotSupported) {
			err = ferr
		}
	}
	if err != nil {
		created.Delivery.Failed(r.Context())
		f.log.Info("e2b: create's answer was not delivered; the sandbox waits for its retry", "sandbox", created.ID, "err", err)
	}
	return nil // the status line is out; nothing more can be said
}

// afterCreate starts what a template needs beyond its container (the
// code-interpreter server). When it fails, CreateOnce destroys the
// sandbox, so a create that answers an error leaves nothing behind.
func (f *Facade) afterCreate(ctx context.Context, sb service.Sandbox) error {
	return f.ensureInterpreter(ctx, sb)
}

// templateErr turns the service's "image not present" into E2B's
// "template not found" (404). A template id that is no image reference
// at all stays a 400.
func templateErr(template string, err error) error {
	if service.IsPullRefusal(err) {
		if service.Is(err, service.ErrNotFound) {
			return errorf(http.StatusNotFound, "template %q not found: %v", template, err)
		}
		return err // refused (403): its own words
	}
	if errors.Is(err, service.ErrImageNotPresent) {
		return errorf(http.StatusNotFound, "template %q not found: no such image on this host", template)
	}
	return err
}

// fromTemplate is a create's templateID resolved to one of the caller's
// templates (a snapshot's id, or a template's name).
type fromTemplate struct {
	id   string // the service's template id
	user string // envd's default user in its sandboxes; "" none
}

// resolveTemplate resolves a create's templateID: a built-in template is
// nil (createRequest maps it to its image), as is one that names none of
// the caller's templates (createRequest takes it as an image reference).
// Built-ins come first, so `base` always means the base image.
func (f *Facade) resolveTemplate(ctx context.Context, c service.Caller, templateID string) (*fromTemplate, error) {
	if _, builtin := f.images[cmp.Or(templateID, "base")]; builtin {
		return nil, nil
	}
	t, ok, err := f.templateFor(ctx, c, templateID)
	if err != nil || !ok {
		return nil, err
	}
	return &fromTemplate{id: t.ID, user: f.templateUser(ctx, c, t)}, nil
}

// createRequest validates body and turns it into the service's request,
// from the template from when it is not nil (resolveTemplate), else from
// the built-in template's image or the image templateID names. Nothing
// happens before it succeeds.
func (f *Facade) createRequest(owner string, body newSandboxBody, from *fromTemplate) (service.CreateRequest, error) {
	template := body.TemplateID
	if template == "" {
		template = "base"
	}
	image, ok := f.images[template]
	if !ok {
		image = template // any locally present image
	}
	var templateRef string
	if from != nil {
		image, templateRef = "", from.id
	}
	if strings.ContainsAny(template, " \t\r\n\x00") {
		return service.CreateRequest{}, badRequest("invalid templateID %q", template)
	}
	// mcp is the SDK's: after create it runs `mcp-gateway --config …` in
	// the sandbox and, when that fails, kills it and reports the stderr.
	// The built-in images' mcp-gateway says that sandboxd has none.
	if len(body.MCP) > 0 && string(body.MCP) != "null" && body.MCP[0] != '{' {
		return service.CreateRequest{}, badRequest("mcp must be an object of MCP servers")
	}
	if len(body.IAM) > 0 && string(body.IAM) != "null" && string(body.IAM) != "{}" {
		return service.CreateRequest{}, badRequest("iam is not supported")
	}
	timeout, err := timeoutOf(body.Timeout, defaultTimeout)
	if err != nil {
		return service.CreateRequest{}, err
	}
	ann := map[string]string{annTemplate: template}
	if body.Secure != nil && !*body.Secure {
		ann[annSecure] = "false"
	}
	if _, builtin := f.images[template]; builtin {
		ann[annUser] = "user" // the built-in images have E2B's user
	}
	if from != nil && from.user != "" {
		ann[annUser] = from.user
	}
	if body.AllowInternetAccess != nil {
		ann[annAllowInternet] = strconv.FormatBool(*body.AllowInternetAccess)
	}
	policy, err := f.createPolicy(body.AllowInternetAccess, body.Network)
	if err != nil {
		return service.CreateRequest{}, err
	}
	if len(body.Network) > 0 && string(body.Network) != "null" {
		var canon bytes.Buffer
		if err := json.Compact(&canon, body.Network); err != nil {
			return service.CreateRequest{}, badRequest("invalid network: %v", err)
		}
		ann[annNetwork] = canon.String()
		var n struct {
			AllowPublicTraffic *bool `json:"allowPublicTraffic"`
		}
		if err := json.Unmarshal(body.Network, &n); err != nil {
			return service.CreateRequest{}, badRequest("invalid network: %v", err)
		}
		if n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic {
			ann[annPrivate] = "true"
		}
	}
	if body.AutoPause != nil && *body.AutoPause {
		ann[annAutoPause] = "true"
	}
	if body.AutoResume != nil && body.AutoResume.Enabled {
		ann[annAutoResume] = "true"
	}
	// autoPauseMemory is sent only with autoPause (the SDK's
	// onTimeout.keepMemory): true hibernates, false stops keeping the
	// file system, as pause's memory does; absent freezes.
	var timeoutPause service.PauseKind
	if body.AutoPauseMemory != nil && ann[annAutoPause] == "true" {
		timeoutPause = service.PauseStop
		if *body.AutoPauseMemory {
			timeoutPause = service.PauseHibernate
		}
		ann[annAutoPauseMemory] = strconv.FormatBool(*body.AutoPauseMemory)
	}
	var mounts []service.Mount
	for _, m := range body.VolumeMounts {
		mounts = append(mounts, service.Mount{Volume: m.Name, Path: m.Path})
	}
	return service.CreateRequest{
		Owner:    owner,
		Image:    image,
		Template: templateRef,
		Env:      maps.Clone(body.EnvVars),
		Tags:     maps.Clone(body.Metadata),
		Timeout:  timeout,
		// The egress asked for (createPolicy): none on a daemon without
		// --sandbox-network.
		NetworkPolicy: policy,
		Mounts:        mounts,
		Annotations:   ann,
		// autoPause: the reaper pauses the sandbox when its timeout
		// passes, instead of killing it (lifecycle.onTimeout "pause"),
		// as a pause with autoPauseMemory as its memory would;
		// autoResume: a request to it while paused resumes it.
		Lifecycle: service.Lifecycle{
			PauseOnTimeout: ann[annAutoPause] == "true",
			TimeoutPause:   timeoutPause,
			AutoResume:     ann[annAutoResume] == "true",
		},
	}, nil
}

// fingerprint is the hex SHA-256 of the normalized request: owner,
// image or template, env, tags, timeout, mounts and the annotations (template,
// lifecycle flags, network posture, secure). encoding/json writes map keys
// sorted, so equal requests hash equal whatever their order on the wire.
func fingerprint(req service.CreateRequest) string {
	b, err := json.Marshal(struct {
		Owner       string
		Image       string
		Template    string `json:",omitempty"` // omitted: the hashes of image creates did not change with templates
		Env         map[string]string
		Tags        map[string]string
		TimeoutS    float64
		Mounts      []service.Mount
		Annotations map[string]string
	}{req.Owner, req.Image, req.Template, req.Env, req.Tags, req.Timeout.Seconds(), req.Mounts, req.Annotations})
	if err != nil {
		panic(fmt.Sprintf("e2b: marshal fingerprint: %v", err)) // maps of strings always marshal
	}
	return hashHex(string(b))
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
