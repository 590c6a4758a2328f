package stacks

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/testsrc"
)

// unwindPath is the import path of the native unwinder.
const unwindPath = "github.com/rbscope/rbscope/internal/unwind"

// TestOnlyStacksDrivesTheUnwinder holds ARCHITECTURE.md's rule that one
// engine reads stacks: no package but internal/stacks (and the unwinder's
// own) calls into internal/unwind; the others may name its types (a
// frame) and nothing else. Every Go file of the module is looked at,
// tests and benchmarks too.
func TestOnlyStacksDrivesTheUnwinder(t *testing.T) {
	types := unwindTypes(t, "../unwind")
	if !types["Frame"] {
		t.Fatal("no type Frame found in internal/unwind: the test reads the wrong directory")
	}
	testsrc.Files(t, "../..", []string{"internal/unwind", "internal/stacks"}, true, func(fset *token.FileSet, _ string, f *ast.File) {
		name := testsrc.ImportName(f, unwindPath)
		if name == "" {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && !types[sel.Sel.Name] {
				t.Errorf("%s: %s.%s: only internal/stacks drives the unwinder (stacks.Reader); other packages may name its types only", fset.Position(sel.Pos()), name, sel.Sel.Name)
			}
			return true
		})
	})
}

// unwindTypes returns the names of the types internal/unwind declares.
func unwindTypes(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	types := map[string]bool{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, spec := range g.Specs {
					types[spec.(*ast.TypeSpec).Name.Name] = true
				}
			}
		}
	}
	return types
}

// TestOnlyKernelTIDMapsTheForkedMain holds the rule that a forked child's
// main thread's TID (Ruby's books keep its parent's; the kernel's is the
// PID) is worked out in one place, KernelTID: no code outside this
// package tests a thread's Main together with its TID in one condition.
// Tests are left out.
func TestOnlyKernelTIDMapsTheForkedMain(t *testing.T) {
	testsrc.Files(t, "../..", []string{"internal/stacks"}, false, func(fset *token.FileSet, _ string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			be, ok := n.(*ast.BinaryExpr)
			if !ok || be.Op != token.LAND {
				return true
			}
			main, tid := false, false
			ast.Inspect(be, func(m ast.Node) bool {
				if sel, ok := m.(*ast.SelectorExpr); ok {
					main = main || sel.Sel.Name == "Main"
					tid = tid || sel.Sel.Name == "TID"
				}
				return true
			})
			if main && tid {
				t.Errorf("%s: a condition on a thread's Main and TID: the kernel's TID of a forked child's main thread is stacks.KernelTID's", fset.Position(be.Pos()))
				return false
			}
			return true
		})
	})
}
