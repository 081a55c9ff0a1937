package daytona_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/api/daytona"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

type execResult struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

func execute(t *testing.T, s *stack, id string, body map[string]any) execResult {
	t.Helper()
	resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+id+"/process/execute", body)
	if resp.status != http.StatusOK {
		t.Fatalf("execute %v: %d %s", body, resp.status, resp.body)
	}
	var res execResult
	decode(t, resp.body, &res)
	return res
}

func TestExecute_OutputInOrderAsUser(t *testing.T) {
	s, sb := sharedSandbox(t)
	for _, tc := range []struct {
		name string
		body map[string]any
		want execResult
	}{
		{"order", map[string]any{"command": "echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 3"}, execResult{3, "out1\nerr1\nout2\nerr2\n"}},
		{"user and home", map[string]any{"command": `echo "$(whoami) $HOME $(pwd)"`}, execResult{0, "daytona /home/daytona /home/daytona\n"}},
		{"cwd and envs", map[string]any{"command": `echo "$(pwd) $X"`, "cwd": "/tmp", "envs": map[string]string{"X": "a b"}}, execResult{0, "/tmp a b\n"}},
		{"missing program", map[string]any{"command": "no-such-program"}, execResult{127, "/bin/bash: line 1: no-such-program: command not found\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, execute(t, s, sb.ID, tc.body)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExecute_TimeoutIs408AndKills(t *testing.T) {
	s, sb := sharedSandbox(t)
	// The sandbox is shared: look for this test's own sleep only, named
	// by a duration no other test uses. The pattern's [p] keeps pgrep's
	// own shell from matching it.
	n := fmt.Sprintf("31%09d", rand.N(1_000_000_000))
	sleep := "sleep " + n
	begin := time.Now()
	resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/process/execute", map[string]any{"command": sleep, "timeout": 1})
	body := wantError(t, resp, http.StatusRequestTimeout)
	if body.Code != "PROCESS_EXECUTION_TIMEOUT" || body.Source != "DAYTONA_DAEMON" {
		t.Errorf("timeout body %s", resp.body)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("the 1 s timeout took %v", d)
	}
	testenv.WaitFor(t, "the timed-out "+sleep+" to be killed", func() error {
		if res := execute(t, s, sb.ID, map[string]any{"command": "pgrep -a -f 'slee[p] " + n + "'"}); res.ExitCode != 1 {
			return fmt.Errorf("still running: %+v", res)
		}
		return nil
	})
}

func TestCodeRun(t *testing.T) {
	s, sb := sharedSandbox(t)
	resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/process/code-run", map[string]any{
		"code": "import sys\nprint(sys.argv[1:])\nprint('e', file=sys.stderr)\nsys.exit(2)", "language": "python", "argv": []string{"a", "b c"},
	})
	want := `{"exitCode":2,"result":"['a', 'b c']\ne\n","artifacts":{"charts":[]}}` + "\n"
	if resp.status != http.StatusOK || string(resp.body) != want {
		t.Errorf("code-run: %d %s, want %s", resp.status, resp.body, want)
	}
}

func TestInfoRoutes(t *testing.T) {
	s, sb := sharedSandbox(t)
	for path, want := range map[string]string{"/work-dir": "/home/daytona", "/user-home-dir": "/home/daytona"} {
		var d struct{ Dir string }
		decode(t, s.do(t, s.Admin, http.MethodGet, "/toolbox/"+sb.ID+path, nil).body, &d)
		if d.Dir != want {
			t.Errorf("%s: %q, want %q", path, d.Dir, want)
		}
	}
}

// uploadBody builds a bulk-upload body the way the SDK does: per file a
// files[i].path field, then a files[i].file part named by a basename only.
func uploadBody(t *testing.T, files map[string][]byte, order []string) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for i, p := range order {
		if err := mw.WriteField(fmt.Sprintf("files[%d].path", i), p); err != nil {
			t.Fatal(err)
		}
		fw, err := mw.CreateFormFile(fmt.Sprintf("files[%d].file", i), "garbled-name")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(files[p])
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

func TestBulkUploadDownload_Framing(t *testing.T) {
	s, sb := sharedSandbox(t)
	dir := "/tmp/bulk-" + time.Now().Format("150405.000")
	files := map[string][]byte{
		dir + "/a.txt":              []byte("alpha\n"),
		dir + "/sub/empty":          {},
		dir + "/with space ü ✓.bin": append([]byte("\r\n--boundary--\r\n"), 0, 1, 2, 255),
	}
	order := []string{dir + "/a.txt", dir + "/sub/empty", dir + "/with space ü ✓.bin"}
	body, ct := uploadBody(t, files, order)
	if resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/files/bulk-upload", body, ct); resp.status != http.StatusOK {
		t.Fatalf("upload: %d %s", resp.status, resp.body)
	}
	if res := execute(t, s, sb.ID, map[string]any{"command": "stat -c '%U %a %s' " + dir + "/a.txt " + dir + "/sub/empty"}); res.Result != "daytona 644 6\ndaytona 644 0\n" {
		t.Errorf("uploaded files: %q", res.Result)
	}

	missing := dir + "/absent"
	req := map[string]any{"paths": append(append([]string{}, order...), missing)}
	resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/files/bulk-download", req)
	mt, params, err := mime.ParseMediaType(resp.header.Get("Content-Type"))
	if resp.status != http.StatusOK || err != nil || mt != "multipart/form-data" {
		t.Fatalf("download: %d %q %v", resp.status, resp.header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(bytes.NewReader(resp.body), params["boundary"])
	var got []string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(part)
		// Not part.FileName(): it keeps only the base name.
		_, disp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if err != nil {
			t.Fatal(err)
		}
		name := disp["filename"]
		got = append(got, part.FormName()+" "+name)
		switch part.FormName() {
		case "file":
			if !bytes.Equal(data, files[name]) {
				t.Errorf("%s: %q, want %q", name, data, files[name])
			}
		case "error":
			var e struct {
				StatusCode int
				Code       string
			}
			json.Unmarshal(data, &e)
			if e.StatusCode != 404 || e.Code != "FILE_NOT_FOUND" {
				t.Errorf("error part %s", data)
			}
		}
	}
	want := []string{"file " + order[0], "file " + order[1], "file " + order[2], "error " + missing}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
}

func TestFiles_InfoListMoveDelete(t *testing.T) {
	s, sb := sharedSandbox(t)
	dir := "/tmp/files-" + time.Now().Format("150405.000")
	base := "/toolbox/" + sb.ID + "/files"
	if resp := s.do(t, s.Admin, http.MethodPost, base+"/folder?path="+dir+"/d&mode=700", nil); resp.status/100 != 2 {
		t.Fatalf("folder: %d %s", resp.status, resp.body)
	}
	var fi struct {
		Name, Mode, Permissions, Owner string
		IsDir                          bool
	}
	decode(t, s.do(t, s.Admin, http.MethodGet, base+"/info?path="+dir+"/d", nil).body, &fi)
	if fi.Name != "d" || !fi.IsDir || fi.Permissions != "0700" || fi.Mode != "drwx------" || fi.Owner != "daytona" {
		t.Errorf("info: %+v", fi)
	}
	if body := wantError(t, s.do(t, s.Admin, http.MethodGet, base+"/info?path="+dir+"/nope", nil), http.StatusNotFound); body.Code != "FILE_NOT_FOUND" {
		t.Errorf("missing file: code %q", body.Code)
	}
	wantError(t, s.do(t, s.Admin, http.MethodGet, base+"?path="+dir+"/nope", nil), http.StatusNotFound)
	wantError(t, s.do(t, s.Admin, http.MethodDelete, base+"?path="+dir+"/d", nil), http.StatusBadRequest)
	if resp := s.do(t, s.Admin, http.MethodPost, base+"/move?source="+dir+"/d&destination="+dir+"/e", nil); resp.status/100 != 2 {
		t.Fatalf("move: %d %s", resp.status, resp.body)
	}
	var list []struct{ Name string }
	decode(t, s.do(t, s.Admin, http.MethodGet, base+"?path="+dir, nil).body, &list)
	if len(list) != 1 || list[0].Name != "e" {
		t.Errorf("list after move: %+v", list)
	}
	if resp := s.do(t, s.Admin, http.MethodDelete, base+"?path="+dir+"/e&recursive=true", nil); resp.status/100 != 2 {
		t.Fatalf("delete: %d %s", resp.status, resp.body)
	}
	wantError(t, s.do(t, s.Admin, http.MethodGet, base+"/info?path="+dir+"/e", nil), http.StatusNotFound)
}

func TestGit_CloneLocalAndStatus(t *testing.T) {
	s, sb := sharedSandbox(t)
	dir := "/tmp/git-" + time.Now().Format("150405.000")
	res := execute(t, s, sb.ID, map[string]any{"command": "set -e; mkdir -p " + dir + "/o && cd " + dir + "/o && git init -q -b main && echo a > a && git add a && git -c user.name=t -c user.email=t@t commit -qm1"})
	if res.ExitCode != 0 {
		t.Fatalf("setup: %+v", res)
	}
	if resp := s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/git/clone", map[string]any{"url": "file://" + dir + "/o", "path": dir + "/c"}); resp.status != http.StatusOK {
		t.Fatalf("clone: %d %s", resp.status, resp.body)
	}
	execute(t, s, sb.ID, map[string]any{"command": "cd " + dir + "/c && echo b >> a && echo n > new && git mv a b"})
	resp := s.do(t, s.Admin, http.MethodGet, "/toolbox/"+sb.ID+"/git/status?path="+dir+"/c", nil)
	want := `{"currentBranch":"main","fileStatus":[{"name":"b","staging":"Renamed","worktree":"Modified","extra":"a"},{"name":"new","staging":"Untracked","worktree":"Untracked","extra":""}],"ahead":0,"behind":0,"branchPublished":true}` + "\n"
	if string(resp.body) != want {
		t.Errorf("status:\n got %s\nwant %s", resp.body, want)
	}
	wantError(t, s.do(t, s.Admin, http.MethodPost, "/toolbox/"+sb.ID+"/git/clone", map[string]any{"url": "file://" + dir + "/none", "path": dir + "/x"}), http.StatusBadRequest)
}

// sessionCmd is the union of the session answers tests read.
type sessionCmd struct {
	CmdID    string `json:"cmdId"`
	ExitCode *int   `json:"exitCode"`
	Output   string `json:"output"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ID       string `json:"id"`
	Command  string `json:"command"`
}

func TestSessions_StateSyncAsyncLogsInput(t *testing.T) {
	s, sb := sharedSandbox(t)
	base := "/toolbox/" + sb.ID + "/process/session"
	sid := "s-" + time.Now().Format("150405.000000")
	if resp := s.do(t, s.Admin, http.MethodPost, base, map[string]any{"sessionId": sid}); resp.status/100 != 2 {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	wantError(t, s.do(t, s.Admin, http.MethodPost, base, map[string]any{"sessionId": sid}), http.StatusConflict)
	exec := func(body map[string]any) (sessionCmd, int) {
		t.Helper()
		resp := s.do(t, s.Admin, http.MethodPost, base+"/"+sid+"/exec", body)
		var c sessionCmd
		decode(t, resp.body, &c)
		return c, resp.status
	}

	// Shell state carries over; stdout and stderr stay apart.
	exec(map[string]any{"command": "cd /tmp && export V=kept"})
	c, status := exec(map[string]any{"command": `printf 'no newline'; echo "$V $(pwd)" >&2; false`})
	if status != http.StatusOK || *c.ExitCode != 1 || c.Stdout != "no newline" || c.Stderr != "kept /tmp\n" {
		t.Errorf("sync: %d %+v", status, c)
	}

	// Async with input: running until the input arrives.
	c, status = exec(map[string]any{"command": `read -r l; echo "got:$l"; echo bye >&2`, "runAsync": true})
	if status != http.StatusAccepted || c.ExitCode != nil {
		t.Fatalf("async: %d %+v", status, c)
	}
	cmdPath := base + "/" + sid + "/command/" + c.CmdID
	var st sessionCmd
	decode(t, s.do(t, s.Admin, http.MethodGet, cmdPath, nil).body, &st)
	if st.ExitCode != nil || st.ID != c.CmdID {
		t.Errorf("running command: %+v", st)
	}

	// Follow the logs while it runs.
	wsURL := "ws" + strings.TrimPrefix(s.URL, "http") + daytona.Prefix + cmdPath + "/logs?follow=true"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + s.Admin}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if resp := s.do(t, s.Admin, http.MethodPost, cmdPath+"/input", map[string]any{"data": "hello\n"}); resp.status/100 != 2 {
		t.Fatalf("input: %d %s", resp.status, resp.body)
	}
	// stdout and stderr are two pipes: their relative order is not kept.
	frames := map[string]string{}
	for {
		_, data, err := conn.Read(ctx)
		if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
			break
		}
		if err != nil {
			t.Fatalf("follow: %v (frames %q)", err, frames)
		}
		frames[string(data[:3])] += string(data[3:])
	}
	if diff := cmp.Diff(map[string]string{"\x01\x01\x01": "got:hello\n", "\x02\x02\x02": "bye\n"}, frames); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
	var logs sessionCmd
	decode(t, s.do(t, s.Admin, http.MethodGet, cmdPath+"/logs", nil).body, &logs)
	if logs.Stdout != "got:hello\n" || logs.Stderr != "bye\n" || len(logs.Output) != len("got:hello\nbye\n") {
		t.Errorf("logs: %+v", logs)
	}

	var sess struct {
		SessionID string
		Commands  []sessionCmd
	}
	decode(t, s.do(t, s.Admin, http.MethodGet, base+"/"+sid, nil).body, &sess)
	var codes []int
	for _, c := range sess.Commands {
		codes = append(codes, *c.ExitCode)
	}
	if sess.SessionID != sid || !cmp.Equal(codes, []int{0, 1, 0}) {
		t.Errorf("session: %+v codes %v", sess, codes)
	}
	if resp := s.do(t, s.Admin, http.MethodDelete, base+"/"+sid, nil); resp.status/100 != 2 {
		t.Fatalf("delete: %d", resp.status)
	}
	wantError(t, s.do(t, s.Admin, http.MethodGet, base+"/"+sid, nil), http.StatusNotFound)
}
