package daytona

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandboxd/sandboxd/internal/service"
)

// TestRecipeFromDockerfile_WhatImageRenders: the lines Daytona's Image
// writes (base, runCommands in both forms, env with shell-quote's three
// quotings, workdir) become the recipe's base and steps, in order.
func TestRecipeFromDockerfile_WhatImageRenders(t *testing.T) {
	df := "FROM base\n" +
		"RUN echo hi > /built\n" +
		`RUN "bash" "-c" "echo \"hi there\""` + "\n" +
		"ENV A=b\n" +
		"ENV SP='a b'\n" +
		`ENV DQ="it's \$HOME \"q\""` + "\n" +
		`ENV BARE=a\:b\&c` + "\n" +
		"ENV EMPTY=''\n" +
		"ENV X=1 Y=2\n" +
		"ENV LEGACY some value\n" +
		"# a comment\n\n" +
		"WORKDIR '/app dir'\n" +
		"USER daytona\n" +
		"RUN [\"sh\", \"-c\", \"echo it's\"]\n" +
		"RUN apt-get update && \\\n    apt-get install -y x\n"
	base, steps, err := recipeFromDockerfile(df, map[string]string{"base": ""})
	if err != nil {
		t.Fatal(err)
	}
	if base != "" {
		t.Errorf("base = %q, want the default image (\"\")", base)
	}
	want := []service.Step{
		{Run: "echo hi > /built"},
		{Run: `"bash" "-c" "echo \"hi there\""`},
		{Env: map[string]string{"A": "b"}},
		{Env: map[string]string{"SP": "a b"}},
		{Env: map[string]string{"DQ": `it's $HOME "q"`}},
		{Env: map[string]string{"BARE": "a:b&c"}},
		{Env: map[string]string{"EMPTY": ""}},
		{Env: map[string]string{"X": "1", "Y": "2"}},
		{Env: map[string]string{"LEGACY": "some value"}},
		{Workdir: "/app dir"},
		{User: "daytona"},
		{Run: `'sh' '-c' 'echo it'\''s'`},
		{Run: "apt-get update &&      apt-get install -y x"},
	}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// TestRecipeFromDockerfile_RelativeWorkdir: a relative WORKDIR is taken
// (it was a 400) and left for the build to resolve under the working
// directory before it, the base image's first, as Docker's.
func TestRecipeFromDockerfile_RelativeWorkdir(t *testing.T) {
	_, steps, err := recipeFromDockerfile("FROM base\nWORKDIR app\nRUN pwd\nWORKDIR /srv\nWORKDIR data\n", map[string]string{"base": ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []service.Step{{Workdir: "app"}, {Run: "pwd"}, {Workdir: "/srv"}, {Workdir: "data"}}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// TestRecipeFromDockerfile_RefusedLinesAre400sNamingThem: what the facade
// does not build is a 400 naming the line, never skipped.
func TestRecipeFromDockerfile_RefusedLinesAre400sNamingThem(t *testing.T) {
	for _, tc := range []struct{ df, want string }{
		{"FROM x\nCOPY a /a\n", "line 2 (COPY a /a): COPY is not supported"},
		{"FROM x\nADD a /a\n", "ADD is not supported"},
		{"FROM x\nENTRYPOINT [\"a\"]\n", "line 2 (ENTRYPOINT [\"a\"]): ENTRYPOINT is not supported"},
		{"FROM x\n\nCMD sleep 1\n", "line 3"},
		{"FROM x\nARG V=1\n", "ARG is not supported"},
		{"RUN echo\n", "the first instruction must be FROM"},
		{"FROM x AS y\n", "FROM takes one image"},
		{"FROM x\nFROM y\n", "multi-stage"},
		{"FROM x\nENV P=$PATH:/x\n", "variable references"},
		{"FROM x\nENV P='a\n", "unterminated single quote"},
		{"FROM x\nENV novalue\n", "KEY=value"},
		{"FROM x\nRUN --mount=type=cache echo\n", "RUN options"},
		{"FROM x\nRUN [\"a\",\n", "JSON array"},
		{"# nothing\n", "no FROM"},
	} {
		_, _, err := recipeFromDockerfile(tc.df, nil)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Errorf("%q: err = %v, want a 400", tc.df, err)
			continue
		}
		if !strings.Contains(ae.Message, tc.want) {
			t.Errorf("%q: message %q does not contain %q", tc.df, ae.Message, tc.want)
		}
	}
}

// FuzzShellWords: the word splitter never panics, and what shellJoin
// quotes it splits back into the same words.
func FuzzShellWords(f *testing.F) {
	for _, s := range []string{"a b", `'a b' "c \"d\""`, `a\:b`, "''", `"x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = shellWords(s)
		words := strings.Fields(s)
		if len(words) == 0 {
			return
		}
		got, err := shellWords(shellJoin(words))
		if err != nil {
			t.Fatalf("shellWords(shellJoin(%q)): %v", words, err)
		}
		if diff := cmp.Diff(words, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	})
}
