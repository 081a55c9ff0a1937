package e2b

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
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

// Create dedupe (see the package documentation).
const (
	dedupeScope        = "e2b.create"
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
	req, err := f.createRequest(c.Owner, body)
	if err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey {
		return badRequest("Idempotency-Key is longer than %d bytes", maxIdempotencyKey)
	}
	fp := fingerprint(req)

	var once service.Once
	switch {
	case key != "":
		once = service.Once{
			Scope:        keyScope,
			Fingerprint:  hashHex(c.Owner + "\x00" + key),
			RequestHash:  fp,
			PendingTTL:   dedupePendingTTL,
			ReplayWindow: keyReplayWindow,
		}
	case f.bodyDedupe:
		once = service.Once{
			Scope:        dedupeScope,
			Fingerprint:  fp,
			PendingTTL:   dedupePendingTTL,
			ReplayWindow: dedupeReplayWindow,
			// A duplicate of a create whose sandbox was killed since is a
			// new create, not a replay of a dead id.
			Live: func(ctx context.Context, id string) bool {
				_, err := f.svc.Get(ctx, c, id)
				return !errors.Is(err, service.ErrNotFound)
			},
		}
	default:
		created, err := f.svc.CreateSandbox(r.Context(), req)
		if err != nil {
			return templateErr(body.TemplateID, err)
		}
		if err := f.afterCreate(r.Context(), created.Sandbox); err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, f.sandbox(created.Sandbox))
		return nil
	}

	var created *service.Created // set only when this call did the work
	id, _, err := f.svc.Idempotent(r.Context(), once, func(ctx context.Context) (string, error) {
		id, err := f.dedupedID(ctx, once)
		if err != nil {
			return "", err
		}
		c, err := f.svc.CreateSandboxWithID(ctx, id, req)
		if err != nil {
			return "", err
		}
		if err := f.afterCreate(ctx, c.Sandbox); err != nil {
			return "", err
		}
		created = c
		return c.ID, nil
	})
	if err != nil {
		return templateErr(body.TemplateID, err)
	}
	var sb service.Sandbox
	if created != nil {
		sb = created.Sandbox
	} else if sb, err = f.svc.Get(r.Context(), c, id); err != nil {
		// The first call's sandbox is already gone (killed or expired):
		// the replay has nothing to return.
		return err
	}
	writeJSON(w, http.StatusCreated, f.sandbox(sb))
	return nil
}

// afterCreate starts what a template needs beyond its container (the
// code-interpreter server). On failure it destroys the sandbox, so a create
// that answers an error leaves nothing behind and its claim can go.
func (f *Facade) afterCreate(ctx context.Context, sb service.Sandbox) error {
	err := f.ensureInterpreter(ctx, sb)
	if err == nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if derr := f.svc.Destroy(dctx, service.Caller{Owner: sb.Owner, Admin: true}, sb.ID); derr != nil && !errors.Is(derr, service.ErrNotFound) {
		return errors.Join(err, fmt.Errorf("destroy sandbox %s after a failed create: %w", sb.ID, derr))
	}
	return err
}

// dedupedID is the id of the sandbox a claim creates: "sb-" and the first
// 16 hex digits of sha256(scope, fingerprint, claim lock deadline). Every
// caller that shares the claim derives the same id — so a duplicate that
// lands on another node collides with it — and a later claim of the same
// fingerprint (after the replay window) has another deadline and so
// another id.
func (f *Facade) dedupedID(ctx context.Context, o service.Once) (string, error) {
	c, ok := service.ClaimFrom(ctx)
	if !ok {
		return "", errors.New("dedupe: create runs outside an idempotency claim")
	}
	var nonce [8]byte
	binary.BigEndian.PutUint64(nonce[:], uint64(c.LockedUntil.UnixNano()))
	h := sha256.New()
	h.Write([]byte(o.Scope + "\x00" + o.Fingerprint + "\x00"))
	h.Write(nonce[:])
	return "sb-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// templateErr turns the service's "image not present" into E2B's
// "template not found" (404).
func templateErr(template string, err error) error {
	var fe *service.FieldError
	if errors.As(err, &fe) && fe.Field == "image" {
		return errorf(http.StatusNotFound, "template %q not found: no such image on this host", template)
	}
	return err
}

// createRequest validates body and turns it into the service's request.
// Nothing happens before it succeeds.
func (f *Facade) createRequest(owner string, body newSandboxBody) (service.CreateRequest, error) {
	template := body.TemplateID
	if template == "" {
		template = "base"
	}
	image, ok := f.images[template]
	if !ok {
		image = template // any locally present image
	}
	if strings.ContainsAny(template, " \t\r\n\x00") {
		return service.CreateRequest{}, badRequest("invalid templateID %q", template)
	}
	if len(body.MCP) > 0 && string(body.MCP) != "null" {
		return service.CreateRequest{}, badRequest("mcp is not supported")
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
	if body.AllowInternetAccess != nil {
		ann[annAllowInternet] = strconv.FormatBool(*body.AllowInternetAccess)
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
	var mounts []service.Mount
	for _, m := range body.VolumeMounts {
		mounts = append(mounts, service.Mount{Volume: m.Name, Path: m.Path})
	}
	return service.CreateRequest{
		Owner:       owner,
		Image:       image,
		Env:         maps.Clone(body.EnvVars),
		Tags:        maps.Clone(body.Metadata),
		Timeout:     timeout,
		Network:     false, // no network until network policy is enforced
		Mounts:      mounts,
		Annotations: ann,
	}, nil
}

// fingerprint is the hex SHA-256 of the normalized request: owner,
// image, env, tags, timeout, mounts and the annotations (template,
// lifecycle flags, network posture, secure). encoding/json writes map keys
// sorted, so equal requests hash equal whatever their order on the wire.
func fingerprint(req service.CreateRequest) string {
	b, err := json.Marshal(struct {
		Owner       string
		Image       string
		Env         map[string]string
		Tags        map[string]string
		TimeoutS    float64
		Mounts      []service.Mount
		Annotations map[string]string
	}{req.Owner, req.Image, req.Env, req.Tags, req.Timeout.Seconds(), req.Mounts, req.Annotations})
	if err != nil {
		panic(fmt.Sprintf("e2b: marshal fingerprint: %v", err)) // maps of strings always marshal
	}
	return hashHex(string(b))
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
