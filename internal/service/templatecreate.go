package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// A create from a template: createAs resolves the request's template to
// its image before the chain (resolveTemplate, checkImage) and runs the
// template's start and ready commands after it (startTemplate).

// resolveTemplate turns req.Template into the image it creates from, and
// returns what the sandbox runs once created. A template image named as
// an image is refused: only its owner, by the template, creates from it.
func (s *Service) resolveTemplate(ctx context.Context, req *CreateRequest) (templateSpec, error) {
	if req.Template == "" {
		return templateSpec{}, s.checkImage(ctx, "image", req.Image)
	}
	if req.Image != "" {
		return templateSpec{}, invalid("template", "give either image or template, not both")
	}
	t, err := s.lookupTemplate(ctx, Caller{Owner: req.Owner}, req.Template)
	if err != nil {
		return templateSpec{}, err
	}
	if t.State != store.TemplateReady {
		return templateSpec{}, fmt.Errorf("template %s is %s, not ready: %w", t.ID, t.State, ErrConflict)
	}
	var spec templateSpec
	_ = json.Unmarshal(t.Spec, &spec)
	req.Image, req.Template = t.Image, ""
	return spec, nil
}

// checkImage refuses an image a tenant names when it is a template's,
// however it is named: the engine takes a tag, a digest, a registry
// host's spelling, an image id or any unique prefix of one, so the image
// is looked up and its label read. The answer is the one for an image
// that is not there: a template's existence is not told to whoever is
// not its owner. Verdicts on images that are not templates' are kept a
// minute, so a create of the same image pays the engine round trip once.
func (s *Service) checkImage(ctx context.Context, field, ref string) error {
	notPresent := &FieldError{Field: field, Reason: fmt.Sprintf("image %q is not present on this host", ref), Kind: ErrImageNotPresent}
	switch {
	case ref == "":
		return nil // the daemon's default
	case isTemplateImage(ref):
		return notPresent
	case s.Images == nil:
		return nil
	}
	if until, ok := s.imageVerdicts.Load(ref); ok && s.Clock().Before(until.(time.Time)) {
		return nil
	}
	img, err := s.Images.InspectImage(ctx, ref)
	switch {
	case errors.Is(err, runtime.ErrImageNotFound):
		return nil // the create says so, as before
	case err != nil:
		return fmt.Errorf("inspect image %q: %w", ref, err)
	case img.Config.Labels[labelTemplate] != "":
		return notPresent
	}
	if byID, err := s.byIDFromPrivate(ctx, ref, img); err != nil || byID {
		return cmp.Or(err, byIDRefused(ref)) // never cached
	}
	if s.imageVerdictCount.Add(1) > maxImageVerdicts {
		s.imageVerdicts.Clear()
		s.imageVerdictCount.Store(0)
	}
	s.imageVerdicts.Store(ref, s.Clock().Add(imageVerdictTTL))
	return nil
}

// Bounds of checkImage's memory.
const (
	imageVerdictTTL  = time.Minute
	maxImageVerdicts = 4096
)

// startTemplate runs a template's start command in a sandbox just created
// from it, and its ready check until it passes.
func (s *Service) startTemplate(ctx context.Context, id string, spec templateSpec) error {
	if spec.StartCmd == "" {
		return nil
	}
	ac, err := s.Agent(ctx, id)
	if err != nil {
		return err
	}
	// The agent keeps its output in the sandbox's logs as "start"'s; the
	// stream is not needed for that, and the command runs on without it.
	p, err := ac.StartProcess(context.WithoutCancel(ctx), agent.StartRequest{Cmd: []string{"/bin/sh", "-c", spec.StartCmd}, Cwd: spec.Workdir, User: spec.User, Tag: "template-start", LogAs: agent.LogStart})
	if err != nil {
		return fmt.Errorf("the template's start command: %w", agentErr(err))
	}
	p.Close()
	if spec.ReadyCmd == "" {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		res, err := ac.Exec(rctx, agent.ExecRequest{Cmd: []string{"/bin/sh", "-c", spec.ReadyCmd}, Cwd: spec.Workdir, User: spec.User, LogAs: agent.LogOff})
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("the template's ready check did not pass within %s: %w", readyTimeout, ErrUnavailable)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
