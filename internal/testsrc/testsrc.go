// Package testsrc is a test helper: it parses the module's Go files, for
// the tests that hold ARCHITECTURE.md's rules over the whole source
// (only stacks drives the unwinder, only procfs reads /proc's records,
// JSON tags only in wire).
package testsrc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Files parses every Go file of the module whose root is root (relative
// to the test's package, such as "../.."), but those under the
// directories skip names (slash-separated, relative to root) and, unless
// tests is set, test files; it calls fn with each file's path relative to
// root and its syntax tree. It fails the test when fewer than 100 files
// were read: the rule would then hold of nothing.
func Files(t *testing.T, root string, skip []string, tests bool, fn func(fset *token.FileSet, rel string, f *ast.File)) {
	t.Helper()
	root, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" || rel == "node_modules" || contains(skip, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !tests && strings.HasSuffix(path, "_test.go") || contains(skip, rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		fn(fset, rel, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d Go files looked at under %s", checked, root)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ImportName is the name file f gives the package of import path path (its
// own name unless renamed; "" when f does not import it).
func ImportName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}
