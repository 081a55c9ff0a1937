package daytona

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/agent"
	fsrpc "github.com/sandboxd/sandboxd/internal/gen/envd/filesystem"
	"github.com/sandboxd/sandboxd/internal/service"
)

// Every file route acts as the box's user: relative paths are under its
// home, new files and directories are its own, and what it may not read or
// write is refused as it would be inside the sandbox.

// requiredQuery returns the query parameter name, or a 400 when it is empty.
func requiredQuery(r *http.Request, name string) (string, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return "", badRequest("query parameter %q is required", name)
	}
	return v, nil
}

// stat describes path (not following a final symlink).
func (f *Facade) stat(r *http.Request, b box, path string) (*fsrpc.EntryInfo, error) {
	ac, err := f.agentFor(r.Context(), b)
	if err != nil {
		return nil, err
	}
	req := connect.NewRequest(&fsrpc.StatRequest{Path: path})
	agent.SetUser(req.Header(), b.user)
	resp, err := ac.Filesystem().Stat(r.Context(), req)
	if err != nil {
		return nil, fileError(agentError(err), path)
	}
	return resp.Msg.GetEntry(), nil
}

// info renders an agent entry as Daytona's FileInfo.
func info(e *fsrpc.EntryInfo) fileInfo {
	mod := e.GetModifiedTime().AsTime().UTC().Format(time.RFC3339Nano)
	return fileInfo{
		Name:        e.GetName(),
		Path:        e.GetPath(),
		IsDir:       e.GetType() == fsrpc.FileType_FILE_TYPE_DIRECTORY,
		Size:        e.GetSize(),
		Mode:        e.GetPermissions(),
		Permissions: fmt.Sprintf("%04o", e.GetMode()),
		ModTime:     mod,
		ModifiedAt:  mod,
		Owner:       e.GetOwner(),
		Group:       e.GetGroup(),
	}
}

// listFiles is GET /files?path=: the directory's children (default the
// work directory); a missing directory is 404 FILE_NOT_FOUND.
func (f *Facade) listFiles(w http.ResponseWriter, r *http.Request, b box) error {
	path := r.URL.Query().Get("path")
	if path == "" {
		path = b.home
	}
	ac, err := f.agentFor(r.Context(), b)
	if err != nil {
		return err
	}
	req := connect.NewRequest(&fsrpc.ListDirRequest{Path: path, Depth: 1})
	agent.SetUser(req.Header(), b.user)
	resp, err := ac.Filesystem().ListDir(r.Context(), req)
	if err != nil {
		return fileError(agentError(err), path)
	}
	out := make([]fileInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, info(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// fileInfo is GET /files/info?path=.
func (f *Facade) fileInfo(w http.ResponseWriter, r *http.Request, b box) error {
	path, err := requiredQuery(r, "path")
	if err != nil {
		return err
	}
	e, err := f.stat(r, b, path)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info(e))
	return nil
}

// deleteFile is DELETE /files?path=[&recursive=true]: a directory needs
// recursive; a missing path is 404 FILE_NOT_FOUND.
func (f *Facade) deleteFile(w http.ResponseWriter, r *http.Request, b box) error {
	path, err := requiredQuery(r, "path")
	if err != nil {
		return err
	}
	e, err := f.stat(r, b, path)
	if err != nil {
		return err
	}
	if e.GetType() == fsrpc.FileType_FILE_TYPE_DIRECTORY && r.URL.Query().Get("recursive") != "true" {
		return badRequest("%s is a directory: delete it with recursive=true", path)
	}
	ac, err := f.agentFor(r.Context(), b)
	if err != nil {
		return err
	}
	req := connect.NewRequest(&fsrpc.RemoveRequest{Path: path})
	agent.SetUser(req.Header(), b.user)
	if _, err := ac.Filesystem().Remove(r.Context(), req); err != nil {
		return fileError(agentError(err), path)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// octalMode matches a permission mode as Daytona sends it ("755", "0700").
var octalMode = regexp.MustCompile(`^[0-7]{3,4}$`)

// createFolder is POST /files/folder?path=&mode=: mkdir -p, then the mode
// (default 0755) on the final directory. An existing directory is fine.
func (f *Facade) createFolder(w http.ResponseWriter, r *http.Request, b box) error {
	path, err := requiredQuery(r, "path")
	if err != nil {
		return err
	}
	mode := r.URL.Query().Get("mode")
	if mode == "" {
		mode = "0755"
	}
	if !octalMode.MatchString(mode) {
		return badRequest("mode %q is not an octal permission mode", mode)
	}
	if err := f.shell(r, b, `mkdir -p -- "$1" && chmod -- "$2" "$1"`, b.resolve(path), mode); err != nil {
		return err
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

// moveFile is POST /files/move?source=&destination=: a rename (parents of
// the destination are created); a missing source is 404 FILE_NOT_FOUND.
func (f *Facade) moveFile(w http.ResponseWriter, r *http.Request, b box) error {
	src, err := requiredQuery(r, "source")
	if err != nil {
		return err
	}
	dst, err := requiredQuery(r, "destination")
	if err != nil {
		return err
	}
	ac, err := f.agentFor(r.Context(), b)
	if err != nil {
		return err
	}
	req := connect.NewRequest(&fsrpc.MoveRequest{Source: src, Destination: dst})
	agent.SetUser(req.Header(), b.user)
	if _, err := ac.Filesystem().Move(r.Context(), req); err != nil {
		return fileError(agentError(err), src)
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// match is Daytona's Match: a line of a file that contains the pattern.
type match struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Content string `json:"content"`
}

// findInFiles is GET /files/find?path=&pattern=: every line under path
// that matches pattern (a basic regular expression, as grep reads it);
// binary files are skipped.
func (f *Facade) findInFiles(w http.ResponseWriter, r *http.Request, b box) error {
	path, err := requiredQuery(r, "path")
	if err != nil {
		return err
	}
	pattern, err := requiredQuery(r, "pattern")
	if err != nil {
		return err
	}
	res, err := f.run(r, b, service.ExecRequest{Cmd: []string{"grep", "-rnHIZ", "-e", pattern, "--", b.resolve(path)}})
	if err != nil {
		return err
	}
	if res.ExitCode > 1 { // 1: no match
		return fileError(shellFailure(res), path)
	}
	out := []match{}
	for line := range strings.Lines(string(res.Stdout)) {
		file, rest, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\x00")
		if !ok {
			continue
		}
		num, content, _ := strings.Cut(rest, ":")
		n, _ := strconv.Atoi(num)
		out = append(out, match{File: file, Line: n, Content: content})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// searchFiles is GET /files/search?path=&pattern=: {files}, every path
// under path whose name matches the glob pattern.
func (f *Facade) searchFiles(w http.ResponseWriter, r *http.Request, b box) error {
	path, err := requiredQuery(r, "path")
	if err != nil {
		return err
	}
	pattern, err := requiredQuery(r, "pattern")
	if err != nil {
		return err
	}
	if _, err := f.stat(r, b, path); err != nil {
		return err
	}
	res, err := f.run(r, b, service.ExecRequest{Cmd: []string{"find", b.resolve(path), "-mindepth", "1", "-name", pattern, "-print0"}})
	if err != nil {
		return err
	}
	files := []string{}
	for p := range strings.SplitSeq(string(res.Stdout), "\x00") {
		if p != "" {
			files = append(files, p)
		}
	}
	writeJSON(w, http.StatusOK, map[string][]string{"files": files})
	return nil
}

type replaceBody struct {
	Files    []string `json:"files"`
	Pattern  string   `json:"pattern"`
	NewValue *string  `json:"newValue"`
}

type replaceResult struct {
	File    string `json:"file"`
	Success bool   `json:"success"`
	Error   string `json:"error,omitempty"`
}

// replaceInFiles is POST /files/replace {files, pattern, newValue}: every
// occurrence of the literal pattern in each file is replaced. Each file
// succeeds or fails on its own.
func (f *Facade) replaceInFiles(w http.ResponseWriter, r *http.Request, b box) error {
	var body replaceBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if body.Pattern == "" || body.NewValue == nil {
		return badRequest("pattern and newValue are required")
	}
	out := make([]replaceResult, 0, len(body.Files))
	for _, file := range body.Files {
		res := replaceResult{File: file, Success: true}
		if err := f.replaceIn(r, b, file, body.Pattern, *body.NewValue); err != nil {
			res.Success, res.Error = false, classify(err).Message
		}
		out = append(out, res)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (f *Facade) replaceIn(r *http.Request, b box, file, pattern, value string) error {
	rc, _, err := f.svc.Download(r.Context(), b.c, b.sb.ID, file, b.user)
	if err != nil {
		return fileError(err, file)
	}
	content, err := io.ReadAll(io.LimitReader(rc, maxExecOutput+1))
	rc.Close()
	if err != nil {
		return err
	}
	if len(content) > maxExecOutput {
		return badRequest("%s is larger than %d bytes", file, maxExecOutput)
	}
	if !bytes.Contains(content, []byte(pattern)) {
		return nil
	}
	replaced := bytes.ReplaceAll(content, []byte(pattern), []byte(value))
	return f.svc.Upload(r.Context(), b.c, b.sb.ID, file, b.user, bytes.NewReader(replaced))
}

// setPermissions is POST /files/permissions?path=&mode=&owner=&group=: chmod
// as the sandbox user; chown (owner and/or group) as root, the only account
// that may give files away.
func (f *Facade) setPermissions(w http.ResponseWriter, r *http.Request, b box) error {
	path, err := requiredQuery(r, "path")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if mode := q.Get("mode"); mode != "" {
		if !octalMode.MatchString(mode) {
			return badRequest("mode %q is not an octal permission mode", mode)
		}
		if err := f.shell(r, b, `chmod -- "$2" "$1"`, b.resolve(path), mode); err != nil {
			return err
		}
	}
	if owner, group := q.Get("owner"), q.Get("group"); owner != "" || group != "" {
		spec := owner
		if group != "" {
			spec += ":" + group
		}
		root := b
		root.user = "root"
		if err := f.shell(r, root, `chown -- "$2" "$1"`, b.resolve(path), spec); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// shell runs a /bin/sh script with args ($1…) as the box's user; a
// non-zero exit is 400 with the script's output (404 FILE_NOT_FOUND when
// it names a missing file).
func (f *Facade) shell(r *http.Request, b box, script string, args ...string) error {
	cmd := append([]string{"/bin/sh", "-c", mergeStderr + script, "sh"}, args...)
	res, err := f.run(r, b, service.ExecRequest{Cmd: cmd})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		path := ""
		if len(args) > 0 {
			path = args[0]
		}
		return fileError(shellFailure(res), path)
	}
	return nil
}

// shellFailure is the error of a helper command that failed: its output,
// as a 400, or a not-found when it says so.
func shellFailure(res *service.ExecResult) error {
	msg := strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
	if strings.Contains(msg, "No such file or directory") {
		return fmt.Errorf("%s: %w", msg, service.ErrNotFound)
	}
	return badRequest("%s", cmp.Or(msg, "exit status "+strconv.Itoa(res.ExitCode)))
}

// downloadFile is GET /files/download?path=: the raw bytes.
func (f *Facade) downloadFile(w http.ResponseWriter, r *http.Request, b box) error {
	path, err := requiredQuery(r, "path")
	if err != nil {
		return err
	}
	rc, size, err := f.svc.Download(r.Context(), b.c, b.sb.ID, path, b.user)
	if err != nil {
		return fileError(err, path)
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": baseName(path)}))
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	}
	_, _ = io.Copy(w, rc) // a failure mid-body can only cut the response
	return nil
}

func baseName(p string) string {
	if i := strings.LastIndexByte(strings.TrimRight(p, "/"), '/'); i >= 0 {
		return strings.TrimRight(p, "/")[i+1:]
	}
	return p
}

// bulkFieldName matches the multipart field names of bulk-upload:
// files[<i>].path and files[<i>].file.
var bulkFieldName = regexp.MustCompile(`^files\[(\d+)\]\.(path|file)$`)

// bulkUpload is POST /files/bulk-upload (multipart): for each i a field
// files[i].path, the destination, then a file part files[i].file whose
// bytes go there (its filename is ignored: the SDK sends only a basename).
// Files are streamed, parents created, content replaced; empty parts are
// empty files. A file part without a path before it is 400. Files written
// before a failure stay.
func (f *Facade) bulkUpload(w http.ResponseWriter, r *http.Request, b box) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return badRequest("want a multipart/form-data body: %v", err)
	}
	paths := map[string]string{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return badRequest("read multipart body: %v", err)
		}
		m := bulkFieldName.FindStringSubmatch(part.FormName())
		switch {
		case m == nil:
			// Not ours: skipped.
		case m[2] == "path":
			v, err := io.ReadAll(io.LimitReader(part, 4096+1))
			if err != nil {
				return badRequest("read %s: %v", part.FormName(), err)
			}
			if len(v) > 4096 {
				return badRequest("%s is too long", part.FormName())
			}
			paths[m[1]] = string(v)
		default:
			dst, ok := paths[m[1]]
			if !ok {
				return badRequest("files[%s].file comes before files[%s].path", m[1], m[1])
			}
			if err := f.svc.Upload(r.Context(), b.c, b.sb.ID, dst, b.user, part); err != nil {
				return fileError(err, dst)
			}
		}
		part.Close()
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

type bulkDownloadBody struct {
	Paths []string `json:"paths"`
}

// partError is the JSON body of an error part in a bulk download.
type partError struct {
	Message    string `json:"message"`
	StatusCode int    `json:"statusCode"`
	Code       string `json:"code,omitempty"`
}

// bulkDownload is POST /files/bulk-download {paths}: 200 multipart/form-data
// with one part per path, in order, whose filename is the path exactly as
// requested (the SDK matches parts by it): name "file" with the bytes, or
// name "error" with a JSON error (404 FILE_NOT_FOUND for a missing file).
// A file part carries its Content-Length, which the SDK reports as
// downloadFileStream's totalBytes.
// A failure after the first part can only cut the body short.
func (f *Facade) bulkDownload(w http.ResponseWriter, r *http.Request, b box) error {
	var body bulkDownloadBody
	if err := f.decodeJSON(w, r, &body); err != nil {
		return err
	}
	if len(body.Paths) == 0 {
		return badRequest("paths is required")
	}
	mw := multipart.NewWriter(w)
	w.Header().Set("Content-Type", "multipart/form-data; boundary="+mw.Boundary())
	w.WriteHeader(http.StatusOK)
	for _, p := range body.Paths {
		if err := f.downloadPart(r, b, mw, p); err != nil {
			f.log.WarnContext(r.Context(), "daytona: bulk download cut short", "sandbox", b.sb.ID, "path", p, "err", err)
			return nil
		}
	}
	_ = mw.Close()
	return nil
}

// downloadPart writes one part of a bulk download. Only a failure to write
// the response is returned; a file that cannot be read becomes an error
// part.
func (f *Facade) downloadPart(r *http.Request, b box, mw *multipart.Writer, path string) error {
	rc, size, err := f.svc.Download(r.Context(), b.c, b.sb.ID, path, b.user)
	if err != nil {
		e := classify(fileError(err, path))
		part, werr := mw.CreatePart(partHeader("error", path, "application/json"))
		if werr != nil {
			return werr
		}
		return json.NewEncoder(part).Encode(partError{Message: e.Message, StatusCode: e.StatusCode, Code: e.Code})
	}
	defer rc.Close()
	h := partHeader("file", path, "application/octet-stream")
	if size >= 0 { // the agent's length, which its stream keeps to
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	part, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := io.Copy(part, rc); err != nil {
		return errors.Join(errors.New("copy file into the response"), err)
	}
	return nil
}

func partHeader(name, filename, contentType string) textproto.MIMEHeader {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": name, "filename": filename}))
	h.Set("Content-Type", contentType)
	return h
}
