package procfs

import (
	"go/ast"
	"go/token"
	"regexp"
	"strconv"
	"testing"

	"github.com/rbscope/rbscope/internal/testsrc"
)

// procPath matches a literal naming a file under a process's /proc
// directory: "/proc/%d/NAME" or "/proc/self/NAME".
var procPath = regexp.MustCompile(`^/proc/(%d|self)/([a-z_]+)`)

// underProc matches a literal naming any file under /proc: a process's,
// or the host's (stat, meminfo, the kernel's settings under sys/).
var underProc = regexp.MustCompile(`^/proc/.`)

// handles are the /proc files other packages may name: handles on a
// process's memory and files that are opened, not read as records
// (target, binary, rubyvm), and rbscope's own.
var handles = map[string]map[string]bool{
	"%d":   {"mem": true, "root": true, "map_files": true, "pagemap": true, "clear_refs": true, "exe": true},
	"self": {"fd": true, "cgroup": true, "oom_score_adj": true, "ns": true},
}

// TestOnlyProcfsReadsProcessFiles holds ARCHITECTURE.md's rule that procfs
// is the one reader of the files under /proc: the processes' rbscope looks
// at (stat, status, maps, comm, exe's name, cmdline, environ, the task
// list) and the host's (stat, meminfo, the kernel's settings: Yama's
// ptrace_scope, core_pattern): no other package's code names one, but for
// the handles above. Test helpers (internal/testruby, which procfs's own
// tests use) and tests are left out.
func TestOnlyProcfsReadsProcessFiles(t *testing.T) {
	testsrc.Files(t, "../..", []string{"internal/procfs", "internal/testruby"}, false, func(fset *token.FileSet, _ string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if m := procPath.FindStringSubmatch(s); m != nil && !handles[m[1]][m[2]] {
				t.Errorf("%s: %q: read a process's /proc files through procfs", fset.Position(lit.Pos()), s)
			} else if m == nil && underProc.MatchString(s) {
				t.Errorf("%s: %q: read the host's /proc files through procfs", fset.Position(lit.Pos()), s)
			}
			return true
		})
	})
}
