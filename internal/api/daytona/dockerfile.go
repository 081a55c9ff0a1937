package daytona

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/internal/service"
)

// A declarative Image of Daytona's SDK reaches us as the text of a
// Dockerfile (buildInfo.dockerfileContent). The facade builds the subset
// Image renders when it has no local files: one FROM, then RUN, ENV,
// WORKDIR and USER lines, which map one to one onto a service.Recipe's
// base and steps. Everything else (COPY and ADD, which need the files
// object storage would carry; ENTRYPOINT, CMD, ARG, multi-stage builds, …)
// is refused naming the line, never skipped.

// maxShownInstruction bounds the instruction an error quotes.
const maxShownInstruction = 80

// recipeFromDockerfile parses dockerfile into a recipe's base image and
// steps. images maps snapshot names to images (Options.Images), so FROM
// base is the daemon's default image as at create. Line continuations
// (a trailing backslash) and comments are understood; an error is a
// *apiError 400 naming the line.
func recipeFromDockerfile(dockerfile string, images map[string]string) (base string, steps []service.Step, err error) {
	seenFrom := false
	for ln := range logicalLines(dockerfile) {
		instr, rest := ln.text, ""
		if i := strings.IndexAny(ln.text, " \t"); i >= 0 {
			instr, rest = ln.text[:i], strings.TrimSpace(ln.text[i:])
		}
		fail := func(format string, args ...any) error {
			return badRequest("dockerfile line %d (%s): %s", ln.n, shorten(ln.text), fmt.Sprintf(format, args...))
		}
		kw := strings.ToUpper(instr)
		if !seenFrom && kw != "FROM" {
			return "", nil, fail("the first instruction must be FROM")
		}
		switch kw {
		case "FROM":
			fields := strings.Fields(rest)
			switch {
			case seenFrom:
				return "", nil, fail("multi-stage builds (a second FROM) are not supported")
			case len(fields) != 1 || strings.HasPrefix(fields[0], "--"):
				return "", nil, fail("FROM takes one image here (no --platform, no AS)")
			}
			seenFrom, base = true, fields[0]
			if img, ok := images[base]; ok {
				base = img
			}
		case "RUN":
			cmd := rest
			switch {
			case strings.HasPrefix(rest, "["):
				var argv []string
				if err := json.Unmarshal([]byte(rest), &argv); err != nil || len(argv) == 0 {
					return "", nil, fail("the exec form of RUN must be a JSON array of strings")
				}
				cmd = shellJoin(argv)
			case strings.HasPrefix(rest, "--"):
				return "", nil, fail("RUN options (--mount, --network, …) are not supported")
			case rest == "":
				return "", nil, fail("RUN needs a command")
			}
			steps = append(steps, service.Step{Run: cmd})
		case "ENV":
			env, err := parseEnv(rest)
			if err != nil {
				return "", nil, fail("%v", err)
			}
			steps = append(steps, service.Step{Env: env})
		case "WORKDIR", "USER":
			words, err := shellWords(rest)
			if err != nil {
				return "", nil, fail("%v", err)
			}
			if len(words) != 1 || words[0] == "" {
				return "", nil, fail("%s takes one argument", kw)
			}
			if kw == "USER" {
				steps = append(steps, service.Step{User: words[0]})
				continue
			}
			// A relative one is under the working directory before it
			// (the base image's first), as Docker's: the build resolves it.
			steps = append(steps, service.Step{Workdir: words[0]})
		case "COPY", "ADD":
			return "", nil, fail("%s is not supported: local files in an Image need object storage, which sandboxd's Daytona facade does not serve", kw)
		default:
			return "", nil, fail("%s is not supported: sandboxd builds FROM, RUN, ENV, WORKDIR and USER only", kw)
		}
	}
	if !seenFrom {
		return "", nil, badRequest("dockerfile: no FROM line")
	}
	return base, steps, nil
}

// logicalLine is an instruction with its continuations joined, and the
// number of the line it starts on.
type logicalLine struct {
	n    int
	text string
}

// logicalLines yields dockerfile's instructions: blank lines and comments
// skipped, lines ending in a backslash joined to the next.
func logicalLines(dockerfile string) func(func(logicalLine) bool) {
	return func(yield func(logicalLine) bool) {
		var cur strings.Builder
		start := 0
		n := 0
		for line := range strings.Lines(dockerfile) {
			n++
			line = strings.TrimRight(line, " \t\r\n")
			trimmed := strings.TrimSpace(line)
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			if cur.Len() == 0 {
				start = n
			}
			if body, ok := strings.CutSuffix(line, `\`); ok {
				cur.WriteString(body)
				cur.WriteByte(' ')
				continue
			}
			cur.WriteString(line)
			if !yield(logicalLine{n: start, text: strings.TrimSpace(cur.String())}) {
				return
			}
			cur.Reset()
		}
		if cur.Len() > 0 {
			yield(logicalLine{n: start, text: strings.TrimSpace(cur.String())})
		}
	}
}

// parseEnv parses an ENV instruction's arguments: KEY=value pairs whose
// values are shell words (the SDK quotes them as shell-quote does), or
// the legacy `KEY value…` form. Variable references are refused: the
// facade cannot expand the base image's variables.
func parseEnv(args string) (map[string]string, error) {
	words, err := shellWords(args)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, errors.New("ENV needs KEY=value")
	}
	env := map[string]string{}
	if !strings.Contains(words[0], "=") {
		if len(words) < 2 {
			return nil, errors.New("ENV needs KEY=value")
		}
		env[words[0]] = strings.Join(words[1:], " ")
		return env, nil
	}
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=value", w)
		}
		env[k] = v
	}
	return env, nil
}

// shellWords splits s into words as a POSIX shell would, without
// expansions: whitespace separates, single quotes are literal, double
// quotes take backslash escapes of " \ $ ` and ! (shell-quote writes the
// last), and a bare backslash escapes the next character. $ and `
// outside single quotes or an escape are refused.
func shellWords(s string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool
	)
	errExpand := errors.New("variable references and command substitutions ($, `) are not supported; quote the value")
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case ' ', '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case '\'':
			inWord = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case '"':
			inWord = true
			closed := false
			for i++; i < len(s); i++ {
				c := s[i]
				if c == '"' {
					closed = true
					break
				}
				switch {
				case c == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`!", s[i+1]) >= 0:
					i++
					cur.WriteByte(s[i])
				case c == '$' || c == '`':
					return nil, errExpand
				default:
					cur.WriteByte(c)
				}
			}
			if !closed {
				return nil, errors.New("unterminated double quote")
			}
		case '\\':
			inWord = true
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
		case '$', '`':
			return nil, errExpand
		default:
			inWord = true
			cur.WriteByte(ch)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// shellJoin quotes argv into one shell line.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// shorten is s cut for an error message.
func shorten(s string) string {
	if len(s) <= maxShownInstruction {
		return s
	}
	return s[:maxShownInstruction] + "…"
}
