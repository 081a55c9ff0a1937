package service

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/naming"
	"github.com/sandboxd/sandboxd/internal/store"
)

// Recipes: what a template build is asked to do (a base, steps, a start
// and a ready command) and its validation, in memory only. Nothing here
// has a side effect; templatebuild.go runs a recipe.

// Bounds of a recipe's copy steps: the files and links, and their bytes
// together.
const (
	MaxCopySteps = 4096
	MaxCopyBytes = 8 << 20
)

// Bounds of a recipe and of a build.
const (
	maxRecipeSteps  = 64 // of the steps but copies
	maxCommandLen   = 16 << 10
	buildTimeout    = 30 * time.Minute
	readyTimeout    = time.Minute
	maxForks        = 16
	maxTemplateTags = 16
	// forkGrace keeps a fork's capture that no sandbox uses yet from the
	// sweep while its creates run.
	forkGrace = 10 * time.Minute
)

// Recipe is how to build a template: a base image and steps, run in order
// in a sandbox of the base (with no network) and captured.
type Recipe struct {
	// Name names the template once it is built: the build points
	// name:tag at it for each of Tags (default: latest), moving them
	// from a template they pointed to before (which stays, by its id).
	Name string   `json:"name,omitempty"`
	Tags []string `json:"tags,omitempty"`
	// Base is the image to build over (default: the daemon's), or
	// FromTemplate one of the owner's templates (an id or name[:tag]),
	// whose start command and ready check the build keeps unless it sets
	// its own.
	Base         string `json:"base,omitempty"`
	FromTemplate string `json:"from_template,omitempty"`
	Steps        []Step `json:"steps,omitempty"`
	// NoCache builds even when the owner built the same recipe before.
	NoCache bool `json:"no_cache,omitempty"`
	// StartCmd runs (as a shell line, in the background) in every sandbox
	// created from the template; ReadyCmd, when set, is run until it
	// exits 0 before the create answers.
	StartCmd string `json:"start_cmd,omitempty"`
	ReadyCmd string `json:"ready_cmd,omitempty"`

	// ID, set by an edge that hands out the id before the build (E2B),
	// is the new template's id; a build of an id the owner already has
	// is that template, however its recipe reads (a retry).
	ID string `json:"-"`
	// NewName refuses a Name that already points to another template
	// (Daytona's snapshot names are unique, not moved).
	NewName bool `json:"-"`
}

// Step is one step of a recipe: exactly one field is set, but for a run
// step's user.
type Step struct {
	// Run is a shell line (/bin/sh -c) run with the env, workdir and user
	// of the steps before it (User, when set beside it, for this step
	// only); a non-zero exit fails the build.
	Run string `json:"run,omitempty"`
	// Copy writes a file.
	Copy *CopyStep `json:"copy,omitempty"`
	// Env sets variables for later steps and for the template's sandboxes.
	Env map[string]string `json:"env,omitempty"`
	// Workdir is the directory later steps and the start command run in
	// (created); the image's working directory. A relative one is under
	// the working directory before it, as Docker's WORKDIR: the last
	// workdir step's, else the base template's, else the base image's,
	// else /.
	Workdir string `json:"workdir,omitempty"`
	// User runs later steps and the start command as this user; beside
	// Run, that step only.
	User string `json:"user,omitempty"`
}

// CopyStep writes Content to Path (parents created; a relative Path is
// under the build's working directory: the last workdir step's, else the
// base image's, else /), as the steps' user,
// with Mode's permission bits when it is set and owned by Owner when it
// is set (written as root, then given to Owner); or, when Link is set,
// makes Path a symbolic link to Link.
type CopyStep struct {
	Path    string `json:"path"`
	Content []byte `json:"content,omitempty"`
	Mode    uint32 `json:"mode,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Link    string `json:"link,omitempty"`
}

// safeWorkdir: the engine starts a container's first process in its
// image's working directory, before anything of the sandbox's runs, so a
// template's is never a path into the kernel's views (a /proc/self/fd
// path is how a working directory escapes the container's root).
func safeWorkdir(w string) bool {
	if !strings.HasPrefix(w, "/") || strings.ContainsRune(w, 0) || path.Clean(w) != w {
		return false
	}
	for _, p := range []string{"/proc", "/sys", "/dev"} {
		if w == p || strings.HasPrefix(w, p+"/") {
			return false
		}
	}
	return true
}

// validWorkdir: a workdir step's path, absolute (safeWorkdir) or relative
// to the working directory before it, as Docker's WORKDIR takes it (the
// build resolves it: resolveWorkdirs).
func validWorkdir(w string) bool {
	if path.IsAbs(w) {
		return safeWorkdir(w)
	}
	return len(w) <= maxWorkdirLen && !strings.ContainsRune(w, 0)
}

// maxWorkdirLen bounds a workdir step's path (PATH_MAX).
const maxWorkdirLen = 4096

// resolveWorkdirs makes r's relative workdir steps absolute as Docker
// does: each against the working directory before it, the first against
// start (the base template's workdir, else the base image's working
// directory, else /). A path that resolves into /proc, /sys or /dev is
// refused as an absolute one would be. r's steps are copied first.
func (r *Recipe) resolveWorkdirs(start string) error {
	cur := cmp.Or(start, "/")
	r.Steps = slices.Clone(r.Steps)
	for i, st := range r.Steps {
		if st.Workdir == "" {
			continue
		}
		if !path.IsAbs(st.Workdir) {
			abs := path.Join(cur, st.Workdir)
			if !safeWorkdir(abs) {
				return invalid(fmt.Sprintf("steps[%d].workdir", i), "%q is %s under the working directory %s, inside /proc, /sys or /dev", st.Workdir, abs, cur)
			}
			r.Steps[i].Workdir = abs
		}
		cur = r.Steps[i].Workdir
	}
	return nil
}

// validTemplateName: a DNS label that is not an id's shape.
func validTemplateName(name string) bool {
	return naming.ValidLabel(name) && !strings.HasPrefix(name, "tpl-")
}

// validTag: an image tag's shape (letters, digits, '_', '.' and '-', at
// most 128, not starting with '.' or '-').
func validTag(tag string) bool {
	if tag == "" || len(tag) > 128 || tag[0] == '.' || tag[0] == '-' {
		return false
	}
	for _, c := range []byte(tag) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

const (
	msgTemplateName = "must be a DNS label (lowercase letters, digits and '-', at most 63) not starting with tpl-"
	msgTemplateTag  = "must be letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'"
)

// ParseTemplateRef splits a template reference, name or name:tag, into
// its name and tag (store.DefaultTag when it has none); ok is false when
// either is malformed.
func ParseTemplateRef(ref string) (name, tag string, ok bool) {
	name, tag, hasTag := strings.Cut(ref, ":")
	if !hasTag {
		tag = store.DefaultTag
	}
	return name, tag, validTemplateName(name) && validTag(tag)
}

func validateTags(field string, tags []string) error {
	if len(tags) > maxTemplateTags {
		return invalid(field, "at most %d", maxTemplateTags)
	}
	for i, tag := range tags {
		if !validTag(tag) {
			return invalid(fmt.Sprintf("%s[%d]", field, i), msgTemplateTag)
		}
	}
	return nil
}

// validUser: a user name (or id) the agent can run as, or empty.
func validUser(u string) bool {
	return len(u) <= 64 && !strings.ContainsAny(u, ":/ \t\n\x00")
}

// recipeTags is the tags a build of r points at its template.
func recipeTags(r Recipe) []string {
	if r.Name == "" {
		return nil
	}
	if len(r.Tags) == 0 {
		return []string{store.DefaultTag}
	}
	return r.Tags
}

func (r Recipe) validate() error {
	if r.Name != "" && !validTemplateName(r.Name) {
		return invalid("name", msgTemplateName)
	}
	if err := validateTags("tags", r.Tags); err != nil {
		return err
	}
	if len(r.Tags) > 0 && r.Name == "" {
		return invalid("tags", "need a name")
	}
	if r.ID != "" && !validTemplateID(r.ID) {
		return invalid("id", "must be tpl- and 16 hex digits")
	}
	if r.FromTemplate != "" && r.Base != "" {
		return invalid("from_template", "give either base or from_template, not both")
	}
	if r.Base != "" {
		if err := validateImage(r.Base); err != nil {
			return invalid("base", "must be an image reference without spaces, at most %d bytes", maxImageLen)
		}
		if isTemplateImage(r.Base) {
			return invalid("base", "must be an image on this host, not a template's image")
		}
	}
	copies := 0
	for _, st := range r.Steps {
		if st.Copy != nil {
			copies++
		}
	}
	if len(r.Steps)-copies > maxRecipeSteps || copies > MaxCopySteps {
		return invalid("steps", "at most %d copy steps and %d others", MaxCopySteps, maxRecipeSteps)
	}
	copied := 0
	for i, st := range r.Steps {
		field := fmt.Sprintf("steps[%d]", i)
		set := 0
		// A run step's user is whom it runs as (that step only).
		for _, b := range []bool{st.Run != "", st.Copy != nil, st.Env != nil, st.Workdir != "", st.User != "" && st.Run == ""} {
			if b {
				set++
			}
		}
		if set != 1 {
			return invalid(field, "must set exactly one of run (with its user, if any), copy, env, workdir and user")
		}
		switch {
		case len(st.Run) > maxCommandLen || strings.ContainsRune(st.Run, 0):
			return invalid(field+".run", "must be at most %d bytes, without NUL", maxCommandLen)
		case st.Copy != nil:
			if err := validPath(st.Copy.Path); err != nil {
				return invalid(field+".copy.path", "must be a path without NUL (a relative one is under the working directory)")
			}
			if st.Copy.Mode > 0o7777 {
				return invalid(field+".copy.mode", "must be permission bits (at most 07777)")
			}
			if st.Copy.Link != "" && (len(st.Copy.Content) > 0 || st.Copy.Mode != 0 || validPath(st.Copy.Link) != nil) {
				return invalid(field+".copy.link", "a link has a target without NUL, and no content or mode")
			}
			if !validUser(st.Copy.Owner) {
				return invalid(field+".copy.owner", "must be a user name")
			}
			if copied += len(st.Copy.Content); copied > MaxCopyBytes {
				return invalid(field+".copy.content", "the copy steps carry more than %d bytes together", MaxCopyBytes)
			}
		case st.Env != nil:
			if err := validateEnv(field+".env", st.Env); err != nil {
				return err
			}
		case st.Workdir != "" && !validWorkdir(st.Workdir):
			return invalid(field+".workdir", "must be a clean absolute path without NUL, outside /proc, /sys and /dev, or a relative path (under the working directory before it)")
		case !validUser(st.User):
			return invalid(field+".user", "must be a user name")
		}
	}
	for _, c := range []struct{ field, v string }{{"start_cmd", r.StartCmd}, {"ready_cmd", r.ReadyCmd}} {
		if len(c.v) > maxCommandLen || strings.ContainsRune(c.v, 0) {
			return invalid(c.field, "must be at most %d bytes, without NUL", maxCommandLen)
		}
	}
	if r.ReadyCmd != "" && r.StartCmd == "" {
		return invalid("ready_cmd", "needs a start_cmd")
	}
	return nil
}

// hash identifies what a build of r makes: its name, base, steps and
// commands and the id of the image it builds over (a rebuilt base is
// another build). The tags it points are not part of it: a build of the
// same recipe under another tag is a cache hit that moves the tag.
func (r Recipe) hash(baseID string) string {
	b, _ := json.Marshal(struct {
		Name         string `json:"name,omitempty"`
		Base         string `json:"base,omitempty"`
		FromTemplate string `json:"from_template,omitempty"`
		Steps        []Step `json:"steps,omitempty"`
		StartCmd     string `json:"start_cmd,omitempty"`
		ReadyCmd     string `json:"ready_cmd,omitempty"`
		BaseID       string
	}{r.Name, r.Base, r.FromTemplate, r.Steps, r.StartCmd, r.ReadyCmd, baseID}) // strings, maps and byte slices always marshal
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
