package wire

import (
	"go/ast"
	"go/token"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/testsrc"
)

// jsonTagsElsewhere are the places besides wire whose structs carry JSON
// tags, and why: none is a document of rbscope's own.
var jsonTagsElsewhere = map[string]string{
	"internal/output/speedscope.go":  "speedscope's file format",
	"internal/output/firefox.go":     "the Firefox profiler's file format",
	"internal/ui":                    "the page's own API (internal, unversioned; docs/json.md)",
	"internal/rubyvm/imagerecord.go": "a private cache file, checked by format number and by the rbscope that wrote it",
}

// TestJSONTagsOnlyInDocuments holds ARCHITECTURE.md's rule that every
// JSON document rbscope writes is made in wire, mapped from the model:
// no struct outside wire carries JSON tags, but other programs' formats,
// the UI's own API and a private cache (jsonTagsElsewhere).
func TestJSONTagsOnlyInDocuments(t *testing.T) {
	skip := []string{"internal/wire"}
	for place := range jsonTagsElsewhere {
		skip = append(skip, place)
	}
	testsrc.Files(t, "../..", skip, false, func(fset *token.FileSet, _ string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			if field, ok := n.(*ast.Field); ok && field.Tag != nil && strings.Contains(field.Tag.Value, `json:"`) {
				t.Errorf("%s: a JSON tag outside internal/wire: a document is a wire struct mapped from the model", fset.Position(field.Pos()))
			}
			return true
		})
	})
}
