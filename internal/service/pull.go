package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distribution/reference"

	"github.com/sandboxd/sandboxd/internal/imageref"
	"github.com/sandboxd/sandboxd/internal/runtime"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Images from registries. A create (and a template's base) may name any
// image reference; when the engine lacks it, ensureImage pulls it through
// the engine before anything else of the create happens, so a failed pull
// leaves nothing: no row, no admission hold, no container, and no tag (the
// engine tags an image only once its pull is complete).
//
// One pull per normalized reference runs at a time on the node however
// many creates wait for it (pulls.join). A waiter whose context ends stops
// waiting; the pull goes on for the others. A pull nobody waits for any
// more is cancelled after Config.PullIdleGrace (a retry in that window joins it),
// and every pull ends by Config.PullTimeout.
//
// A pulled image is a cache, not an orphan: nothing removes it but the
// operator (docker rmi), and a create that names it again finds it
// present and pulls nothing.

// CauseRegistry: the registry of an image does not answer, or broke off a
// pull (a fault: 503, retryable).
const CauseRegistry = "registry"

// Defaults of the pull's bounds.
const (
	// DefaultPullTimeout bounds one pull (Config.PullTimeout).
	DefaultPullTimeout = 15 * time.Minute
	// DefaultPullIdleGrace is how long a pull goes on once nobody waits
	// for it (Config.PullIdleGrace): a client that timed out and retries
	// joins it instead of starting over.
	DefaultPullIdleGrace = 30 * time.Second
)

// ImageError is a pull refused for the image itself: not in its registry
// (ErrNotFound), refused credentials or a registry the operator does not
// allow (ErrPermissionDenied). Reason is safe to show the caller.
type ImageError struct {
	Reason string
	Kind   error
}

func (e *ImageError) Error() string { return e.Reason }

// Unwrap makes the error Kind, and ErrImageNotPresent (the facades answer
// it as their own "image/template not found" where they have one).
func (e *ImageError) Unwrap() []error { return []error{e.Kind, ErrImageNotPresent} }

// IsPullRefusal reports whether err is a pull the registry or the
// operator refused (an *ImageError): the edges answer it in its own words
// (404 or 403), not as an image missing from the host.
func IsPullRefusal(err error) bool {
	var ie *ImageError
	return errors.As(err, &ie)
}

// PullState is what a node knows of an image (ImageStatus).
type PullState struct {
	Ref     string // normalized
	Present bool
	Pulling bool
	// Done and Total are the bytes of the pull under way (Total grows as
	// the engine announces layers).
	Done, Total int64
	Size        int64 // of the present image
}

// pulls is the node's pulls under way, by normalized reference.
type pulls struct {
	mu      sync.Mutex
	flights map[string]*pullFlight
	// count is how many pulls were started (tests, metrics).
	count atomic.Int64
}

type pullFlight struct {
	ref     string
	done    chan struct{}
	err     error // set before done closes
	cancel  context.CancelCauseFunc
	waiters int
	idle    *time.Timer
	bytes   atomic.Pointer[runtime.PullProgress]
}

// errTooLarge is the cause a pull is cancelled with when its layers
// already exceed the cap.
type tooLargeError struct {
	ref        string
	size, capB int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("image %q is %d MB, more than this host's cap of %d MB (--image-max-mb)", e.ref, ceilMB(e.size), e.capB>>20)
}

func ceilMB(b int64) int64 { return (b + 1<<20 - 1) >> 20 }

// normalizeRef parses ref as the engine does: Hub's images get
// "docker.io/" and "library/", a reference without tag or digest gets
// ":latest". ok is false for what is no pullable name (an image id).
func normalizeRef(ref string) (named reference.Named, ok bool) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, false
	}
	return reference.TagNameOnly(n), true
}

// localOnly reports whether named is one of the images this host builds
// itself (scripts/build-images.sh names them sandboxd/…, and the
// daemon's default image): never pulled, so that a registry namespace of
// the same name elsewhere can never stand in for them.
func (s *Service) localOnly(named reference.Named) bool {
	if reference.Domain(named) == imageref.DockerHub && strings.HasPrefix(reference.Path(named), "sandboxd/") {
		return true
	}
	if d, ok := normalizeRef(s.cfg.DefaultImage); ok && d.String() == named.String() {
		return true
	}
	return false
}

// pulledFromRegistry reports whether the engine knows img by a registry
// digest (name@sha256:…), which only a pull or a push gives it.
func pulledFromRegistry(img runtime.Image) bool {
	return slices.ContainsFunc(img.Refs, func(r string) bool { return strings.Contains(r, "@sha256:") })
}

// registryAllowed reports whether an operator's allow list (hosts,
// lowercase; empty: any) lets images be pulled from host (a reference's
// domain, "host" or "host:port"). An entry without a port allows every
// port of its host.
func registryAllowed(allow []string, host string) bool {
	if len(allow) == 0 {
		return true
	}
	host = strings.ToLower(host)
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	for _, a := range allow {
		if a == host || a == name {
			return true
		}
	}
	return false
}

// ensureImage makes the image ref present on this node for owner,
// pulling it when the engine lacks it (see the top of this file) with
// owner's credential for its registry, if any. While any owner holds a
// credential for the image's registry, owner's own access is checked even
// when the image is present (registries.go). Without a Puller, or for
// what is not a pullable reference, it does nothing: the runtime's create
// then says the image is not there, as before. It has no side effect to
// undo but the pulled image, which is a cache.
func (s *Service) ensureImage(ctx context.Context, owner, ref string) error {
	if isTemplateImage(ref) {
		return s.ensureCopy(ctx, ref) // another node's template, in a cluster
	}
	if s.Puller == nil || s.Images == nil || ref == "" {
		return nil
	}
	named, pullable := normalizeRef(ref)
	if pullable && s.localOnly(named) {
		return nil // never pulled: the runtime's create says how to build it
	}
	host := ""
	private := false
	if pullable {
		host = strings.ToLower(reference.Domain(named)) // registry hosts are names: any case is the same host
		if s.clusterRegistryImage(host) && owner != buildOwner && owner != store.PoolOwner {
			return &ImageError{Kind: ErrPermissionDenied, Reason: fmt.Sprintf(
				"image %q is in the cluster's template registry, which holds every tenant's templates: create from the template instead", ref)}
		}
		var err error
		if private, err = s.privateRegistry(ctx, host); err != nil {
			return err
		}
		// The daemon's own creates (a build's sandbox, the pool's) were
		// checked when they were asked for, or are the operator's.
		private = private && owner != buildOwner && owner != store.PoolOwner
	}
	if private && s.accessKnown(owner, named.String()) {
		return nil
	}
	if private {
		// An image made on this host (built or imported: the engine knows
		// it by no registry digest) came from no registry, so no
		// credential guards it: used as it is, never pulled over.
		if img, err := s.Images.InspectImage(ctx, ref); err == nil && !pulledFromRegistry(img) {
			return s.refuseByID(ctx, owner, ref, img)
		}
	}
	if !private {
		if until, ok := s.imageVerdicts.Load(ref); ok && s.Clock().Before(until.(time.Time)) {
			return nil // checkImage saw it a moment ago
		}
		img, err := s.Images.InspectImage(ctx, ref)
		switch {
		case err == nil:
			return s.refuseByID(ctx, owner, ref, img)
		case !errors.Is(err, runtime.ErrImageNotFound):
			return fmt.Errorf("inspect image %q: %w", ref, err)
		}
	}
	if !pullable {
		return nil
	}
	if !registryAllowed(s.cfg.RegistryAllow, host) {
		return &ImageError{Kind: ErrPermissionDenied, Reason: fmt.Sprintf(
			"image %q is not on this host, and its registry %q is not in the registries this host may pull from (--registry-allow: %s)",
			ref, host, strings.Join(s.cfg.RegistryAllow, ","))}
	}
	var auth *runtime.RegistryAuth
	if owner != buildOwner && owner != store.PoolOwner {
		var err error
		if auth, err = s.registryAuth(ctx, owner, host); err != nil {
			return err
		}
	}
	if private {
		// The caller's own access, asked of the registry with the caller's
		// credential (or none) before the node's copy is used or a pull
		// is joined. Not a pull: the engine may answer a pull of an image
		// it holds from its own store, and the registry never sees the
		// credential.
		if err := s.checkAccess(ctx, named.String(), host, auth); err != nil {
			return err
		}
		_, err := s.Images.InspectImage(ctx, ref)
		switch {
		case err == nil:
			s.noteAccess(owner, named.String())
			return s.checkImage(ctx, "image", ref)
		case !errors.Is(err, runtime.ErrImageNotFound):
			return fmt.Errorf("inspect image %q: %w", ref, err)
		}
	}
	// Joined across owners: a waiter of a private registry's image has had
	// its own access checked just above.
	if err := s.pulls.join(ctx, s, named.String(), host, auth); err != nil {
		return err
	}
	if private {
		s.noteAccess(owner, named.String())
	}
	// An image that calls itself a template's is refused as checkImage
	// refuses it, pulled or not.
	return s.checkImage(ctx, "image", ref)
}

// refuseByID refuses a tenant's ref that names a private registry's image
// by its id (byIDFromPrivate).
func (s *Service) refuseByID(ctx context.Context, owner, ref string, img runtime.Image) error {
	if owner == buildOwner || owner == store.PoolOwner {
		return nil
	}
	byID, err := s.byIDFromPrivate(ctx, ref, img)
	if err != nil {
		return err
	}
	if byID {
		return byIDRefused(ref)
	}
	return nil
}

func byIDRefused(ref string) error {
	return &FieldError{Field: "image", Reason: fmt.Sprintf("image %q is not present on this host (name an image from a registry by its reference, not by its id)", ref), Kind: ErrImageNotPresent}
}

// join waits for the pull of ref (with auth, when it starts it), starting
// it when none runs.
func (p *pulls) join(ctx context.Context, s *Service, ref, host string, auth *runtime.RegistryAuth) error {
	p.mu.Lock()
	if p.flights == nil {
		p.flights = map[string]*pullFlight{}
	}
	f := p.flights[ref]
	if f == nil {
		timeout := s.cfg.PullTimeout
		if timeout <= 0 {
			timeout = DefaultPullTimeout
		}
		fctx, cancel := context.WithCancelCause(context.Background())
		fctx, cancelT := context.WithTimeout(fctx, timeout)
		f = &pullFlight{ref: ref, done: make(chan struct{}), cancel: func(c error) { cancel(c); cancelT() }}
		f.bytes.Store(&runtime.PullProgress{})
		p.flights[ref] = f
		go p.run(fctx, s, f, host, auth, timeout)
	}
	f.waiters++
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	p.mu.Unlock()

	select {
	case <-f.done:
		p.leave(f, 0)
		return f.err
	case <-ctx.Done():
		p.leave(f, cmp.Or(s.cfg.PullIdleGrace, DefaultPullIdleGrace))
		return ctx.Err()
	}
}

// leave is a waiter going; the last one leaves the pull grace to be
// joined again before it is cancelled.
func (p *pulls) leave(f *pullFlight, grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f.waiters--
	if f.waiters > 0 {
		return
	}
	select {
	case <-f.done:
		return
	default:
	}
	f.idle = time.AfterFunc(grace, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if f.waiters == 0 {
			f.cancel(errors.New("nobody waits for the pull any more"))
		}
	})
}

// run is one pull: the engine's, then the size check. Its outcome goes to
// every waiter.
func (p *pulls) run(ctx context.Context, s *Service, f *pullFlight, host string, auth *runtime.RegistryAuth, timeout time.Duration) {
	err := p.pull(ctx, s, f, host, auth, timeout)
	p.mu.Lock()
	delete(p.flights, f.ref)
	f.err = err
	if f.idle != nil {
		f.idle.Stop()
	}
	close(f.done)
	p.mu.Unlock()
	f.cancel(nil)
}

func (p *pulls) pull(ctx context.Context, s *Service, f *pullFlight, host string, auth *runtime.RegistryAuth, timeout time.Duration) error {
	// A pull that finished just before this one was started has nothing
	// to do (its waiters looked before it was done).
	if _, err := s.Images.InspectImage(ctx, f.ref); err == nil {
		return nil
	}
	p.count.Add(1)
	capB := s.cfg.ImageMaxMB << 20
	if s.clusterRegistryRef(f.ref) {
		capB = 0 // a template's copy: its owner's template storage bounds it
	}
	start := time.Now()
	err := s.Puller.PullImage(ctx, f.ref, auth, func(pp runtime.PullProgress) {
		f.bytes.Store(&pp)
		// The layers' compressed sizes alone past the cap: the image is
		// bigger still once unpacked.
		if capB > 0 && pp.Total > capB {
			f.cancel(&tooLargeError{ref: f.ref, size: pp.Total, capB: capB})
		}
	})
	var tl *tooLargeError
	if errors.As(context.Cause(ctx), &tl) {
		// Nothing was tagged; the engine keeps the layers it finished as
		// its cache, which its own prune removes.
		return &FieldError{Field: "image", Reason: tl.Error() + ": refused", Kind: ErrImageTooLarge}
	}
	if err != nil {
		return pullErr(ctx, "the pull of", f.ref, host, timeout, err)
	}
	s.Logger.Info("image pulled", "image", f.ref, "duration", time.Since(start).Round(time.Millisecond))
	if capB <= 0 {
		return nil
	}
	img, err := s.Images.InspectImage(context.WithoutCancel(ctx), f.ref)
	if err != nil {
		return fmt.Errorf("inspect the pulled image %q: %w", f.ref, err)
	}
	if img.Size > capB {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		if err := s.Images.RemoveImage(rctx, f.ref); err != nil {
			s.Logger.Warn("pull: remove the image past the cap", "image", f.ref, "err", err)
		}
		tl := &tooLargeError{ref: f.ref, size: img.Size, capB: capB}
		return &FieldError{Field: "image", Reason: tl.Error() + ": refused and removed", Kind: ErrImageTooLarge}
	}
	return nil
}

// checkAccess asks ref's registry whether auth (an owner's credential, or
// nil) may pull ref (Puller.CheckAccess), within accessCheckTimeout; its
// errors are a pull's.
func (s *Service) checkAccess(ctx context.Context, ref, host string, auth *runtime.RegistryAuth) error {
	cctx, cancel := context.WithTimeout(ctx, accessCheckTimeout)
	defer cancel()
	if err := s.Puller.CheckAccess(cctx, ref, auth); err != nil {
		return pullErr(cctx, "the access check of", ref, host, accessCheckTimeout, err)
	}
	return nil
}

// pullErr maps a failed pull, or access check (what says which), to the
// domain's errors.
func pullErr(ctx context.Context, what, ref, host string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, runtime.ErrNotInRegistry):
		return &ImageError{Kind: ErrNotFound, Reason: fmt.Sprintf("image %q was not found in its registry %q (or the registry hides it from anonymous pulls)", ref, host)}
	case errors.Is(err, runtime.ErrRegistryAuth):
		return &ImageError{Kind: ErrPermissionDenied, Reason: fmt.Sprintf("registry %q refused the credentials for image %q (or asked for some and got none)", host, ref)}
	case errors.Is(err, runtime.ErrInvalidSpec):
		return &FieldError{Field: "image", Reason: fmt.Sprintf("the engine refused the image reference %q", ref)}
	case errors.Is(err, runtime.ErrRegistryUnavailable):
		return &FaultError{Cause: CauseRegistry, Err: fmt.Errorf("registry %q: %w", host, err)}
	case errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		return &FaultError{Cause: CauseRegistry, Err: fmt.Errorf("%s %q did not finish within %s", what, ref, timeout)}
	case ctx.Err() != nil:
		return &FaultError{Cause: CauseRegistry, Err: fmt.Errorf("%s %q was abandoned: %w", what, ref, context.Cause(ctx))}
	}
	return err // the engine's faults (Fault classifies them)
}

// ImageStatus reports what this node has of the image ref for c: an
// image from a registry some owner holds a credential for is reported
// present only to an owner whose access was checked (ensureImage).
func (s *Service) ImageStatus(ctx context.Context, c Caller, ref string) (PullState, error) {
	if err := validateImage(ref); err != nil || ref == "" {
		return PullState{}, invalid("image", "must be an image reference")
	}
	st := PullState{Ref: ref}
	if named, ok := normalizeRef(ref); ok {
		st.Ref = named.String()
		private, err := s.privateRegistry(ctx, reference.Domain(named))
		if err != nil {
			return PullState{}, err
		}
		if private && !s.accessKnown(c.Owner, st.Ref) {
			return st, nil // told to nobody unchecked
		}
	}
	if s.Images == nil {
		return st, nil
	}
	s.pulls.mu.Lock()
	f := s.pulls.flights[st.Ref]
	s.pulls.mu.Unlock()
	if f != nil {
		pp := f.bytes.Load()
		st.Pulling, st.Done, st.Total = true, pp.Done, pp.Total
		return st, nil
	}
	if isTemplateImage(ref) {
		return st, nil // told to nobody, as checkImage
	}
	img, err := s.Images.InspectImage(ctx, ref)
	switch {
	case errors.Is(err, runtime.ErrImageNotFound):
		return st, nil
	case err != nil:
		return PullState{}, err
	case img.Config.Labels[labelTemplate] != "":
		return st, nil
	}
	st.Present, st.Size = true, img.Size
	return st, nil
}

// PullImage makes the image ref present on this node, pulling it (or
// joining the pull under way) when it is not: what a create does before
// its container, on its own. Safe to repeat.
func (s *Service) PullImage(ctx context.Context, c Caller, ref string) error {
	if err := validateImage(ref); err != nil || ref == "" {
		return invalid("image", "must be an image reference")
	}
	if err := s.checkImage(ctx, "image", ref); err != nil {
		return err
	}
	return s.ensureImage(ctx, c.Owner, ref)
}
