// Command codesize prints the largest hand-written Go files and functions of a source tree: the
// 15 longest non-generated .go files (lines) and the 15 longest functions (lines, with their
// cyclomatic complexity). It is how the repository measures "before" and "after" of a split;
// scripts/codesize.sh runs it on the repository.
//
// Complexity is counted from the syntax tree as 1 plus one for each if, for, range, non-default
// case (switch, type switch and select), && and ||; function literals count toward the function
// that holds them. Generated files (a "Code generated ... DO NOT EDIT." line) and test files are
// left out unless -tests is given; vendor, testdata and dot directories are never read.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// generated is the marker the Go tools recognise (go.dev/s/generatedcode).
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

type file struct {
	path  string
	lines int
}

type function struct {
	name       string // Recv.Name or Name
	recv       string // the receiver's type name, "" for a function
	pos        string // path:line
	lines      int
	complexity int
}

func main() {
	n := flag.Int("n", 15, "how many files and functions to print")
	tests := flag.Bool("tests", false, "count _test.go files too")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: codesize [-n N] [-tests] [dir]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	files, funcs, ifaces, err := measure(root, *tests)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codesize:", err)
		os.Exit(1)
	}
	sort.SliceStable(files, func(i, j int) bool { return files[i].lines > files[j].lines })
	sort.SliceStable(funcs, func(i, j int) bool {
		if funcs[i].lines != funcs[j].lines {
			return funcs[i].lines > funcs[j].lines
		}
		return funcs[i].complexity > funcs[j].complexity
	})
	fmt.Printf("largest files (lines)\n")
	for _, f := range files[:min(*n, len(files))] {
		fmt.Printf("%6d  %s\n", f.lines, f.path)
	}
	fmt.Printf("\nlargest functions (lines, complexity)\n")
	for _, f := range funcs[:min(*n, len(funcs))] {
		fmt.Printf("%6d %4d  %s  %s\n", f.lines, f.complexity, f.name, f.pos)
	}
	byCx := append([]function(nil), funcs...)
	sort.SliceStable(byCx, func(i, j int) bool { return byCx[i].complexity > byCx[j].complexity })
	fmt.Printf("\nmost complex functions (complexity, lines)\n")
	for _, f := range byCx[:min(*n, len(byCx))] {
		fmt.Printf("%6d %4d  %s  %s\n", f.complexity, f.lines, f.name, f.pos)
	}
	methods := map[string]int{} // "dir.Type" -> count; a type's methods live in one package
	for _, f := range funcs {
		if f.recv != "" {
			methods[filepath.Dir(f.pos)+"."+f.recv]++
		}
	}
	printTop("types with the most methods (count)", methods, *n)
	printTop("interfaces with the most methods (count, embedded interfaces not expanded)", ifaces, *n)
}

// printTop prints the n largest entries of counts under title.
func printTop(title string, counts map[string]int, n int) {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	fmt.Printf("\n%s\n", title)
	for _, k := range keys[:min(n, len(keys))] {
		fmt.Printf("%6d  %s\n", counts[k], k)
	}
}

// measure walks root and returns every counted file and the top-level functions declared in them.
func measure(root string, tests bool) ([]file, []function, map[string]int, error) {
	var files []file
	var funcs []function
	ifaces := map[string]int{} // "dir.Name" -> methods declared in the interface (embeddings not expanded)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "vendor" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || (!tests && strings.HasSuffix(name, "_test.go")) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated.Match(src) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			rel = path
		}
		files = append(files, file{path: rel, lines: lineCount(src)})
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if gd, ok := decl.(*ast.GenDecl); ok {
				for _, spec := range gd.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					if it, ok := ts.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							ifaces[filepath.Dir(rel)+"."+ts.Name.Name] += len(m.Names)
						}
					}
				}
				continue
			}
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			funcs = append(funcs, function{
				name:       funcName(fd),
				recv:       recvName(fd),
				pos:        fmt.Sprintf("%s:%d", rel, start.Line),
				lines:      end.Line - start.Line + 1,
				complexity: complexity(fd.Body),
			})
		}
		return nil
	})
	return files, funcs, ifaces, err
}

func lineCount(src []byte) int {
	n := strings.Count(string(src), "\n")
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

func funcName(fd *ast.FuncDecl) string {
	if r := recvName(fd); r != "" {
		return r + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// recvName is the name of fd's receiver type, "" for a plain function.
func recvName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		}
		break
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// complexity is 1 + the branch points under body (see the package comment).
func complexity(body ast.Node) int {
	c := 1
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if x.List != nil {
				c++
			}
		case *ast.CommClause:
			if x.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if x.Op == token.LAND || x.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}
