package daytona

import (
	"maps"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/service"
)

// Git runs the sandbox's own git (the base image has it), as the sandbox
// user, through the agent: no credentials or repository data pass through
// the daemon beyond the request.

type cloneBody struct {
	URL      string `json:"url"`
	Path     string `json:"path"`
	Branch   string `json:"branch"`
	CommitID string `json:"commit_id"`
	Username string `json:"username"`
	Password string `json:"password"`
	Depth    int    `json:"depth"`
}

// gitEnv keeps git from prompting: a request has no terminal.
var gitEnv = map[string]string{"GIT_TERMINAL_PROMPT": "0"}

// credentialHelper answers git's credential questions from the
// environment of the one clone command, so the password is never written
// to the repository's config or to a command line.
const credentialHelper = `credential.helper=!f() { echo "username=$DAYTONA_GIT_USERNAME"; echo "password=$DAYTONA_GIT_PASSWORD"; }; f`

// gitClone is POST /git/clone {url, path, branch?, commit_id?, username?,
// password?, depth?}: git clone into path (a local path or file:// URL
// works as well as a remote), then a checkout of commit_id when given.
// git's failure is 400 with its message.
func (f *Facade) gitClone(w http.ResponseWriter, r *http.Request, b box) error {
	var body cloneBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if body.URL == "" || body.Path == "" {
		return badRequest("url and path are required")
	}
	if body.Depth < 0 {
		return badRequest("depth must not be negative")
	}
	env := maps.Clone(gitEnv)
	args := []string{"git"}
	if body.Username != "" || body.Password != "" {
		args = append(args, "-c", credentialHelper)
		env["DAYTONA_GIT_USERNAME"], env["DAYTONA_GIT_PASSWORD"] = body.Username, body.Password
	}
	args = append(args, "clone", "--quiet")
	if body.Branch != "" {
		args = append(args, "--branch", body.Branch)
	}
	if body.Depth > 0 {
		args = append(args, "--depth", strconv.Itoa(body.Depth))
	}
	dir := b.resolve(body.Path)
	args = append(args, "--", body.URL, dir)
	if err := f.git(r, b, env, args...); err != nil {
		return err
	}
	if body.CommitID != "" {
		if err := f.git(r, b, gitEnv, "git", "-C", dir, "checkout", "--quiet", body.CommitID); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// git runs a git command line; a non-zero exit is 400 with git's output.
func (f *Facade) git(r *http.Request, b box, env map[string]string, args ...string) error {
	res, err := f.run(r, b, service.ExecRequest{Cmd: args, Env: env})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(string(res.Stderr) + string(res.Stdout))
		return badRequest("git failed (exit code %d): %s", res.ExitCode, msg)
	}
	return nil
}

// gitStatus is Daytona's GitStatus.
type gitStatus struct {
	CurrentBranch   string       `json:"currentBranch"`
	FileStatus      []fileStatus `json:"fileStatus"`
	Ahead           int          `json:"ahead"`
	Behind          int          `json:"behind"`
	BranchPublished bool         `json:"branchPublished"`
}

type fileStatus struct {
	Name     string `json:"name"`
	Staging  string `json:"staging"`
	Worktree string `json:"worktree"`
	Extra    string `json:"extra"`
}

// gitStatus is GET /git/status?path=: git status --porcelain=v1, parsed.
func (f *Facade) gitStatus(w http.ResponseWriter, r *http.Request, b box) error {
	path, err := requiredQuery(r, "path")
	if err != nil {
		return err
	}
	res, err := f.run(r, b, service.ExecRequest{
		Cmd: []string{"git", "-C", b.resolve(path), "status", "--porcelain=v1", "--branch", "-z"},
		Env: gitEnv,
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return badRequest("git status failed: %s", strings.TrimSpace(string(res.Stderr)))
	}
	writeJSON(w, http.StatusOK, parseStatus(string(res.Stdout)))
	return nil
}

// parseStatus parses `git status --porcelain=v1 --branch -z`: a "## "
// branch header, then one NUL-terminated record per path, "XY path"; a
// rename or copy is followed by a record holding its source (Extra).
func parseStatus(out string) gitStatus {
	st := gitStatus{FileStatus: []fileStatus{}}
	records := strings.Split(out, "\x00")
	for i := 0; i < len(records); i++ {
		rec := records[i]
		if header, ok := strings.CutPrefix(rec, "## "); ok {
			st.CurrentBranch, st.Ahead, st.Behind, st.BranchPublished = parseBranch(header)
			continue
		}
		if len(rec) < 4 {
			continue
		}
		fs := fileStatus{Name: rec[3:], Staging: statusName(rec[0]), Worktree: statusName(rec[1])}
		if (rec[0] == 'R' || rec[0] == 'C') && i+1 < len(records) {
			i++
			fs.Extra = records[i]
		}
		st.FileStatus = append(st.FileStatus, fs)
	}
	return st
}

// parseBranch parses a porcelain branch header: "main", "main...origin/main
// [ahead 1, behind 2]", "No commits yet on main", "HEAD (no branch)".
func parseBranch(h string) (branch string, ahead, behind int, published bool) {
	if rest, ok := strings.CutPrefix(h, "No commits yet on "); ok {
		return rest, 0, 0, false
	}
	if rest, ok := strings.CutPrefix(h, "Initial commit on "); ok {
		return rest, 0, 0, false
	}
	h, counts, _ := strings.Cut(h, " [")
	branch, _, published = strings.Cut(h, "...")
	for part := range strings.SplitSeq(strings.TrimSuffix(counts, "]"), ", ") {
		if n, ok := strings.CutPrefix(part, "ahead "); ok {
			ahead, _ = strconv.Atoi(n)
		}
		if n, ok := strings.CutPrefix(part, "behind "); ok {
			behind, _ = strconv.Atoi(n)
		}
	}
	if branch == "HEAD (no branch)" {
		branch = "HEAD"
	}
	return branch, ahead, behind, published
}

// statusName is Daytona's name for a porcelain status letter.
func statusName(c byte) string {
	switch c {
	case '?':
		return "Untracked"
	case 'M', 'T':
		return "Modified"
	case 'A':
		return "Added"
	case 'D':
		return "Deleted"
	case 'R':
		return "Renamed"
	case 'C':
		return "Copied"
	case 'U':
		return "Updated but unmerged"
	}
	return "Unmodified"
}
