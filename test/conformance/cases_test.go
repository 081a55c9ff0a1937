package conformance_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/api/apierr"
	"github.com/sandboxd/sandboxd/internal/api/apierr/apierrtest"
	"github.com/sandboxd/sandboxd/internal/auth"
)

// fixture is what a case gets: one wire, and the sandbox the wire made for
// the table (running, with createEnv and the labels).
type fixture struct {
	w      wire
	id     string
	labels map[string]string
}

// createEnv is set at create on every wire; commands must see it.
var createEnv = map[string]string{"CONF_CREATE": "from-create"}

// unknownID is a well-formed sandbox id no daemon made.
const unknownID = "sb-00000000deadbeef"

// exception is a wire answering a case otherwise than the others, on
// purpose: what it answers, and why that is its SDK's contract.
type exception struct {
	class apierr.Code
	why   string
}

// tcase is one row of the table. run returns an error the daemon answered
// (or nil); want is its class on every wire ("" for success), but for the
// wires in except. check, when set, looks at the outcome further.
type tcase struct {
	name   string
	want   apierr.Code
	except map[string]exception
	run    func(ctx context.Context, f *fixture) error
	// check runs after run (whatever it returned) for what the case must
	// leave or show.
	check func(t *testing.T, ctx context.Context, f *fixture)
}

// e2bEnvdUnreachable is E2B's answer on envd for a sandbox it cannot reach:
// 502, which the SDKs read as "sandbox not running" (isRunning() false;
// SandboxNotFoundError on a command), as E2B's own edge answers.
var e2bEnvdUnreachable = map[string]exception{"e2b": {
	class: classBadGateway,
	why:   "E2B's edge answers 502 on envd's /files for a sandbox it cannot reach; the SDKs read it as not running",
}}

// e2bRPCUnreachable is the same answer on envd's Connect paths: Connect's
// unavailable.
var e2bRPCUnreachable = map[string]exception{"e2b": {
	class: apierr.Unavailable,
	why:   "E2B's edge answers Connect's unavailable on envd's RPCs for a sandbox it cannot reach",
}}

// TestConformance runs the table through every wire, each on a sandbox of
// its own on the one shared daemon, the wires side by side.
func TestConformance(t *testing.T) {
	d := needDaemon(t)
	tokens := &sync.Map{}
	wires := []wire{
		&native{base: d.URL(), token: d.Token()},
		&e2b{base: d.URL(), key: auth.E2BKey(d.Token()), tokens: tokens},
		&daytona{base: d.URL(), token: d.Token()},
	}
	otherToken = mintUserToken(t, d.URL(), d.Token(), "conformance-other-"+randHex(4))
	run := randHex(6)
	for _, w := range wires {
		t.Run(w.Name(), func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t, 4*time.Minute)
			f := &fixture{w: w, labels: map[string]string{"conformance": run, "wire": w.Name()}}
			f.id = createFixture(t, ctx, f)
			for _, group := range [][]tcase{lifecycleCases, execCases, fileCases, errorCases, stopStartCases, deleteCases} {
				for _, tc := range group {
					t.Run(tc.name, func(t *testing.T) { runCase(t, ctx, f, tc) })
				}
			}
		})
	}
}

func runCase(t *testing.T, ctx context.Context, f *fixture, tc tcase) {
	t.Helper()
	want, why := tc.want, ""
	if ex, ok := tc.except[f.w.Name()]; ok {
		want, why = ex.class, " ("+ex.why+")"
	}
	err := tc.run(ctx, f)
	got, other := classOf(err)
	if got != "" {
		t.Logf("%s answered: %v", f.w.Name(), err)
	}
	// Whatever the class, its message says what failed once: no lower
	// package's prefix, no code word twice.
	var we *wireError
	if errors.As(err, &we) {
		for _, m := range we.messages() {
			if why := apierrtest.Unclear(m); why != "" {
				t.Errorf("%s: message %q has %s", f.w.Name(), m, why)
			}
		}
	}
	switch {
	case err == nil && want != "":
		t.Errorf("%s: succeeded, want %s%s", f.w.Name(), want, why)
	case err != nil && other != "":
		t.Errorf("%s: %s", f.w.Name(), other) // not an answer in the wire's shape
	case err != nil && want == "":
		t.Errorf("%s: %v, want success", f.w.Name(), err)
	case got != want:
		t.Errorf("%s: class %q, want %q%s: %v", f.w.Name(), got, want, why, err)
	}
	if tc.check != nil {
		tc.check(t, ctx, f)
	}
}

// createFixture makes the wire's sandbox with an Idempotency-Key, then
// retries the same create: one sandbox, the same id; the same key with
// another body is idempotency_key_reused. It is destroyed at
// the end of t unless a case did.
func createFixture(t *testing.T, ctx context.Context, f *fixture) string {
	t.Helper()
	req := createReq{Env: createEnv, Labels: f.labels, Key: "conf-" + randHex(8)}
	id, err := f.w.Create(ctx, req)
	if err != nil {
		t.Fatalf("%s: create: %v", f.w.Name(), err)
	}
	t.Cleanup(func() {
		// The fixture, and whatever a case that failed made under the
		// wire's labels.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ids := []string{id}
		if vs, err := f.w.List(ctx, f.labels); err == nil {
			ids = append(ids, viewIDs(vs)...)
		}
		for _, id := range ids {
			if err := f.w.Delete(ctx, id); err != nil && !isClass(err, apierr.NotFound) {
				t.Errorf("cleanup: delete %s: %v", id, err)
			}
		}
	})
	retry, err := f.w.Create(ctx, req)
	if err != nil {
		t.Errorf("%s: a retried create with the same Idempotency-Key: %v, want the first's sandbox", f.w.Name(), err)
	} else if retry != id {
		t.Errorf("%s: a retried create with the same Idempotency-Key made %s beside %s", f.w.Name(), retry, id)
	}
	// The same key with another body is refused, and makes nothing.
	other := req
	other.Env = map[string]string{"CONF_CREATE": "another body"}
	if _, err := f.w.Create(ctx, other); !isClass(err, apierr.IdempotencyKeyReused) {
		t.Errorf("%s: the same Idempotency-Key with another body: %v, want idempotency_key_reused", f.w.Name(), err)
	}
	views, err := f.w.List(ctx, f.labels)
	if err != nil {
		t.Fatalf("%s: list: %v", f.w.Name(), err)
	}
	if ids := viewIDs(views); !slices.Equal(ids, []string{id}) {
		t.Errorf("%s: the keyed create and its retry left %v, want [%s]", f.w.Name(), ids, id)
	}
	return id
}

func viewIDs(vs []view) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// expect turns an outcome that is not what a case wants into an error the
// runner reports as it is (not an answer of the daemon).
func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

var lifecycleCases = []tcase{
	{name: "Get", run: func(ctx context.Context, f *fixture) error {
		v, err := f.w.Get(ctx, f.id)
		if err != nil {
			return err
		}
		return expect(v.ID == f.id && v.State == stateRunning && mapsEqual(v.Labels, f.labels),
			"got %+v, want id %s, running, labels %v", v, f.id, f.labels)
	}},
	{name: "ListByLabel", run: func(ctx context.Context, f *fixture) error {
		vs, err := f.w.List(ctx, f.labels)
		if err != nil {
			return err
		}
		return expect(slices.Equal(viewIDs(vs), []string{f.id}) && mapsEqual(vs[0].Labels, f.labels),
			"listed %+v, want exactly %s with labels %v", vs, f.id, f.labels)
	}},
	{name: "ListByOtherLabel", run: func(ctx context.Context, f *fixture) error {
		vs, err := f.w.List(ctx, map[string]string{"conformance": f.labels["conformance"], "wire": "none"})
		if err != nil {
			return err
		}
		return expect(len(vs) == 0, "listed %+v for labels nobody has", vs)
	}},
}

var execCases = []tcase{
	{name: "ExecStdout", run: func(ctx context.Context, f *fixture) error {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: "echo hello"})
		if err != nil {
			return err
		}
		return expect(r.ExitCode == 0 && r.Stdout == "hello\n", "got %+v, want stdout hello", r)
	}},
	{name: "ExecStderr", run: func(ctx context.Context, f *fixture) error {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: "echo oops >&2"})
		if err != nil {
			return err
		}
		if r.Combined {
			return expect(r.ExitCode == 0 && r.Stdout == "oops\n", "got %+v, want oops in the combined output", r)
		}
		return expect(r.ExitCode == 0 && r.Stdout == "" && r.Stderr == "oops\n", "got %+v, want stderr oops and no stdout", r)
	}},
	{name: "ExecExitCode", run: func(ctx context.Context, f *fixture) error {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: "exit 3"})
		if err != nil {
			return err
		}
		return expect(r.ExitCode == 3, "got %+v, want exit code 3", r)
	}},
	{name: "ExecCommandNotFound", run: func(ctx context.Context, f *fixture) error {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: "no-such-command-here"})
		if err != nil {
			return err
		}
		return expect(r.ExitCode == 127 && strings.Contains(r.Stdout+r.Stderr, "not found"),
			"got %+v, want exit 127 and the shell's complaint", r)
	}},
	{name: "ExecEnv", run: func(ctx context.Context, f *fixture) error {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: `echo "$CONF_CALL/$CONF_CREATE"`, Env: map[string]string{"CONF_CALL": "from-call"}})
		if err != nil {
			return err
		}
		return expect(r.ExitCode == 0 && r.Stdout == "from-call/from-create\n",
			"got %+v, want the call's and the create's env", r)
	}},
	{name: "ExecCwd", run: func(ctx context.Context, f *fixture) error {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: "pwd", Cwd: "/tmp"})
		if err != nil {
			return err
		}
		return expect(r.ExitCode == 0 && r.Stdout == "/tmp\n", "got %+v, want /tmp", r)
	}},
	{name: "ExecBadEnvName", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: "env", Env: map[string]string{"A=B": "x"}})
		if err != nil {
			return err
		}
		return fmt.Errorf("ran with an env name holding '=': %+v", r)
	}},
	{name: "ExecMissingCwd", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: "pwd", Cwd: "/no/such/dir"})
		if err != nil {
			return err
		}
		return fmt.Errorf("ran in a missing directory: %+v", r)
	}},
}

// payload has a NUL, a newline and high bytes: a transfer that treats it
// as text loses it.
var payload = []byte("conformance\x00\n\xff\xfe line two\n")

// mib is a MiB of random bytes.
var mib = func() []byte {
	b := make([]byte, 1<<20)
	rand.Read(b)
	return b
}()

var fileCases = []tcase{
	{name: "UploadDownload", run: func(ctx context.Context, f *fixture) error {
		if err := f.w.Upload(ctx, f.id, "/tmp/conf/dir/a.bin", payload); err != nil {
			return err
		}
		got, err := f.w.Download(ctx, f.id, "/tmp/conf/dir/a.bin")
		if err != nil {
			return err
		}
		return expect(bytes.Equal(got, payload), "downloaded %q, want %q", got, payload)
	}},
	{name: "EmptyFile", run: func(ctx context.Context, f *fixture) error {
		if err := f.w.Upload(ctx, f.id, "/tmp/conf/empty", nil); err != nil {
			return err
		}
		got, err := f.w.Download(ctx, f.id, "/tmp/conf/empty")
		if err != nil {
			return err
		}
		return expect(len(got) == 0, "downloaded %d bytes of an empty file", len(got))
	}},
	{name: "MiBFile", run: func(ctx context.Context, f *fixture) error {
		if err := f.w.Upload(ctx, f.id, "/tmp/conf/big.bin", mib); err != nil {
			return err
		}
		got, err := f.w.Download(ctx, f.id, "/tmp/conf/big.bin")
		if err != nil {
			return err
		}
		return expect(bytes.Equal(got, mib), "downloaded %d bytes, want the %d uploaded", len(got), len(mib))
	}},
	{name: "ListDir", run: func(ctx context.Context, f *fixture) error {
		names, err := f.w.ListDir(ctx, f.id, "/tmp/conf/dir")
		if err != nil {
			return err
		}
		return expect(slices.Equal(names, []string{"a.bin"}), "listed %v, want [a.bin]", names)
	}},
	{name: "DownloadMissing", want: apierr.NotFound, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Download(ctx, f.id, "/tmp/conf/no-such-file")
		return err
	}},
	{name: "ListDirMissing", want: apierr.NotFound, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.ListDir(ctx, f.id, "/tmp/conf/no-such-dir")
		return err
	}},
	{name: "UploadOntoDirectory", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		return f.w.Upload(ctx, f.id, "/tmp/conf/dir", payload)
	}},
	{name: "DownloadDirectory", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Download(ctx, f.id, "/tmp/conf/dir")
		return err
	}},
	{name: "UploadUnderAFile", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		return f.w.Upload(ctx, f.id, "/tmp/conf/dir/a.bin/x", payload)
	}},
	{name: "DownloadNULInPath", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Download(ctx, f.id, "/tmp/conf/a\x00b")
		return err
	}},
	{name: "UploadNULInPath", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		return f.w.Upload(ctx, f.id, "/tmp/conf/a\x00b", payload)
	}},
	// A path that climbs out of / stays in the sandbox's file system: the
	// file lands at /tmp/<name> inside, where a command reads it.
	{name: "UploadPathOutside", run: func(ctx context.Context, f *fixture) error {
		return f.w.Upload(ctx, f.id, "/../../../../tmp/conf-outside", payload)
	}, check: func(t *testing.T, ctx context.Context, f *fixture) {
		r, err := f.w.Exec(ctx, f.id, execReq{Command: "cat /tmp/conf-outside | od -An -c | head -1"})
		if err != nil || r.ExitCode != 0 || !strings.Contains(r.Stdout, "c   o   n   f") {
			t.Errorf("%s: the file is not at /tmp/conf-outside inside the sandbox: %+v, %v", f.w.Name(), r, err)
		}
	}},
	{name: "DownloadPathOutside", run: func(ctx context.Context, f *fixture) error {
		got, err := f.w.Download(ctx, f.id, "/../../../tmp/conf-outside")
		if err != nil {
			return err
		}
		return expect(bytes.Equal(got, payload), "downloaded %q, want the sandbox's /tmp/conf-outside", got)
	}},
}

var errorCases = []tcase{
	{name: "GetUnknown", want: apierr.NotFound, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Get(ctx, unknownID)
		return err
	}},
	{name: "StopUnknown", want: apierr.NotFound, run: func(ctx context.Context, f *fixture) error {
		return f.w.Stop(ctx, unknownID)
	}},
	{name: "StartUnknown", want: apierr.NotFound, run: func(ctx context.Context, f *fixture) error {
		return f.w.Start(ctx, unknownID)
	}},
	{name: "DeleteUnknown", want: apierr.NotFound, run: func(ctx context.Context, f *fixture) error {
		return f.w.Delete(ctx, unknownID)
	}},
	{name: "ExecUnknown", want: apierr.NotFound, except: e2bRPCUnreachable, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Exec(ctx, unknownID, execReq{Command: "true"})
		return err
	}},
	{name: "DownloadUnknown", want: apierr.NotFound, except: e2bEnvdUnreachable, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Download(ctx, unknownID, "/etc/hostname")
		return err
	}},
	{name: "CreateMalformedJSON", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		return f.w.CreateRaw(ctx, `{"$ENV":`)
	}, check: noNewSandbox},
	{name: "CreateWrongType", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		return f.w.CreateRaw(ctx, fmt.Sprintf(`{"$ENV":"not an object","$LABELS":{"conformance":%q,"wire":%q}}`,
			f.labels["conformance"], f.w.Name()))
	}, check: noNewSandbox},
	{name: "CreateUnknownImage", want: apierr.InvalidArgument, except: map[string]exception{"e2b": {
		class: apierr.NotFound,
		why:   "an E2B create names a template, a resource: a missing one is 404 \"template not found\", as on E2B",
	}}, run: func(ctx context.Context, f *fixture) error {
		return f.w.CreateRaw(ctx, fmt.Sprintf(`{"$IMAGE":"sandboxd/no-such-image:conformance","$LABELS":{"conformance":%q,"wire":%q}}`,
			f.labels["conformance"], f.w.Name()))
	}, check: noNewSandbox},
	{name: "CreateEmptyLabelKey", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		return f.w.CreateRaw(ctx, fmt.Sprintf(`{"$IMAGE":%q,"$LABELS":{"":"x","conformance":%q,"wire":%q}}`,
			image, f.labels["conformance"], f.w.Name()))
	}, check: noNewSandbox},
	{name: "CreateBadEnvName", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		return f.w.CreateRaw(ctx, fmt.Sprintf(`{"$IMAGE":%q,"$ENV":{"A=B":"x"},"$LABELS":{"conformance":%q,"wire":%q}}`,
			image, f.labels["conformance"], f.w.Name()))
	}, check: noNewSandbox},
	{name: "ExecEmptyCommand", want: apierr.InvalidArgument, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Exec(ctx, f.id, execReq{Command: ""})
		return err
	}},
}

func init() {
	// Every call, with no credential and with a wrong one: 401 on every
	// wire, and nothing changes.
	type op struct {
		name string
		do   func(ctx context.Context, w wire, f *fixture) error
	}
	ops := []op{
		{"Create", func(ctx context.Context, w wire, f *fixture) error {
			_, err := w.Create(ctx, createReq{Labels: f.labels})
			return err
		}},
		{"Get", func(ctx context.Context, w wire, f *fixture) error { _, err := w.Get(ctx, f.id); return err }},
		{"List", func(ctx context.Context, w wire, f *fixture) error { _, err := w.List(ctx, nil); return err }},
		{"Stop", func(ctx context.Context, w wire, f *fixture) error { return w.Stop(ctx, f.id) }},
		{"Delete", func(ctx context.Context, w wire, f *fixture) error { return w.Delete(ctx, f.id) }},
		{"Exec", func(ctx context.Context, w wire, f *fixture) error {
			_, err := w.Exec(ctx, f.id, execReq{Command: "touch /tmp/conf-unauthorized"})
			return err
		}},
		{"Upload", func(ctx context.Context, w wire, f *fixture) error {
			return w.Upload(ctx, f.id, "/tmp/conf-unauthorized", payload)
		}},
		{"Download", func(ctx context.Context, w wire, f *fixture) error {
			_, err := w.Download(ctx, f.id, "/tmp/conf/dir/a.bin")
			return err
		}},
		{"ListDir", func(ctx context.Context, w wire, f *fixture) error {
			_, err := w.ListDir(ctx, f.id, "/tmp")
			return err
		}},
	}
	for _, cred := range []struct {
		name string
		c    credential
	}{{"NoCredential", credNone}, {"WrongCredential", credWrong}} {
		for _, o := range ops {
			errorCases = append(errorCases, tcase{
				name: cred.name + "/" + o.name, want: apierr.Unauthenticated,
				run:   func(ctx context.Context, f *fixture) error { return o.do(ctx, f.w.As(cred.c), f) },
				check: unchanged,
			})
		}
	}
	// Another owner's valid token: the sandbox does not exist for it (404,
	// never 403, which would say it exists), and nothing changes. E2B's
	// envd is authorized by the sandbox's own access token, which another
	// owner never has: 401 there.
	envdOther := map[string]exception{"e2b": {
		class: apierr.Unauthenticated,
		why:   "E2B's envd wants the sandbox's access token, which another owner never has",
	}}
	for _, o := range ops {
		var except map[string]exception
		switch o.name {
		case "Create", "List":
			continue // theirs to do: ListOtherOwner below
		case "Exec", "Upload", "Download", "ListDir":
			except = envdOther
		}
		errorCases = append(errorCases, tcase{
			name: "OtherOwner/" + o.name, want: apierr.NotFound, except: except,
			run:   func(ctx context.Context, f *fixture) error { return o.do(ctx, f.w.As(credOther), f) },
			check: unchanged,
		})
	}
	errorCases = append(errorCases, tcase{name: "OtherOwner/List", run: func(ctx context.Context, f *fixture) error {
		vs, err := f.w.As(credOther).List(ctx, nil)
		if err != nil {
			return err
		}
		return expect(!slices.Contains(viewIDs(vs), f.id), "another owner lists %v", viewIDs(vs))
	}})
}

// mintUserToken makes a user token of owner through the native API and
// revokes it at the end of t.
func mintUserToken(t *testing.T, base, admin, owner string) string {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + admin}, "Content-Type": {"application/json"}}
	parse := (&native{}).parse
	b, _, err := call(t.Context(), http.MethodPost, base+"/v1/tokens", h,
		jsonBody(map[string]any{"name": owner, "role": "user", "owner": owner}), parse)
	if err != nil {
		t.Fatalf("mint a user token: %v", err)
	}
	var tok struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &tok); err != nil || tok.Token == "" {
		t.Fatalf("mint a user token: %q: %v", b, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, _, err := call(ctx, http.MethodDelete, base+"/v1/tokens/"+tok.ID, h, nil, parse); err != nil {
			t.Errorf("revoke the user token: %v", err)
		}
	})
	return tok.Token
}

// unchanged checks that the fixture is still there, running, alone under
// its labels, and that no refused call wrote its file.
func unchanged(t *testing.T, ctx context.Context, f *fixture) {
	t.Helper()
	noNewSandbox(t, ctx, f)
	v, err := f.w.Get(ctx, f.id)
	if err != nil || v.State != stateRunning {
		t.Errorf("%s: after a refused call the sandbox reads %+v, %v; want it running", f.w.Name(), v, err)
		return
	}
	r, err := f.w.Exec(ctx, f.id, execReq{Command: "test ! -e /tmp/conf-unauthorized"})
	if err != nil || r.ExitCode != 0 {
		t.Errorf("%s: a refused call wrote /tmp/conf-unauthorized: %+v, %v", f.w.Name(), r, err)
	}
}

// noNewSandbox checks that the fixture is still the only sandbox under its
// labels (a refused create made none).
func noNewSandbox(t *testing.T, ctx context.Context, f *fixture) {
	t.Helper()
	vs, err := f.w.List(ctx, map[string]string{"conformance": f.labels["conformance"]})
	if err != nil {
		t.Errorf("%s: list: %v", f.w.Name(), err)
		return
	}
	for _, v := range vs {
		if v.ID != f.id && v.Labels["wire"] == f.w.Name() {
			t.Errorf("%s: a refused call left sandbox %s", f.w.Name(), v.ID)
		}
	}
}

var stopStartCases = []tcase{
	{name: "Stop", run: func(ctx context.Context, f *fixture) error {
		return f.w.Stop(ctx, f.id)
	}, check: func(t *testing.T, ctx context.Context, f *fixture) {
		if v, err := f.w.Get(ctx, f.id); err != nil || v.State != stateStopped {
			t.Errorf("%s: after stop the sandbox reads %+v, %v; want stopped", f.w.Name(), v, err)
		}
		if vs, err := f.w.List(ctx, f.labels); err != nil || len(vs) != 1 || vs[0].State != stateStopped {
			t.Errorf("%s: after stop the list reads %+v, %v; want it, stopped", f.w.Name(), vs, err)
		}
	}},
	// A retried stop finds the sandbox stopped and changes nothing.
	{name: "StopAgain", except: map[string]exception{"e2b": {
		class: apierr.Conflict,
		why:   "E2B's pause of a paused sandbox is 409, which the SDKs' pause() reads as false (already paused)",
	}}, run: func(ctx context.Context, f *fixture) error {
		return f.w.Stop(ctx, f.id)
	}},
	{name: "ExecWhileStopped", want: apierr.Conflict, except: e2bRPCUnreachable, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Exec(ctx, f.id, execReq{Command: "true"})
		return err
	}},
	{name: "DownloadWhileStopped", want: apierr.Conflict, except: e2bEnvdUnreachable, run: func(ctx context.Context, f *fixture) error {
		_, err := f.w.Download(ctx, f.id, "/tmp/conf/dir/a.bin")
		return err
	}},
	{name: "Start", run: func(ctx context.Context, f *fixture) error {
		return f.w.Start(ctx, f.id)
	}, check: func(t *testing.T, ctx context.Context, f *fixture) {
		if v, err := f.w.Get(ctx, f.id); err != nil || v.State != stateRunning {
			t.Errorf("%s: after start the sandbox reads %+v, %v; want running", f.w.Name(), v, err)
		}
		// The files survive a stop, and commands run again.
		got, err := f.w.Download(ctx, f.id, "/tmp/conf/dir/a.bin")
		if err != nil || !bytes.Equal(got, payload) {
			t.Errorf("%s: after stop and start the file reads %q, %v", f.w.Name(), got, err)
		}
	}},
	// A retried start finds the sandbox running and changes nothing.
	{name: "StartAgain", run: func(ctx context.Context, f *fixture) error {
		return f.w.Start(ctx, f.id)
	}},
}

var deleteCases = []tcase{
	{name: "Delete", run: func(ctx context.Context, f *fixture) error {
		return f.w.Delete(ctx, f.id)
	}, check: func(t *testing.T, ctx context.Context, f *fixture) {
		if _, err := f.w.Get(ctx, f.id); !isClass(err, apierr.NotFound) {
			t.Errorf("%s: get after delete: %v, want not_found", f.w.Name(), err)
		}
		if vs, err := f.w.List(ctx, f.labels); err != nil || len(vs) != 0 {
			t.Errorf("%s: list after delete: %+v, %v; want nothing", f.w.Name(), vs, err)
		}
	}},
	// A retried delete finds nothing: not_found on every wire (E2B's kill()
	// reads body code 404 as false).
	{name: "DeleteAgain", want: apierr.NotFound, run: func(ctx context.Context, f *fixture) error {
		return f.w.Delete(ctx, f.id)
	}},
}

func isClass(err error, c apierr.Code) bool {
	got, _ := classOf(err)
	return got == c
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
