package service

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/admission"
	"github.com/sandboxd/sandboxd/internal/agent"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/service/builds"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Builds: BuildTemplate admits a recipe (a hold of the default sandbox's
// size for the build's owner, a place in the owner's queue), runs its
// steps in a sandbox of buildOwner's made by the create chain, and
// captures that sandbox as the template (capture, templatecapture.go).
// The build's log and queue (package builds) are in memory: a restart fails
// the builds that were running (sweepTemplates).

// BuildTemplate starts a build of r for the caller's owner and returns
// its template, building. The same recipe over the same base again is the
// same template (cached is set): a ready one gets r's tags at once, a
// building one is answered only to a retry (the same tags), as a failed
// one is built anew. The build goes on in the background; FollowBuildLog
// streams its output.
func (s *Service) BuildTemplate(ctx context.Context, c Caller, r Recipe) (t Template, cached bool, err error) {
	imgs, err := s.images()
	if err != nil {
		return Template{}, false, err
	}
	if err := s.requireReady(); err != nil {
		return Template{}, false, err
	}
	if err := r.validate(); err != nil {
		return Template{}, false, err
	}
	if r.ID != "" {
		if found, err := s.Store.GetTemplate(ctx, r.ID); err == nil {
			if found.Owner != c.Owner {
				return Template{}, false, fmt.Errorf("template id %s is taken: %w", r.ID, ErrConflict)
			}
			return s.withTags(ctx, fromTemplateRow(found)), true, nil
		}
	}
	spec := templateSpec{StartCmd: r.StartCmd, ReadyCmd: r.ReadyCmd, Tags: recipeTags(r)}
	base, baseRef, err := s.buildBase(ctx, c, imgs, &r, &spec)
	if err != nil {
		return Template{}, false, err
	}
	// Relative workdir steps resolve now that the base's working
	// directory is known, so the steps and the cache key are absolute.
	if err := r.resolveWorkdirs(cmp.Or(spec.Workdir, base.Config.WorkingDir)); err != nil {
		return Template{}, false, err
	}
	hash := r.hash(base.ID)
	if !r.NoCache {
		if t, cached, done, err := s.cachedBuild(ctx, c, imgs, r, hash, spec.Tags); done {
			return t, cached, err
		}
	}
	return s.startBuild(ctx, c, r, buildJob{s: s, recipe: r, base: base, user: spec.User, workdir: spec.Workdir}, baseRef, hash, spec)
}

// buildBase resolves what a build of r starts from: r.FromTemplate's
// image (its start and ready commands, user and working directory into
// spec, unless r has its own commands; r.Base set to it), or r.Base (the
// daemon's default image if none), pulled when the engine lacks it. It
// returns the base image and its reference.
func (s *Service) buildBase(ctx context.Context, c Caller, imgs runtime.Images, r *Recipe, spec *templateSpec) (runtime.Image, string, error) {
	if r.FromTemplate != "" {
		from, err := s.lookupTemplate(ctx, c, r.FromTemplate)
		if err != nil || from.Kind == store.TemplateFork {
			return runtime.Image{}, "", &FieldError{Field: "from_template", Reason: fmt.Sprintf("template %q not found", r.FromTemplate), Kind: ErrNotFound}
		}
		if from.State != store.TemplateReady {
			return runtime.Image{}, "", fmt.Errorf("template %s is %s, not ready: %w", from.ID, from.State, ErrConflict)
		}
		var fromSpec templateSpec
		_ = json.Unmarshal(from.Spec, &fromSpec) // written by us
		if spec.StartCmd == "" {
			spec.StartCmd, spec.ReadyCmd = fromSpec.StartCmd, fromSpec.ReadyCmd
		}
		spec.User, spec.Workdir = fromSpec.User, fromSpec.Workdir
		r.Base = from.Image
		if err := s.ensureCopy(ctx, from.Image); err != nil { // another node's template
			return runtime.Image{}, "", err
		}
	}
	baseRef := cmp.Or(r.Base, s.cfg.DefaultImage)
	if r.FromTemplate == "" && !isTemplateImage(baseRef) {
		// A base the engine lacks is pulled (pull.go).
		if err := s.ensureImage(ctx, c.Owner, baseRef); err != nil {
			return runtime.Image{}, "", err
		}
	}
	base, err := imgs.InspectImage(ctx, baseRef)
	if errors.Is(err, runtime.ErrImageNotFound) {
		return runtime.Image{}, "", &FieldError{Field: "base", Reason: fmt.Sprintf("image %q is not present on this host", baseRef), Kind: ErrImageNotPresent}
	}
	if err != nil {
		return runtime.Image{}, "", err
	}
	if r.FromTemplate == "" && base.Config.Labels[labelTemplate] != "" {
		return runtime.Image{}, "", &FieldError{Field: "base", Reason: fmt.Sprintf("image %q is not present on this host", baseRef), Kind: ErrImageNotPresent}
	}
	return base, baseRef, nil
}

// cachedBuild answers a build of r from the owner's template of the same
// recipe hash, when there is one to answer with: done reports that the
// build is answered (t, cached and err are BuildTemplate's answer);
// otherwise r is built anew.
func (s *Service) cachedBuild(ctx context.Context, c Caller, imgs runtime.Images, r Recipe, hash string, tags []string) (t Template, cached, done bool, err error) {
	found, err := s.Store.FindTemplateByRecipe(ctx, c.Owner, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return Template{}, false, true, err
	case found.State == store.TemplateReady && r.ID != "":
		// The edge handed out r.ID: the build is a new template that
		// is the found one's image under another reference.
		t, err := s.copyTemplate(ctx, imgs, found, r)
		return t, true, true, err
	case found.State == store.TemplateReady:
		if err := s.checkNewName(ctx, c, r, found.ID); err != nil {
			return Template{}, false, true, err
		}
		if tags := recipeTags(r); len(tags) > 0 {
			if err := s.pointTags(ctx, found, r.Name, tags); err != nil {
				return Template{}, false, true, err
			}
		}
		return s.withTags(ctx, fromTemplateRow(found)), true, true, nil
	case sameTags(found, tags):
		return s.withTags(ctx, fromTemplateRow(found)), true, true, nil
	}
	return Template{}, false, false, nil
}

// startBuild admits a new build of r (its name, the owner's storage, a
// place in the owner's queue, the hold of its sandbox's capacity), inserts
// its template, building, and starts it in the background; on a refusal
// it gives back what it took.
func (s *Service) startBuild(ctx context.Context, c Caller, r Recipe, job buildJob, baseRef, hash string, spec templateSpec) (Template, bool, error) {
	if err := s.checkNewName(ctx, c, r, ""); err != nil {
		return Template{}, false, err
	}
	if err := s.checkStorage(ctx, c.Owner); err != nil {
		return Template{}, false, err
	}
	queued, err := s.builds.Enqueue(c.Owner)
	if err != nil {
		var tm *builds.TooManyError
		if errors.As(err, &tm) {
			err = &QuotaError{Reason: tm.Reason}
		}
		return Template{}, false, err
	}
	job.recipe.Base = baseRef
	for _, st := range r.Steps {
		if st.Run == "" {
			spec.User = cmp.Or(st.User, spec.User)
		}
		spec.Workdir = cmp.Or(st.Workdir, spec.Workdir)
	}
	specJSON, _ := json.Marshal(spec)
	id := cmp.Or(r.ID, NewTemplateID())
	// The build's sandbox counts against the owner's quota (sandboxes,
	// CPU, memory) and the host's capacity from now until the build ends,
	// however it ends (buildJob.run releases it), queued or running: a build
	// the quota has no room for is refused now, with the quota's error,
	// rather than failing after its wait or holding a sandbox past it.
	hold := buildHold(id)
	err = s.Admission.ReserveWithin(hold, buildRequest(c.Owner), c.Quota)
	// As for a create: idle sandboxes of the pool make room on a full host.
	for ex := (*admission.ExhaustedError)(nil); errors.As(err, &ex) && s.evictIdle(ctx); {
		err = s.Admission.ReserveWithin(hold, buildRequest(c.Owner), c.Quota)
	}
	if err != nil {
		queued.Cancel()
		return Template{}, false, admissionErr(err)
	}
	row, err := s.Store.CreateTemplate(ctx, store.Template{
		ID: id, Owner: c.Owner, Name: r.Name, Kind: store.TemplateBuild, Image: templateRef(id),
		BaseImage: baseRef, RecipeHash: hash, Spec: specJSON,
	})
	if err != nil {
		queued.Cancel()
		s.Admission.Release(hold)
	}
	if errors.Is(err, store.ErrIDConflict) && r.ID != "" {
		// A retry of the same id that raced this one: that one's.
		if found, gerr := s.Store.GetTemplate(ctx, r.ID); gerr == nil && found.Owner == c.Owner {
			return s.withTags(ctx, fromTemplateRow(found)), true, nil
		}
	}
	if err != nil {
		return Template{}, false, mapTemplateErr(err, r.Name)
	}
	job.t, job.log, job.queued, job.hold = row, s.builds.Open(id), queued, hold
	go job.run()
	return fromTemplateRow(row), false, nil
}

// copyTemplate makes template r.ID, ready, of the image of from (a
// build of the same recipe): the engine's tag of the same image, no
// copy. It counts from's size against the owner's storage again, which
// overstates what the engine holds rather than understate it once from is
// deleted. A failure leaves neither the row nor the tag.
func (s *Service) copyTemplate(ctx context.Context, imgs runtime.Images, from store.Template, r Recipe) (Template, error) {
	if err := s.checkNewName(ctx, Caller{Owner: from.Owner}, r, ""); err != nil {
		return Template{}, err
	}
	if err := s.checkStorage(ctx, from.Owner); err != nil {
		return Template{}, err
	}
	if err := s.ensureCopy(ctx, from.Image); err != nil { // another node's build of the recipe
		return Template{}, err
	}
	var spec templateSpec
	_ = json.Unmarshal(from.Spec, &spec) // written by us
	spec.Tags = recipeTags(r)
	specJSON, _ := json.Marshal(spec)
	row, err := s.Store.CreateTemplate(ctx, store.Template{
		ID: r.ID, Owner: from.Owner, Name: r.Name, Kind: store.TemplateBuild, Image: templateRef(r.ID),
		BaseImage: from.BaseImage, RecipeHash: from.RecipeHash, Spec: specJSON,
	})
	if err != nil {
		return Template{}, mapTemplateErr(err, r.Name)
	}
	err = imgs.TagImage(ctx, from.Image, row.Image)
	if err == nil {
		row, err = s.finishTemplate(ctx, row, from.SizeBytes, spec.Tags)
	}
	if err != nil {
		s.dropTemplate(context.WithoutCancel(ctx), imgs, row)
		return Template{}, fmt.Errorf("template %s as %s: %w", from.ID, r.ID, err)
	}
	return s.withTags(ctx, fromTemplateRow(row)), nil
}

// checkNewName refuses, for a recipe that wants a new name, a name that
// points to a template other than except.
func (s *Service) checkNewName(ctx context.Context, c Caller, r Recipe, except string) error {
	if !r.NewName || r.Name == "" {
		return nil
	}
	t, err := s.Store.GetTemplateByTag(ctx, c.Owner, r.Name, store.DefaultTag)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case t.ID != except:
		return fmt.Errorf("a template named %q already exists: %w", r.Name, ErrNameConflict)
	}
	return nil
}

// sameTags reports whether building template t will point tags.
func sameTags(t store.Template, tags []string) bool {
	var spec templateSpec
	_ = json.Unmarshal(t.Spec, &spec)
	return slices.Equal(spec.Tags, tags)
}

// buildHold names an admission reservation for a build of template id:
// not a sandbox id, and one per call, so a racing retry of the same id
// that loses never releases the winner's.
func buildHold(id string) string { return "build:" + id + ":" + NewTemplateID() }

// buildRequest is what a build's sandbox holds for owner: a sandbox of
// the default size (the build creates its sandbox with no size).
func buildRequest(owner string) admission.Request {
	return admission.Request{MilliCPU: defaultMilliCPU, MemoryMB: defaultMemoryMB, Owner: owner}
}

// buildJob is one build: template t from recipe over base (Recipe.Base
// is its reference), its steps starting as user in workdir (a base
// template's).
type buildJob struct {
	s             *Service
	t             store.Template
	recipe        Recipe
	base          runtime.Image
	user, workdir string
	log           *builds.Log
	queued        *builds.Place
	// hold is the build's admission reservation (buildHold).
	hold string
}

// run builds a template in a sandbox of the base image and settles
// it: ready with its image, or failed with the reason (its image
// removed). The build sandbox is destroyed either way.
func (job buildJob) run() {
	s := job.s
	t, r, log := job.t, job.recipe, job.log
	defer s.Admission.Release(job.hold) // BuildTemplate reserved it; released below, this is for a panic
	qctx, qcancel := context.WithTimeout(context.Background(), buildTimeout)
	err := job.queued.Wait(qctx, log)
	qcancel()
	defer job.queued.Cancel() // its slot, once it has one
	// The build's own time starts with its slot.
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	start := time.Now()
	if err == nil {
		err = job.build(ctx)
	}
	// The build's sandbox is gone (build destroys it before it returns):
	// its hold goes before anyone can see the build end (its state, its
	// log), so that a create made on seeing it is not refused for it.
	s.Admission.Release(job.hold)
	if err == nil {
		var img runtime.Image
		if img, err = s.Images.InspectImage(ctx, t.Image); err == nil {
			_, err = s.finishTemplate(ctx, t, img.Size, recipeTags(r))
		}
	}
	if err != nil {
		log.Printf("build failed: %v\n", err)
		if _, ferr := s.Store.FailTemplate(context.WithoutCancel(ctx), t.ID, err.Error()); ferr != nil {
			s.Logger.Warn("template: mark a failed build", "template", t.ID, "err", ferr)
		}
		if rerr := s.Images.RemoveImage(context.WithoutCancel(ctx), t.Image); rerr != nil {
			s.Logger.Warn("template: remove the image of a failed build", "template", t.ID, "err", rerr)
		}
	} else {
		log.Printf("built %s in %s\n", t.ID, time.Since(start).Round(time.Millisecond))
	}
	log.Finish()
	time.AfterFunc(buildLogKeep, func() { s.builds.Drop(t.ID) })
}

// build runs the recipe's steps in a sandbox of the base image and
// captures it; the sandbox is destroyed before it returns.
func (job buildJob) build(ctx context.Context) error {
	s := job.s
	t, r, log := job.t, job.recipe, job.log
	log.Printf("build %s from %s\n", t.ID, cmp.Or(r.FromTemplate, r.Base))
	// The base was checked by BuildTemplate: an image that is no
	// template's, or a template of the owner's, whose start command a
	// build does not run.
	sb, err := s.createChain(ctx, CreateRequest{Owner: buildOwner, Image: r.Base, Timeout: buildTimeout}, "", nil, nil)
	if err != nil {
		return fmt.Errorf("start the build sandbox: %w", err)
	}
	defer s.destroyDetached(ctx, sb.ID, "its build ended")
	ac, err := s.Agent(ctx, sb.ID)
	if err != nil {
		return err
	}
	env := map[string]string{}
	workdir, user := job.workdir, job.user
	// Steps run, and relative copy paths resolve, in the working
	// directory: the recipe's (a workdir step, a base template's), else
	// the base image's, else "/", as Docker's RUN and COPY (and E2B's
	// builds) do; not in the agent's default, the user's home.
	stepDir := func() string { return cmp.Or(workdir, job.base.Config.WorkingDir, "/") }
	for i, st := range r.Steps {
		switch {
		case st.Run != "":
			log.Printf("step %d: run %s\n", i+1, st.Run)
			if err := buildRun(ctx, ac, st.Run, env, stepDir(), cmp.Or(st.User, user), log); err != nil {
				return fmt.Errorf("step %d (run): %w", i+1, err)
			}
		case st.Copy != nil:
			c := *st.Copy
			if !path.IsAbs(c.Path) {
				c.Path = path.Join(stepDir(), c.Path)
			}
			if err := buildCopy(ctx, ac, &c, user, log); err != nil {
				return fmt.Errorf("step %d (copy to %s): %w", i+1, st.Copy.Path, err)
			}
		case st.Env != nil:
			log.Printf("step %d: env %s\n", i+1, strings.Join(slices.Sorted(maps.Keys(st.Env)), " "))
			maps.Copy(env, st.Env)
		case st.Workdir != "":
			log.Printf("step %d: workdir %s\n", i+1, st.Workdir)
			if err := buildRun(ctx, ac, `mkdir -p "$1"`+" && chown \"${2:-root}\" \"$1\"", nil, "", "", log, st.Workdir, user); err != nil {
				return fmt.Errorf("step %d (workdir %s): %w", i+1, st.Workdir, err)
			}
			workdir = st.Workdir
		case st.User != "": // (beside Run, the case above)
			log.Printf("step %d: user %s\n", i+1, st.User)
			user = st.User
		}
	}
	cfg := job.base.Config
	cfg.Env = mergeEnvList(cfg.Env, env)
	cfg.WorkingDir = cmp.Or(workdir, cfg.WorkingDir)
	cfg.User = "" // the agent runs as root; the recipe's user runs the start command
	cfg.Labels = s.templateLabels(cfg.Labels, t.ID)
	log.Printf("capture\n")
	if _, err := s.Images.Commit(ctx, sb.ID, t.Image, cfg); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

// buildCopy runs a copy step: a file or a link, as user, or as root and
// then given to its owner.
func buildCopy(ctx context.Context, ac *agent.Client, c *CopyStep, user string, log *builds.Log) error {
	if c.Owner != "" {
		user = "root"
	}
	if c.Link != "" {
		log.Printf("link %s to %s\n", c.Path, c.Link)
		if err := buildRun(ctx, ac, `mkdir -p "$(dirname -- "$2")" && ln -sfn -- "$1" "$2"`, nil, "", user, log, c.Link, c.Path); err != nil {
			return err
		}
	} else {
		log.Printf("copy %d bytes to %s\n", len(c.Content), c.Path)
		if err := ac.Upload(ctx, c.Path, bytes.NewReader(c.Content), user); err != nil {
			return agentErr(err)
		}
		if c.Mode != 0 {
			if err := buildRun(ctx, ac, `chmod "$1" "$2"`, nil, "", "", log, strconv.FormatUint(uint64(c.Mode), 8), c.Path); err != nil {
				return err
			}
		}
	}
	if c.Owner != "" {
		if err := buildRun(ctx, ac, `chown -h "$1" "$2"`, nil, "", "", log, c.Owner, c.Path); err != nil {
			return err
		}
	}
	return nil
}

// buildRun runs one shell line of a build, its output into the log.
func buildRun(ctx context.Context, ac *agent.Client, line string, env map[string]string, cwd, user string, log *builds.Log, args ...string) error {
	cmd := append([]string{"/bin/sh", "-c", line, "sh"}, args...)
	p, err := ac.StartProcess(ctx, agent.StartRequest{Cmd: cmd, Env: env, Cwd: cwd, User: user})
	if err != nil {
		return agentErr(err)
	}
	defer p.Close()
	for {
		out, err := p.Recv()
		if err != nil {
			break // the end of the stream; Wait says how it ended
		}
		log.Write(out.Data)
	}
	st, err := p.Wait()
	if err != nil {
		return agentErr(err)
	}
	if !st.Exited || st.Code != 0 {
		return fmt.Errorf("exit code %d", st.Code)
	}
	return nil
}

// mergeEnvList is an image's env (KEY=value) with add's variables set
// over it.
func mergeEnvList(base []string, add map[string]string) []string {
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, replaced := add[k]; !replaced {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(add)) {
		out = append(out, k+"="+add[k])
	}
	return out
}

// templateLabels are a template image's labels: its base's, its id, and
// the node that made it (so that a node's cleanup finds its images; a
// container made from it has its own node label over this one).
func (s *Service) templateLabels(base map[string]string, id string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	out[labelTemplate] = id
	out[runtime.LabelNode] = s.cfg.NodeID
	return out
}

// buildLogKeep is how long a finished build's log is kept for
// FollowBuildLog; then only its template's error says how it ended.
const buildLogKeep = 10 * time.Minute

// BuildLogLines returns the lines of a template's build output from
// the offset-th on: the whole lines, and the last one once the build has
// ended. A build of another process, or one whose output is no longer
// kept, has none.
func (s *Service) BuildLogLines(ctx context.Context, c Caller, idOrName string, offset int) ([]string, error) {
	t, err := s.GetTemplate(ctx, c, idOrName)
	if err != nil {
		return nil, err
	}
	l := s.builds.Get(t.ID)
	if l == nil || offset < 0 {
		return nil, nil
	}
	b, done, _ := l.Since(0)
	lines := strings.Split(string(b), "\n")
	last := lines[len(lines)-1]
	lines = lines[:len(lines)-1]
	if done && last != "" {
		lines = append(lines, last)
	}
	if offset >= len(lines) {
		return nil, nil
	}
	return lines[offset:], nil
}

// FollowBuildLog writes a template's build output to w as it comes, until
// the build ends or ctx does. A build of another process (or a template
// that was not built) has no output here: its error, if any, is written.
func (s *Service) FollowBuildLog(ctx context.Context, c Caller, idOrName string, w func([]byte) error) error {
	t, err := s.GetTemplate(ctx, c, idOrName)
	if err != nil {
		return err
	}
	l := s.builds.Get(t.ID)
	if l == nil {
		if t.Error != "" {
			return w([]byte("build failed: " + t.Error + "\n"))
		}
		return nil
	}
	for offset := 0; ; {
		b, done, changed := l.Since(offset)
		if len(b) > 0 {
			if err := w(b); err != nil {
				return err
			}
			offset += len(b)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
