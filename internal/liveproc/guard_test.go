package liveproc

import (
	"go/ast"
	"go/token"
	"testing"

	"github.com/rbscope/rbscope/internal/testsrc"
)

// rubyvmPath is the import path of the Ruby VM reader.
const rubyvmPath = "github.com/rbscope/rbscope/internal/rubyvm"

// TestOnlyLiveprocAndCorefileOpenVMs holds the rule that a Ruby process
// is opened one way: a live one by liveproc.Open, a core by corefile.Open.
// No other package's code calls rubyvm.Open or rubyvm.OpenWith (rubyvm's
// own and tests are left out).
func TestOnlyLiveprocAndCorefileOpenVMs(t *testing.T) {
	testsrc.Files(t, "../..", []string{"internal/liveproc", "internal/corefile", "internal/rubyvm"}, false, func(fset *token.FileSet, _ string, f *ast.File) {
		name := testsrc.ImportName(f, rubyvmPath)
		if name == "" {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && (sel.Sel.Name == "Open" || sel.Sel.Name == "OpenWith") {
				t.Errorf("%s: %s.%s: open a live process with liveproc.Open, a core with corefile.Open", fset.Position(sel.Pos()), name, sel.Sel.Name)
			}
			return true
		})
	})
}
