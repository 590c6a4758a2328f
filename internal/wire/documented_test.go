package wire

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// document is one document rbscope writes: its heading in docs/json.md,
// its struct, and whether schema_version opens it.
type document struct {
	heading   string
	value     any
	versioned bool
}

// documents are every document of this package, by their headings in
// docs/json.md.
var documents = []document{
	{"stack --json", Stack{}, true},
	{"stack --native --json", NativeStack{}, true},
	{"core --json", Core{}, true},
	{"core --native --json", CoreNative{}, true},
	{"heap census --json", HeapCensus{}, true},
	{"heap diff --json", HeapDiff{}, true},
	{"heap path --json", HeapPath{}, true},
	{"heap suspects --json", HeapSuspects{}, true},
	{"heap top --json", HeapTop{}, true},
	{"alloc --json", Alloc{}, true},
	{"crash list --json", CrashList{}, true},
	{"crash show --json", CrashReport{}, true},
	{"report.json", CrashReport{}, true},
	{"crash status --json", CrashStatus{}, true},
	{"crash.json", CrashConfig{}, false},
	{"raw recording header", RawHeader{}, false},
	{"threads --json", ThreadTable{}, true},
	{"version --json", Version{}, true},
	{"threads --follow --json", ThreadEvent{}, true},
}

// docKey is a key as docs/json.md writes it: its path from the
// document's top ("threads[].frames[].label"), its JSON type, and whether
// it is left out when empty.
type docKey struct {
	path     string
	typ      string
	optional bool
}

// jsonType names the JSON type encoding/json writes for t.
func jsonType(t reflect.Type) string {
	if t == reflect.TypeOf(time.Time{}) {
		return "string"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonType(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return t.Kind().String()
}

// structKeys lists the keys of struct type t under prefix, recursing into
// nested objects and arrays of objects (path[] for an array's elements),
// and records every struct type it meets in seen.
func structKeys(t reflect.Type, prefix string, seen map[string]bool, out *[]docKey) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	seen[t.Name()] = true
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, hasTag := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if f.Anonymous && !hasTag {
			structKeys(f.Type, prefix, seen, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := prefix + name
		*out = append(*out, docKey{path, jsonType(f.Type), strings.Contains(","+opts+",", ",omitempty,")})
		elem := f.Type
		for elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		switch {
		case elem.Kind() == reflect.Struct && elem != reflect.TypeOf(time.Time{}):
			structKeys(elem, path+".", seen, out)
		case elem.Kind() == reflect.Slice:
			e := elem.Elem()
			for e.Kind() == reflect.Pointer {
				e = e.Elem()
			}
			if e.Kind() == reflect.Struct {
				structKeys(e, path+"[].", seen, out)
			}
		}
	}
}

// readDocs reads docs/json.md's key tables: for each document heading
// ("## `stack --json`"), the rows "| `path` | type | meaning |".
func readDocs(t *testing.T) map[string][]docKey {
	f, err := os.Open("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	docs := map[string][]docKey{}
	heading := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			heading = ""
			if name, ok := strings.CutPrefix(h, "`"); ok && strings.HasSuffix(name, "`") {
				heading = strings.TrimSuffix(name, "`")
				if _, dup := docs[heading]; dup {
					t.Errorf("docs/json.md:%d: heading %q twice", n, heading)
				}
				docs[heading] = []docKey{}
			}
			continue
		}
		if heading == "" || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Errorf("docs/json.md:%d: want | `key` | type | meaning |: %s", n, line)
			continue
		}
		path := strings.Trim(strings.TrimSpace(cells[1]), "`")
		typ := strings.TrimSpace(cells[2])
		word, _, _ := strings.Cut(typ, " ")
		docs[heading] = append(docs[heading], docKey{path, word, strings.Contains(typ, "(optional)")})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return docs
}

// TestDocumented holds docs/json.md and the documents' structs together:
// every key of every document (nested ones by their path) is documented
// under the document's heading with its JSON type and whether it may be
// left out, every documented key exists, every document heading names a
// document, and every struct of this package belongs to a document.
func TestDocumented(t *testing.T) {
	docs := readDocs(t)
	seen := map[string]bool{}
	for _, d := range documents {
		var keys []docKey
		if d.versioned {
			keys = append(keys, docKey{"schema_version", "integer", false})
		}
		structKeys(reflect.TypeOf(d.value), "", seen, &keys)
		documented, ok := docs[d.heading]
		if !ok {
			t.Errorf("docs/json.md has no heading ## `%s` (%T)", d.heading, d.value)
			continue
		}
		delete(docs, d.heading)
		have := map[string]docKey{}
		for _, k := range documented {
			if _, dup := have[k.path]; dup {
				t.Errorf("%s: key %s documented twice", d.heading, k.path)
			}
			have[k.path] = k
		}
		for _, k := range keys {
			doc, ok := have[k.path]
			opt := ""
			if k.optional {
				opt = " (optional)"
			}
			switch {
			case !ok:
				t.Errorf("%s: key %s (%T) is not documented; add | `%s` | %s%s | ... |", d.heading, k.path, d.value, k.path, k.typ, opt)
			case doc.typ != k.typ:
				t.Errorf("%s: key %s is a JSON %s, documented as %s", d.heading, k.path, k.typ, doc.typ)
			case doc.optional != k.optional:
				t.Errorf("%s: key %s: omitted when empty is %v, documented (optional) is %v", d.heading, k.path, k.optional, doc.optional)
			}
			delete(have, k.path)
		}
		var extra []string
		for p := range have {
			extra = append(extra, p)
		}
		sort.Strings(extra)
		for _, p := range extra {
			t.Errorf("%s: documented key %s is not in %T", d.heading, p, d.value)
		}
	}
	for h := range docs {
		t.Errorf("docs/json.md: heading ## `%s` names no document of package wire (see documents in %s)", h, "documented_test.go")
	}
	for _, name := range structTypes(t) {
		if !seen[name] {
			t.Errorf("struct %s belongs to no document: add its document to documents and docs/json.md", name)
		}
	}
}

// structTypes lists the struct types the package's files declare.
func structTypes(t *testing.T) []string {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, decl := range f.Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.TYPE {
					continue
				}
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					if _, ok := ts.Type.(*ast.StructType); ok {
						names = append(names, ts.Name.Name)
					}
				}
			}
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal(fmt.Errorf("no struct types found in package wire"))
	}
	return names
}
