// Package hygiene_test checks the repository's own text: rules about how
// code, docs and scripts are written that no compiler enforces. It needs
// no engine and runs in make test-unit.
package hygiene_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// issueRef is a citation of a numbered issue, task or pull request of a
// tracker the repository does not hold (the word issue, task, ticket,
// bug or PR followed by a number, "(#N)", "see #N"). Such a number tells a reader nothing: say
// the thing itself, or name the place it is written down (a README
// section, a doc, a test). An upstream project's report is cited with its
// repository (owner/name#N), which this does not match.
var issueRef = regexp.MustCompile(`(?i)\b(issues?|tasks?|tickets?|bugs?|pr|pull requests?)\s*#?\d+\b|\(#\d+\)|\bsee #\d+`)

// textFiles are the kinds of file checked: code, docs, scripts, specs.
var textFiles = map[string]bool{
	".go": true, ".md": true, ".sh": true, ".js": true, ".mjs": true,
	".yaml": true, ".yml": true, ".proto": true, ".py": true, ".service": true, ".in": true,
}

// skipDirs are not the repository's own text: generated code, installed
// packages, build output.
var skipDirs = map[string]bool{
	".git": true, "node_modules": true, "bin": true, "dist": true, "gen": true,
}

// allowed are files that keep a citation, with the reason.
var allowed = map[string]string{
	// Shipped migrations are never edited (docs/design.md, section 1):
	// their comments stay as they were written.
	"internal/store/migrations/0006_undelivered_creates.sql":        "shipped migration",
	"internal/store/migrations/0011_custom_domain_verification.sql": "shipped migration",
	// The check's own examples of what it catches.
	"test/hygiene/hygiene_test.go": "examples",
}

// TestText_CitesNoIssueNumbers: no comment, doc or script cites an issue
// number (issueRef); a new one fails here with its file and line.
func TestText_CitesNoIssueNumbers(t *testing.T) {
	root := moduleRoot(t)
	files := repoFiles(t, root)
	checked := 0
	for _, rel := range files {
		if !checkedFile(rel) {
			continue
		}
		if _, ok := allowed[rel]; ok {
			continue
		}
		checked++
		f, err := os.Open(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for n := 1; sc.Scan(); n++ {
			if m := issueRef.FindString(sc.Text()); m != "" {
				t.Errorf("%s:%d cites %q: say the thing itself, or where it is written down", rel, n, m)
			}
		}
		if err := sc.Err(); err != nil {
			t.Errorf("%s: %v", rel, err)
		}
		f.Close()
	}
	if checked < 100 {
		t.Fatalf("checked %d files under %s: not the repository?", checked, root)
	}
}

// checkedFile reports whether the file at rel (slash-separated, from the
// module root) is one of the kinds checked, outside the skipped dirs.
func checkedFile(rel string) bool {
	dir, name := path.Split(rel)
	for _, d := range strings.Split(strings.Trim(dir, "/"), "/") {
		if skipDirs[d] || strings.HasPrefix(d, ".sandboxd") {
			return false
		}
	}
	ext := path.Ext(name)
	return textFiles[ext] || ext == ".sql" || name == "Makefile"
}

// repoFiles lists the repository's files, slash-separated from root: git's
// list of tracked files when git answers (a developer's untracked notes
// are not the repository's), else every file under root.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output(); err == nil && len(out) > 0 {
		return strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".sandboxd")) {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestIssueRef: what the check catches, and what it lets through.
func TestIssueRef(t *testing.T) {
	// The citations are built here, so that this file cites none itself.
	cite := func(word string, n int) string { return fmt.Sprintf("%s %d", word, n) }
	for s, want := range map[string]bool{
		"// " + cite("Issue", 12) + ": a create is tracked":       true,
		"proof of control (" + cite("issue", 27) + "): a binding": true,
		`(README "Warm pool", ` + cite("issue", 14) + ")":         true,
		"see #9 for the reason":                                   true,
		"fixed in (#231)":                                         true,
		"as task 3 asked":                                         true,
		"google/gvisor#212 and google/gvisor#5299":                false,
		"PKCS #8":                       false,
		`t.Fatalf("Stats #2: %v", err)`: false,
		"issue generates a token":       false,
		"color: #ff0000":                false,
	} {
		if got := issueRef.MatchString(s); got != want {
			t.Errorf("issueRef.MatchString(%q) = %v, want %v", s, got, want)
		}
	}
}

// moduleRoot is the directory of the repository's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("not inside a module (go env GOMOD = %q)", gomod)
	}
	return filepath.Dir(gomod)
}
