package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxd "github.com/sandboxd/sandboxd/sdk/go"
)

// Bounds on what a tool takes and returns. A model's context is the
// scarce resource on the way out; the daemon's memory on the way in.
const (
	// maxRefBytes bounds a sandbox id or name, an image or template
	// reference, a path, a working directory.
	maxRefBytes = 4096
	// maxCommandBytes bounds exec's shell command.
	maxCommandBytes = 64 << 10
	// maxStdinBytes bounds exec's stdin.
	maxStdinBytes = 1 << 20
	// maxEnvVars and maxEnvBytes bound an env map (create or exec).
	maxEnvVars  = 100
	maxEnvBytes = 64 << 10
	// maxExecOutput is what exec returns of each stream: its first and its
	// last half, with a note of the bytes left out between them.
	maxExecOutput = 32 << 10
	// maxStreamed is what exec streams in progress notifications, both
	// streams together; past it, only the result carries output.
	maxStreamed = 1 << 20
	// defaultExecTimeout and maxExecTimeout bound a command's run time.
	defaultExecTimeout = 120 * time.Second
	maxExecTimeout     = 30 * time.Minute
	// maxReadBytes is what read_file returns; the rest is left out, said so.
	maxReadBytes = 256 << 10
	// maxWriteBytes is what write_file takes (decoded), well under the
	// streamable transport's 4 MiB body even in base64.
	maxWriteBytes = 1 << 20
	// maxEntries is what list_directory and list_sandboxes return.
	maxEntries = 500
	// fileCallTimeout bounds a file tool's call: a download or upload is
	// a stream the API does not bound (a FIFO read would wait forever).
	fileCallTimeout = 5 * time.Minute
)

// tools are the handlers; client is their only dependency.
type tools struct {
	client ClientFunc
}

func addTools(s *mcpsdk.Server, t *tools) {
	yes, no := true, false
	mcpsdk.AddTool(s, &mcpsdk.Tool{
		Name:  "create_sandbox",
		Title: "Create a sandbox",
		Description: "Create an isolated Linux sandbox and wait until it runs; returns its id, which every other tool takes. " +
			"Give image (a container image, e.g. sandboxd/base:bookworm, the default) or template (a template's name or id), not both. " +
			"The sandbox is destroyed when its timeout ends (timeout_s; the daemon's default, 1 hour unless configured, when omitted). " +
			"Sandboxes have no network access unless the daemon allows it. " +
			"To make a create safe to repeat after a lost answer, pass the same idempotency_key: the repeat returns the first sandbox.",
		Annotations: &mcpsdk.ToolAnnotations{Title: "Create a sandbox", DestructiveHint: &no, OpenWorldHint: &no},
	}, t.create)
	mcpsdk.AddTool(s, &mcpsdk.Tool{
		Name:  "list_sandboxes",
		Title: "List sandboxes",
		Description: fmt.Sprintf("List the sandboxes this token can use (id, name, image, state, expiry), newest first, at most %d; "+
			"more reports whether there were others (narrow with name).", maxEntries),
		Annotations: &mcpsdk.ToolAnnotations{Title: "List sandboxes", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, t.list)
	mcpsdk.AddTool(s, &mcpsdk.Tool{
		Name:  "exec",
		Title: "Run a command in a sandbox",
		Description: fmt.Sprintf("Run a shell command (sh -c) in a sandbox and wait for it; returns exit_code, stdout and stderr. "+
			"A command that runs and fails is not an error: read exit_code (127: command not found). "+
			"The command is at most %d KiB, stdin at most %d KiB (then closed; without stdin the command reads end of file). "+
			"It is killed after timeout_s seconds (default %d, at most %d), and timed_out is set. "+
			"Of each stream the first and last %d KiB are returned, with a note of the bytes left out between them (truncated is set). "+
			"With a progressToken, output is also sent as it comes in progress notifications (the chunk is the message; stderr chunks start with \"[stderr] \"), up to %d KiB in all.",
			maxCommandBytes>>10, maxStdinBytes>>10, int(defaultExecTimeout.Seconds()), int(maxExecTimeout.Seconds()), maxExecOutput>>11, maxStreamed>>10),
		Annotations: &mcpsdk.ToolAnnotations{Title: "Run a command", DestructiveHint: &yes, OpenWorldHint: &no},
	}, t.exec)
	mcpsdk.AddTool(s, &mcpsdk.Tool{
		Name:  "read_file",
		Title: "Read a file in a sandbox",
		Description: fmt.Sprintf("Read a file in a sandbox. encoding \"text\" (the default) returns UTF-8 text and refuses a binary file; "+
			"\"base64\" returns any file base64-encoded. At most the first %d KiB are returned; truncated and size say when there was more "+
			"(read the rest with exec, e.g. tail -c or sed -n).", maxReadBytes>>10),
		Annotations: &mcpsdk.ToolAnnotations{Title: "Read a file", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, bounded(t.readFile, fileCallTimeout))
	mcpsdk.AddTool(s, &mcpsdk.Tool{
		Name:  "write_file",
		Title: "Write a file in a sandbox",
		Description: fmt.Sprintf("Create or replace a file in a sandbox with content: UTF-8 text (encoding \"text\", the default) "+
			"or base64-encoded bytes (encoding \"base64\"), at most %d KiB once decoded. Writing the same content again is harmless.", maxWriteBytes>>10),
		Annotations: &mcpsdk.ToolAnnotations{Title: "Write a file", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, bounded(t.writeFile, fileCallTimeout))
	mcpsdk.AddTool(s, &mcpsdk.Tool{
		Name:  "list_directory",
		Title: "List a directory in a sandbox",
		Description: fmt.Sprintf("List the entries of a directory in a sandbox (name, type file/dir/symlink, size, modified time), "+
			"at most %d; truncated says when there were more.", maxEntries),
		Annotations: &mcpsdk.ToolAnnotations{Title: "List a directory", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, bounded(t.listDir, fileCallTimeout))
	mcpsdk.AddTool(s, &mcpsdk.Tool{
		Name:  "expose_port",
		Title: "Expose a sandbox port over HTTP",
		Description: "Make an HTTP server listening on a port inside a sandbox reachable from outside, and return its preview URL. " +
			"Start the server first (exec, e.g. in the background with nohup … &). A private port (the default) needs the API token " +
			"to open; public makes it open to anyone who can reach the daemon. Exposing the same port again returns the same URL.",
		Annotations: &mcpsdk.ToolAnnotations{Title: "Expose a port", DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &yes},
	}, t.expose)
	mcpsdk.AddTool(s, &mcpsdk.Tool{
		Name:        "destroy_sandbox",
		Title:       "Destroy a sandbox",
		Description: "Destroy a sandbox and everything in it (its files, processes and exposed ports). It cannot be undone.",
		Annotations: &mcpsdk.ToolAnnotations{Title: "Destroy a sandbox", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, t.destroy)
}

// bounded runs h under a deadline of d.
func bounded[In, Out any](h mcpsdk.ToolHandlerFor[In, Out], d time.Duration) mcpsdk.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcpsdk.CallToolRequest, in In) (*mcpsdk.CallToolResult, Out, error) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return h(ctx, req, in)
	}
}

// --- create_sandbox ---

type createIn struct {
	Image          string            `json:"image,omitempty" jsonschema:"container image to run, e.g. sandboxd/base:bookworm (Debian with python3) or sandboxd/busybox:latest; omit for the daemon's default"`
	Template       string            `json:"template,omitempty" jsonschema:"a ready template's name or id to create from, instead of image"`
	Name           string            `json:"name,omitempty" jsonschema:"optional name, unique among your sandboxes; other tools accept it in place of the id"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for every process in the sandbox (at most 100)"`
	TimeoutS       int64             `json:"timeout_s,omitempty" jsonschema:"seconds until the daemon destroys the sandbox; omit for the daemon's default (1 hour unless configured)"`
	CPU            float64           `json:"cpu,omitempty" jsonschema:"CPU cores, e.g. 0.5 or 2; omit for the default"`
	MemoryMB       int               `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB; omit for the default"`
	IdempotencyKey string            `json:"idempotency_key,omitempty" jsonschema:"any unique string; repeating a create with the same key and arguments returns the first create's sandbox instead of making another"`
}

// sandboxOut is a sandbox as the tools return it: no keys, no secrets.
type sandboxOut struct {
	ID        string            `json:"id" jsonschema:"the sandbox id (sb-…), which the other tools take"`
	Name      string            `json:"name,omitempty"`
	Image     string            `json:"image"`
	State     string            `json:"state" jsonschema:"creating, running, paused, stopping, stopped or error"`
	CPU       float64           `json:"cpu"`
	MemoryMB  int               `json:"memory_mb"`
	Env       map[string]string `json:"env,omitempty"`
	CreatedAt string            `json:"created_at"`
	ExpiresAt string            `json:"expires_at,omitempty" jsonschema:"when the daemon destroys it (RFC 3339); empty: never"`
}

func sandboxOf(sb *sandboxd.Sandbox) sandboxOut {
	out := sandboxOut{
		ID: sb.ID, Name: sb.Name, Image: sb.Image, State: string(sb.State), CPU: sb.CPU, MemoryMB: sb.MemoryMB,
		Env: sb.Env, CreatedAt: sb.CreatedAt.UTC().Format(time.RFC3339),
	}
	if !sb.ExpiresAt.IsZero() {
		out.ExpiresAt = sb.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return out
}

func (t *tools) create(ctx context.Context, req *mcpsdk.CallToolRequest, in createIn) (*mcpsdk.CallToolResult, sandboxOut, error) {
	const op = "create_sandbox"
	switch {
	case in.Image != "" && in.Template != "":
		return nil, sandboxOut{}, invalid(op, "give image or template, not both")
	case len(in.Image) > maxRefBytes, len(in.Template) > maxRefBytes, len(in.Name) > maxRefBytes, len(in.IdempotencyKey) > maxRefBytes:
		return nil, sandboxOut{}, invalid(op, "image, template, name and idempotency_key are at most %d bytes each", maxRefBytes)
	case in.TimeoutS < 0:
		return nil, sandboxOut{}, invalid(op, "timeout_s must be positive (omit it for the daemon's default)")
	}
	if err := checkEnv(op, in.Env); err != nil {
		return nil, sandboxOut{}, err
	}
	cl, err := t.client(ctx, req)
	if err != nil {
		return nil, sandboxOut{}, failure(op, err)
	}
	sb, err := cl.CreateSandbox(ctx, sandboxd.CreateRequest{
		Image: in.Image, Template: in.Template, Name: in.Name, Env: in.Env, CPU: in.CPU, MemoryMB: in.MemoryMB,
		Timeout: time.Duration(in.TimeoutS) * time.Second, IdempotencyKey: in.IdempotencyKey,
	})
	if err != nil {
		return nil, sandboxOut{}, failure(op, err)
	}
	return nil, sandboxOf(sb), nil
}

// --- list_sandboxes ---

type listIn struct {
	Name string `json:"name,omitempty" jsonschema:"only the sandbox with this name"`
}

type listOut struct {
	Sandboxes []sandboxOut `json:"sandboxes"`
	More      bool         `json:"more" jsonschema:"true when more sandboxes exist than were returned"`
}

func (t *tools) list(ctx context.Context, req *mcpsdk.CallToolRequest, in listIn) (*mcpsdk.CallToolResult, listOut, error) {
	const op = "list_sandboxes"
	if len(in.Name) > maxRefBytes {
		return nil, listOut{}, invalid(op, "name is at most %d bytes", maxRefBytes)
	}
	cl, err := t.client(ctx, req)
	if err != nil {
		return nil, listOut{}, failure(op, err)
	}
	page, err := cl.ListSandboxes(ctx, sandboxd.ListOptions{Name: in.Name, Limit: maxEntries})
	if err != nil {
		return nil, listOut{}, failure(op, err)
	}
	out := listOut{Sandboxes: make([]sandboxOut, 0, len(page.Items)), More: page.NextPageToken != ""}
	for i := range page.Items {
		out.Sandboxes = append(out.Sandboxes, sandboxOf(&page.Items[i]))
	}
	return nil, out, nil
}

// --- exec ---

type execIn struct {
	Sandbox  string            `json:"sandbox" jsonschema:"the sandbox's id (sb-…) or name"`
	Command  string            `json:"command" jsonschema:"shell command, run with sh -c, e.g. 'python3 -c \"print(6*7)\"' or 'cd /tmp && ls -la'"`
	Cwd      string            `json:"cwd,omitempty" jsonschema:"working directory (absolute); omit for the image's"`
	Env      map[string]string `json:"env,omitempty" jsonschema:"extra environment variables for this command"`
	Stdin    string            `json:"stdin,omitempty" jsonschema:"text given to the command's standard input, which is then closed"`
	TimeoutS int64             `json:"timeout_s,omitempty" jsonschema:"seconds before the command is killed (default 120, at most 1800)"`
}

type execOut struct {
	ExitCode   int    `json:"exit_code" jsonschema:"the command's exit code; -1 when it was killed by the timeout"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Truncated  bool   `json:"truncated" jsonschema:"true when output was left out of stdout or stderr (the note inside says how much)"`
	TimedOut   bool   `json:"timed_out" jsonschema:"true when the command was killed after timeout_s"`
	DurationMS int64  `json:"duration_ms"`
}

func (t *tools) exec(ctx context.Context, req *mcpsdk.CallToolRequest, in execIn) (*mcpsdk.CallToolResult, execOut, error) {
	op := "exec in " + quote(in.Sandbox)
	switch {
	case strings.TrimSpace(in.Command) == "":
		return nil, execOut{}, invalid(op, "command is empty")
	case len(in.Command) > maxCommandBytes:
		return nil, execOut{}, invalid(op, "command is %d bytes, at most %d: write a script with write_file and run it", len(in.Command), maxCommandBytes)
	case len(in.Stdin) > maxStdinBytes:
		return nil, execOut{}, invalid(op, "stdin is %d bytes, at most %d: write it to a file with write_file and redirect it", len(in.Stdin), maxStdinBytes)
	case len(in.Cwd) > maxRefBytes:
		return nil, execOut{}, invalid(op, "cwd is at most %d bytes", maxRefBytes)
	case in.TimeoutS < 0 || time.Duration(in.TimeoutS)*time.Second > maxExecTimeout:
		return nil, execOut{}, invalid(op, "timeout_s is 1 to %d (omit it for %d)", int(maxExecTimeout.Seconds()), int(defaultExecTimeout.Seconds()))
	}
	if err := checkEnv(op, in.Env); err != nil {
		return nil, execOut{}, err
	}
	cl, id, err := t.sandbox(ctx, req, op, in.Sandbox, "")
	if err != nil {
		return nil, execOut{}, err
	}
	timeout := defaultExecTimeout
	if in.TimeoutS > 0 {
		timeout = time.Duration(in.TimeoutS) * time.Second
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	stdout, stderr := newCapture(maxExecOutput), newCapture(maxExecOutput)
	var outW, errW io.Writer = stdout, stderr
	if send := progress(ctx, req); send != nil {
		var sent int64
		outW = io.MultiWriter(stdout, &streamer{send: send, limit: maxStreamed, sent: &sent})
		errW = io.MultiWriter(stderr, &streamer{send: func(s string) error { return send("[stderr] " + s) }, limit: maxStreamed, sent: &sent})
	}
	start := time.Now()
	p, err := cl.ExecStream(runCtx, id, sandboxd.StreamRequest{Command: in.Command, Env: in.Env, Cwd: in.Cwd, Stdout: outW, Stderr: errW})
	if err != nil {
		return nil, execOut{}, failure(op, err)
	}
	defer p.Close()
	// A failed write or close means the command ended without reading
	// its stdin: its exit code, below, says what happened.
	if in.Stdin != "" {
		_, _ = p.Write([]byte(in.Stdin))
	}
	_ = p.CloseStdin()
	code, err := p.Wait()
	out := execOut{ExitCode: code, DurationMS: time.Since(start).Milliseconds()}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, execOut{}, failure(op, ctx.Err())
		case errors.Is(runCtx.Err(), context.DeadlineExceeded):
			out.ExitCode, out.TimedOut = -1, true
		default:
			return nil, execOut{}, failure(op, err)
		}
	}
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	out.Truncated = stdout.Truncated() || stderr.Truncated()
	return nil, out, nil
}

// progress returns a function that sends text to the caller as a
// progress notification of req, or nil when the caller gave no
// progressToken. Progress counts the notifications sent.
func progress(ctx context.Context, req *mcpsdk.CallToolRequest) func(text string) error {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return nil
	}
	var n float64
	return func(text string) error {
		n++
		return req.Session.NotifyProgress(ctx, &mcpsdk.ProgressNotificationParams{ProgressToken: tok, Progress: n, Message: text})
	}
}

// --- read_file ---

type readIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox's id (sb-…) or name"`
	Path     string `json:"path" jsonschema:"the file's absolute path in the sandbox"`
	Encoding string `json:"encoding,omitempty" jsonschema:"text (the default: UTF-8 text) or base64 (any bytes)"`
}

type readOut struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding" jsonschema:"text or base64"`
	Size      int64  `json:"size" jsonschema:"the file's size in bytes; -1 when unknown"`
	Truncated bool   `json:"truncated" jsonschema:"true when only the first part of the file is returned"`
}

func (t *tools) readFile(ctx context.Context, req *mcpsdk.CallToolRequest, in readIn) (*mcpsdk.CallToolResult, readOut, error) {
	op := "read_file " + quote(in.Path) + " in " + quote(in.Sandbox)
	enc, err := encodingOf(op, in.Encoding)
	if err != nil {
		return nil, readOut{}, err
	}
	if err := checkPath(op, in.Path); err != nil {
		return nil, readOut{}, err
	}
	cl, id, err := t.sandbox(ctx, req, op, in.Sandbox, pathNotFound)
	if err != nil {
		return nil, readOut{}, err
	}
	f, err := cl.DownloadFile(ctx, id, in.Path)
	if err != nil {
		return nil, readOut{}, failureHint(op, err, pathNotFound)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxReadBytes+1))
	if err != nil {
		return nil, readOut{}, failure(op, err)
	}
	out := readOut{Path: in.Path, Encoding: enc, Size: f.Size}
	if len(data) > maxReadBytes {
		data, out.Truncated = data[:maxReadBytes], true
	}
	if out.Size < 0 && !out.Truncated {
		out.Size = int64(len(data))
	}
	if enc == "base64" {
		out.Content = base64.StdEncoding.EncodeToString(data)
		return nil, out, nil
	}
	if out.Truncated {
		data = data[:validPrefix(data)] // a character the cut split
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return nil, readOut{}, invalid(op, "the file is not UTF-8 text; read it with encoding \"base64\"")
	}
	out.Content = string(data)
	return nil, out, nil
}

// --- write_file ---

type writeIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox's id (sb-…) or name"`
	Path     string `json:"path" jsonschema:"the file's absolute path in the sandbox; it is created or replaced"`
	Content  string `json:"content" jsonschema:"the file's new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"text (the default: content is the text) or base64 (content is base64-encoded bytes)"`
}

type writeOut struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes" jsonschema:"bytes written"`
}

func (t *tools) writeFile(ctx context.Context, req *mcpsdk.CallToolRequest, in writeIn) (*mcpsdk.CallToolResult, writeOut, error) {
	op := "write_file " + quote(in.Path) + " in " + quote(in.Sandbox)
	enc, err := encodingOf(op, in.Encoding)
	if err != nil {
		return nil, writeOut{}, err
	}
	if err := checkPath(op, in.Path); err != nil {
		return nil, writeOut{}, err
	}
	data := []byte(in.Content)
	if enc == "base64" {
		if base64.StdEncoding.DecodedLen(len(in.Content)) > maxWriteBytes+2 {
			return nil, writeOut{}, invalid(op, "content is more than %d bytes: write the file in parts (exec cat >> …) or build it in the sandbox", maxWriteBytes)
		}
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, writeOut{}, invalid(op, "content is not valid base64: %v", err)
		}
	}
	if len(data) > maxWriteBytes {
		return nil, writeOut{}, invalid(op, "content is %d bytes, at most %d: write the file in parts (exec cat >> …) or build it in the sandbox", len(data), maxWriteBytes)
	}
	cl, id, err := t.sandbox(ctx, req, op, in.Sandbox, pathNotFound)
	if err != nil {
		return nil, writeOut{}, err
	}
	if err := cl.UploadFile(ctx, id, in.Path, bytes.NewReader(data)); err != nil {
		return nil, writeOut{}, failureHint(op, err, pathNotFound)
	}
	return nil, writeOut{Path: in.Path, Bytes: len(data)}, nil
}

// --- list_directory ---

type listDirIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id (sb-…) or name"`
	Path    string `json:"path" jsonschema:"the directory's absolute path in the sandbox"`
}

type entryOut struct {
	Name       string `json:"name"`
	Type       string `json:"type" jsonschema:"file, dir or symlink"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modified_at,omitempty"`
}

type listDirOut struct {
	Path      string     `json:"path"`
	Entries   []entryOut `json:"entries"`
	Truncated bool       `json:"truncated" jsonschema:"true when the directory has more entries than were returned"`
}

func (t *tools) listDir(ctx context.Context, req *mcpsdk.CallToolRequest, in listDirIn) (*mcpsdk.CallToolResult, listDirOut, error) {
	op := "list_directory " + quote(in.Path) + " in " + quote(in.Sandbox)
	if err := checkPath(op, in.Path); err != nil {
		return nil, listDirOut{}, err
	}
	cl, id, err := t.sandbox(ctx, req, op, in.Sandbox, pathNotFound)
	if err != nil {
		return nil, listDirOut{}, err
	}
	entries, err := cl.ListFiles(ctx, id, in.Path)
	if err != nil {
		return nil, listDirOut{}, failureHint(op, err, pathNotFound)
	}
	out := listDirOut{Path: in.Path, Entries: make([]entryOut, 0, min(len(entries), maxEntries))}
	if len(entries) > maxEntries {
		entries, out.Truncated = entries[:maxEntries], true
	}
	for _, e := range entries {
		eo := entryOut{Name: e.Name, Type: string(e.Type), Size: e.Size}
		if !e.ModifiedAt.IsZero() {
			eo.ModifiedAt = e.ModifiedAt.UTC().Format(time.RFC3339)
		}
		out.Entries = append(out.Entries, eo)
	}
	return nil, out, nil
}

// --- expose_port ---

type exposeIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id (sb-…) or name"`
	Port    int    `json:"port" jsonschema:"the port an HTTP server listens on inside the sandbox, 1 to 65535"`
	Public  bool   `json:"public,omitempty" jsonschema:"true: anyone who reaches the daemon may open the URL; false (default): the API token is needed"`
}

type exposeOut struct {
	Port   int    `json:"port"`
	URL    string `json:"url" jsonschema:"the preview URL that reaches the port"`
	Public bool   `json:"public"`
}

func (t *tools) expose(ctx context.Context, req *mcpsdk.CallToolRequest, in exposeIn) (*mcpsdk.CallToolResult, exposeOut, error) {
	op := fmt.Sprintf("expose_port %d of %s", in.Port, quote(in.Sandbox))
	if in.Port < 1 || in.Port > 65535 {
		return nil, exposeOut{}, invalid(op, "port is 1 to 65535")
	}
	cl, id, err := t.sandbox(ctx, req, op, in.Sandbox, "")
	if err != nil {
		return nil, exposeOut{}, err
	}
	p, err := cl.ExposePort(ctx, id, sandboxd.ExposePortRequest{Port: in.Port, Protocol: sandboxd.ProtocolHTTP, Public: in.Public})
	if err != nil {
		return nil, exposeOut{}, failure(op, err)
	}
	return nil, exposeOut{Port: p.Port, URL: p.URL, Public: p.Public}, nil
}

// --- destroy_sandbox ---

type destroyIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id (sb-…) or name"`
}

type destroyOut struct {
	ID        string `json:"id"`
	Destroyed bool   `json:"destroyed"`
}

func (t *tools) destroy(ctx context.Context, req *mcpsdk.CallToolRequest, in destroyIn) (*mcpsdk.CallToolResult, destroyOut, error) {
	op := "destroy_sandbox " + quote(in.Sandbox)
	cl, id, err := t.sandbox(ctx, req, op, in.Sandbox, "")
	if err != nil {
		return nil, destroyOut{}, err
	}
	if err := cl.DestroySandbox(ctx, id); err != nil {
		return nil, destroyOut{}, failure(op, err)
	}
	return nil, destroyOut{ID: id, Destroyed: true}, nil
}

// --- shared ---

// sandbox returns the call's client and the id of the sandbox ref names
// (an id as it is; a name looked up, as sbx does: the API takes names on
// GET only). notFound is the hint of a lookup that finds none, the same
// as the tool's own call would give (failureHint).
func (t *tools) sandbox(ctx context.Context, req *mcpsdk.CallToolRequest, op, ref, notFound string) (*sandboxd.Client, string, error) {
	switch {
	case strings.TrimSpace(ref) == "":
		return nil, "", invalid(op, "sandbox is empty: give the id create_sandbox returned (sb-…) or the sandbox's name")
	case len(ref) > maxRefBytes:
		return nil, "", invalid(op, "sandbox is at most %d bytes", maxRefBytes)
	}
	cl, err := t.client(ctx, req)
	if err != nil {
		return nil, "", failure(op, err)
	}
	if sandboxd.IsSandboxID(ref) {
		return cl, ref, nil
	}
	sb, err := cl.GetSandbox(ctx, ref)
	if err != nil {
		return nil, "", failureHint(op, err, notFound)
	}
	return cl, sb.ID, nil
}

func checkEnv(op string, env map[string]string) error {
	if len(env) > maxEnvVars {
		return invalid(op, "env has %d variables, at most %d", len(env), maxEnvVars)
	}
	n := 0
	for k, v := range env {
		n += len(k) + len(v)
	}
	if n > maxEnvBytes {
		return invalid(op, "env is %d bytes, at most %d", n, maxEnvBytes)
	}
	return nil
}

func checkPath(op, path string) error {
	switch {
	case path == "":
		return invalid(op, "path is empty")
	case len(path) > maxRefBytes:
		return invalid(op, "path is at most %d bytes", maxRefBytes)
	}
	return nil
}

func encodingOf(op, enc string) (string, error) {
	switch enc {
	case "", "text":
		return "text", nil
	case "base64":
		return enc, nil
	}
	return "", invalid(op, "encoding %q: want \"text\" or \"base64\"", enc)
}

// quote shows a caller's string in an error, bounded: a message must not
// echo a megabyte back.
func quote(s string) string {
	if len(s) > 80 {
		s = s[:validPrefix([]byte(s[:80]))] + "…"
	}
	return fmt.Sprintf("%q", s)
}
