package wire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
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
	root, err := filepath.Abs("../..")
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
			if _, ok := jsonTagsElsewhere[rel]; ok || rel == "internal/wire" || rel == ".git" || rel == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if _, ok := jsonTagsElsewhere[rel]; ok || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if field, ok := n.(*ast.Field); ok && field.Tag != nil && strings.Contains(field.Tag.Value, `json:"`) {
				t.Errorf("%s: a JSON tag outside internal/wire: a document is a wire struct mapped from the model", fset.Position(field.Pos()))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d Go files looked at under %s", checked, root)
	}
}
