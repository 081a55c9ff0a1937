package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// facades are the API edges: they alone speak their wires.
var facades = []string{module + "internal/api/v1", module + "internal/api/e2b", module + "internal/api/daytona"}

// mayImportFacades are the packages that may depend on an edge: the
// composition root that wires them (internal/daemon, and cmd/sandboxd
// through it), the test harness that builds a whole daemon, and the
// edges themselves.
var mayImportFacades = map[string]bool{
	module + "cmd/sandboxd":         true,
	module + "internal/daemon":      true,
	module + "internal/api/apitest": true,
	module + "internal/api/v1":      true,
	module + "internal/api/e2b":     true,
	module + "internal/api/daytona": true,
}

// mayImportFacadesUnder are trees whose packages build whole daemons, as
// the harness does: the benchmarks.
var mayImportFacadesUnder = []string{module + "bench/"}

// TestDeps_NoFacadeBelowTheEdges: no package of the module but the
// composition root depends on an edge, directly or not: the service,
// the cluster (its forwarder included), the router and every part below
// see requests only as the edges decoded them. Test files are not
// checked.
func TestDeps_NoFacadeBelowTheEdges(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || mayImportFacades[fields[0]] || slices.ContainsFunc(mayImportFacadesUnder, func(p string) bool { return strings.HasPrefix(fields[0], p) }) {
			continue
		}
		checked++
		for _, dep := range fields[1:] {
			for _, f := range facades {
				if dep == f {
					t.Errorf("%s depends on the edge %s; give it what the edge decoded instead", fields[0], f)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d packages; is the list right?\n%s", checked, out)
	}
}

// facadeFragments are route fragments and headers of the edges' wires
// that no code outside internal/api spells (matched in string literals,
// case-insensitively, as headers are). The edges' camelCase JSON fields (E2B's and
// Daytona's) are added by facadeWords from the edges' own struct tags;
// the native API's fields (image, name, mounts, …) are the service's own
// words, so they are not.
var facadeFragments = []string{
	"/v1/sandboxes", "/v2/sandboxes", "/sandboxes/", "/daytona/", "/toolbox/", "/v1/templates", "/v2/templates", "/v3/templates",
	"E2b-Sandbox-Id", "E2b-Sandbox-Port", "X-Api-Key", "E2b-Traffic-Access-Token", "X-Daytona-",
	"Idempotency-Key",
}

// wordsAllowed are the files outside internal/api that may spell an edge's
// word, each with the reason.
var wordsAllowed = map[string]map[string]string{
	// The credential stripper keeps every credential header of every
	// edge from reaching a sandbox's server: it must name them.
	"internal/auth/strip.go": {
		"X-Api-Key": "a credential header, stripped before a sandbox sees it", "E2b-Traffic-Access-Token": "ditto", "X-Daytona-": "ditto",
	},
	// The flag's help text tells operators which requests the rule
	// governs, in the client's words.
	"internal/config/config.go": {"Idempotency-Key": "help text of --e2b-body-dedupe"},
	// The ingress's check of private preview ports accepts the scoped
	// preview token in the header Daytona's SDK documents (a credential,
	// as in internal/auth).
	"internal/daemon/daemon.go": {"X-Daytona-": "the preview-token credential header of private ports"},
}

// wordRoots are the trees scanned: the daemon's own code. The clients
// (cmd/sbx, sdk/), the tests (test/, internal/testenv) and benchmarks
// (bench/) speak the wires by design; internal/gen is generated from the
// agent's .proto files.
var wordRoots = []string{"internal", "cmd/sandboxd", "cmd/toolboxd"}

var wordsSkipped = map[string]bool{"internal/api": true, "internal/gen": true, "internal/testenv": true}

// TestFacadeWords_OnlyInTheEdges: no non-test Go file outside
// internal/api has a string literal (struct tags included) with an
// edge's route fragment, header or camelCase JSON field: a new route or
// field is the edge's change alone.
func TestFacadeWords_OnlyInTheEdges(t *testing.T) {
	root := moduleRoot(t)
	words := facadeWords(t, root)
	if len(words) < 40 {
		t.Fatalf("found %d words in the edges; is the scan right? %v", len(words), words)
	}
	scanned := 0
	for _, top := range wordRoots {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if wordsSkipped[rel] {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			scanned++
			for _, lit := range literals(t, p) {
				for i, w := range words {
					fragment := i < len(facadeFragments)
					if fragment && !strings.Contains(strings.ToLower(lit.text), strings.ToLower(w)) ||
						!fragment && !strings.Contains(lit.text, w) {
						continue
					}
					if _, ok := wordsAllowed[rel][w]; ok {
						continue
					}
					t.Errorf("%s:%d: %q spells the edges' %q", rel, lit.line, lit.text, w)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if scanned < 100 {
		t.Fatalf("scanned %d files; is the walk right?", scanned)
	}
}

// facadeWords are facadeFragments, then the camelCase JSON names of the
// E2B and Daytona edges' struct tags (matched case-sensitively: "MemTotal"
// in /proc/meminfo is not E2B's memTotal).
func facadeWords(t *testing.T, root string) []string {
	t.Helper()
	words := append([]string(nil), facadeFragments...)
	seen := map[string]bool{}
	for _, dir := range []string{"internal/api/e2b", "internal/api/daytona"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(af, func(n ast.Node) bool {
				fl, ok := n.(*ast.Field)
				if !ok || fl.Tag == nil {
					return true
				}
				tag, _ := strconv.Unquote(fl.Tag.Value)
				name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
				if strings.IndexFunc(name, unicode.IsUpper) > 0 && !seen[name] {
					seen[name] = true
					words = append(words, name)
				}
				return true
			})
		}
	}
	return words
}

type literal struct {
	text string
	line int
}

// literals are the string literals of file p, import paths left out.
func literals(t *testing.T, p string) []literal {
	t.Helper()
	fs := token.NewFileSet()
	af, err := parser.ParseFile(fs, p, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[*ast.BasicLit]bool{}
	for _, im := range af.Imports {
		imports[im.Path] = true
	}
	var out []literal
	ast.Inspect(af, func(n ast.Node) bool {
		bl, ok := n.(*ast.BasicLit)
		if !ok || bl.Kind != token.STRING || imports[bl] {
			return true
		}
		s, err := strconv.Unquote(bl.Value)
		if err != nil {
			s = bl.Value
		}
		out = append(out, literal{s, fs.Position(bl.Pos()).Line})
		return true
	})
	return out
}

// moduleRoot is the module's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}
