package heap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// Lines as Ruby 3.3's ObjectSpace.dump_all writes them (shortened).
const sampleDump = `{"type":"ROOT", "root":"vm", "references":["0x7f3fa78700a8", "0x7f3fa7870288"]}
{"type":"ROOT", "root":"global_tbl", "references":["0x7f3f8c73df48"]}
{"address":"0x7f3fa78700a8", "type":"CLASS", "shape_id":2, "slot_size":160, "class":"0x7f3fa78701e8", "variation_count":0, "superclass":"0x7f3fa787fc88", "real_class_name":"Module", "singleton":true, "references":["0x7f3fa7870288"], "memsize":384, "flags":{"wb_protected":true, "old":true, "uncollectible":true, "marked":true}}
{"address":"0x7f3fa78701e8", "type":"CLASS", "class":"0x7f3fa78701e8", "name":"Class", "memsize":200}
{"address":"0x7f3fa7870288", "type":"CLASS", "shape_id":2, "slot_size":160, "class":"0x7f3fa78701e8", "variation_count":0, "superclass":"0x7f3fa787fd28", "name":"String", "references":["0x7f3fa787fd28"], "memsize":1240, "flags":{"wb_protected":true, "old":true, "uncollectible":true, "marked":true}}

{"address":"0x7f3f8c73df48", "type":"STRING", "shape_id":0, "slot_size":40, "class":"0x7f3fa7870288", "embedded":true, "bytesize":11, "value":"h\u00e9llo \"w\"\n", "encoding":"UTF-8", "coderange":"7bit", "file":"t.rb", "line":3, "generation":10, "memsize":40, "flags":{"wb_protected":true}}
{"address":"0x7f3fa78f0028", "type":"IMEMO", "shape_id":0, "slot_size":40, "imemo_type":"ment", "references":["0x7f3fa7870288", "0x7f3fa7870288"], "memsize":48}
{"address":"0x7f3fa6400000", "type":"SHAPE", "id":0, "depth":1, "shape_type":"ROOT", "edges":2, "memsize":128}
{"address":"0x7f3fa78f0050", "type":"OBJECT", "class":"0x7f3fa78700a8", "ivars":2, "memsize":40}
`

func readAll(t *testing.T, src, name string) ([]Record, error) {
	t.Helper()
	r := NewReader(strings.NewReader(src), name)
	var out []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		c := *rec
		c.References = slices.Clone(rec.References)
		c.Value = slices.Clone(rec.Value)
		out = append(out, c)
	}
}

func TestReaderRecords(t *testing.T) {
	recs, err := readAll(t, sampleDump, "dump.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 9 {
		t.Fatalf("%d records, want 9", len(recs))
	}
	if r := recs[0]; r.Type != "ROOT" || r.Root != "vm" || !slices.Equal(r.References, []uint64{0x7f3fa78700a8, 0x7f3fa7870288}) {
		t.Errorf("root: %+v", r)
	}
	if r := recs[2]; r.Address != 0x7f3fa78700a8 || r.Type != "CLASS" || r.RealClassName != "Module" || r.Memsize != 384 || r.Class != 0x7f3fa78701e8 {
		t.Errorf("singleton class: %+v", r)
	}
	s := recs[5]
	if s.Type != "STRING" || string(s.Value) != "h\u00e9llo \"w\"\n" || !s.HasValue || s.Bytesize != 11 ||
		s.File != "t.rb" || s.Line != 3 || s.Generation != 10 || s.Memsize != 40 {
		t.Errorf("string: %+v", s)
	}
	if r := recs[6]; r.ImemoType != "ment" || len(r.References) != 2 || r.Class != 0 {
		t.Errorf("imemo: %+v", r)
	}

	g, err := Load(strings.NewReader(sampleDump), "dump.json")
	if err != nil {
		t.Fatal(err)
	}
	if g.Len() != 7 || len(g.Roots) != 2 {
		t.Fatalf("%d objects, %d roots", g.Len(), len(g.Roots))
	}
	i, ok := g.Lookup(0x7f3f8c73df48)
	if !ok || g.ClassName(i) != "String" || g.Type(i) != "STRING" || g.Describe(i) != `"héllo \"w\"\n"` {
		t.Errorf("string %d %v: class %q type %q desc %s", i, ok, g.ClassName(i), g.Type(i), g.Describe(i))
	}
	if site, ok := g.Site(i); !ok || site.String() != "t.rb:3" {
		t.Errorf("site %v %v", site, ok)
	}
	obj, _ := g.Lookup(0x7f3fa78f0050)
	if g.ClassName(obj) != "Module" || g.Describe(obj) != "2 ivars" { // an instance of a singleton class: its real class
		t.Errorf("instance of a singleton class: %q %q", g.ClassName(obj), g.Describe(obj))
	}
	if g.Dangling != 1 { // the String class's superclass is not in this excerpt
		t.Errorf("%d dangling references, want 1", g.Dangling)
	}
}

func TestReaderErrors(t *testing.T) {
	good := `{"address":"0x10", "type":"OBJECT", "memsize":40}` + "\n"
	for _, tc := range []struct{ line, want string }{
		{`{"address":"0x10", "type":"OBJECT"`, `dump.json line 2: invalid JSON: unexpected end of JSON input`},
		{`{"address":"0x10" "type":"OBJECT"}`, `dump.json line 2: invalid JSON: invalid character '"' after object key:value pair`},
		{`{"address":0x10}`, `dump.json line 2: invalid JSON: invalid character 'x' after object key:value pair`},
		{`{"type":"OBJECT", "memsize":40}`, `dump.json line 2: not dump_all JSON: no address`},
		{`{"address":"0x10"}`, `dump.json line 2: not dump_all JSON: no type`},
		{`[1, 2]`, `dump.json line 2: not dump_all JSON: not an object`},
		{`{"address":"0xzz", "type":"OBJECT"}`, `dump.json line 2: not dump_all JSON: bad address "0xzz"`},
		{`{"address":16, "type":"OBJECT"}`, `dump.json line 2: not dump_all JSON: address is not a string`},
		{`{"address":"0x20", "type":"OBJECT", "references":["0x10", "x"]}`, `dump.json line 2: not dump_all JSON: bad reference "x"`},
		{`{"address":"0x20", "type":"OBJECT", "references":"0x10"}`, `dump.json line 2: not dump_all JSON: references is not a list`},
		{`{"address":"0x20", "type":"OBJECT", "memsize":-1}`, `dump.json line 2: not dump_all JSON: memsize is not a non-negative integer: -1`},
		{`{"address":"0x20", "type":"OBJECT", "memsize":"40"}`, `dump.json line 2: not dump_all JSON: memsize is not a number`},
		{`{"address":"0x20", "type":"OBJECT", "memsize":"40", "x":tru}`, `dump.json line 2: invalid JSON: invalid character '}' in literal true (expecting 'e')`},
		{"\x00", `dump.json line 2: invalid JSON: invalid character '\x00' looking for beginning of value`},
	} {
		_, err := readAll(t, good+tc.line+"\n"+good, "dump.json")
		var he *Error
		if err == nil || err.Error() != tc.want || !errors.As(err, &he) || he.Line != 2 {
			t.Errorf("%s:\n got %v\nwant %s", tc.line, err, tc.want)
		}
	}
	// Duplicate addresses, blank and CRLF lines, a last line without a newline.
	_, err := Load(strings.NewReader(good+"\r\n  \n"+good), "d.json")
	if err == nil || err.Error() != "d.json: not dump_all JSON: address 0x10 appears twice" {
		t.Errorf("duplicate: %v", err)
	}
	g, err := Load(strings.NewReader("\n"+strings.TrimSuffix(good, "\n")+"\r\n"+`{"address":"0x18", "type":"OBJECT"}`), "d.json")
	if err != nil || g.Len() != 2 {
		t.Errorf("%v, %d objects", err, g.Len())
	}
}

func TestReaderLongLine(t *testing.T) {
	big := strings.Repeat("ab\\u00e9", 1<<20) // 8 MiB of JSON, longer than the read buffer
	src := `{"address":"0x10", "type":"STRING", "value":"` + big + `", "memsize":3145768}` + "\n" +
		`{"address":"0x18", "type":"ARRAY", "length":1, "references":["0x10"]}`
	g, err := Load(strings.NewReader(src), "big.json")
	if err != nil {
		t.Fatal(err)
	}
	if g.Len() != 2 || g.Memsize(0) != 3145768 || !strings.HasPrefix(g.Describe(0), `"abéab`) || !strings.HasSuffix(g.Describe(0), `..."`) {
		t.Errorf("%d objects, memsize %d, %s", g.Len(), g.Memsize(0), g.Describe(0))
	}
	if !slices.Equal(g.Refs(1), []uint32{0}) {
		t.Errorf("refs %v", g.Refs(1))
	}
}

// stdRecord decodes a line with encoding/json, keys matched exactly.
func stdRecord(line []byte) (*Record, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	rec := &Record{}
	var firstErr error
	get := func(key string, v any) {
		raw, ok := m[key]
		if !ok || string(raw) == "null" {
			return
		}
		if err := json.Unmarshal(raw, v); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %v", key, err)
		}
	}
	addr := func(key string) uint64 {
		var s string
		get(key, &s)
		if _, ok := m[key]; !ok || s == "" {
			return 0
		}
		a, err := parseAddress([]byte(s))
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return a
	}
	rec.Address, rec.Class = addr("address"), addr("class")
	get("type", &rec.Type)
	get("root", &rec.Root)
	get("name", &rec.Name)
	get("real_class_name", &rec.RealClassName)
	get("imemo_type", &rec.ImemoType)
	get("struct", &rec.Struct)
	get("file", &rec.File)
	var value *string
	get("value", &value)
	if value != nil {
		rec.Value, rec.HasValue = []byte(*value), true
	}
	for key, p := range map[string]*uint64{"memsize": &rec.Memsize, "bytesize": &rec.Bytesize, "length": &rec.Length,
		"size": &rec.Size, "ivars": &rec.Ivars, "line": &rec.Line, "generation": &rec.Generation} {
		get(key, p)
	}
	var refs []string
	get("references", &refs)
	for _, s := range refs {
		a, err := parseAddress([]byte(s))
		if err != nil && firstErr == nil {
			firstErr = err
		}
		rec.References = append(rec.References, a)
	}
	return rec, firstErr
}

// FuzzReader checks the hand-written parser against encoding/json: a line
// encoding/json rejects is an "invalid JSON" error, and a line the parser
// accepts decodes as encoding/json decodes it.
func FuzzReader(f *testing.F) {
	for _, line := range strings.Split(sampleDump, "\n") {
		f.Add([]byte(line))
	}
	f.Add([]byte(`{"address":"0x10", "type":"STRING", "value":"\ud83d\ude00 \ud800 \udc00x \u0000", "name":null}`))
	f.Add([]byte(`{"address":"0x10", "type":"OBJECT", "x":[1, -0.5e+3, {"a":[true, false, null]}], "memsize":1e2}`))
	f.Add([]byte("{\"address\":\"0x10\", \"type\":\"STRING\", \"value\":\"\xff\xfe ok\"}"))
	f.Add([]byte(`{"addr\u0065ss":"0x10", "type":"OBJECT", "type":"ARRAY", "references":["0x8"], "references":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The whole input as a dump: no panic, errors name a line.
		r := NewReader(bytes.NewReader(data), "f.json")
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				var he *Error
				if !errors.As(err, &he) || he.Line < 1 || he.Line > bytes.Count(data, []byte("\n"))+1 {
					t.Fatalf("error %v", err)
				}
				break
			}
		}
		_, _ = Load(bytes.NewReader(data), "f.json")

		// Each line against encoding/json.
		for _, line := range bytes.Split(data, []byte("\n")) {
			if blank(line) {
				continue
			}
			rec, err := NewReader(bytes.NewReader(line), "f.json").Next()
			valid := json.Valid(line)
			if !valid {
				if err == nil || !strings.Contains(err.Error(), "invalid JSON: ") {
					t.Fatalf("%q: encoding/json rejects it, parser says %v", line, err)
				}
				continue
			}
			if err != nil {
				if !strings.Contains(err.Error(), "not dump_all JSON: ") {
					t.Fatalf("%q is valid JSON, parser says %v", line, err)
				}
				continue
			}
			want, werr := stdRecord(line)
			if werr != nil {
				t.Fatalf("%q: parser accepts it, encoding/json says %v", line, werr)
			}
			got := *rec
			if len(got.References) == 0 {
				got.References = nil
			}
			if !got.HasValue {
				got.Value = nil
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", *want) {
				t.Fatalf("%q:\nparser        %+v\nencoding/json %+v", line, got, *want)
			}
		}
	})
}

// TestReaderLineBound: input with no line end (/dev/zero) is refused once
// a line passes MaxLine, instead of growing without bound.
func TestReaderLineBound(t *testing.T) {
	r := NewReader(io.LimitReader(zeros{}, MaxLine+4<<20), "zeros")
	_, err := r.Next()
	if err == nil || !strings.Contains(err.Error(), "not a heap dump") {
		t.Errorf("a line of %d zero bytes: %v, want a refusal", MaxLine+4<<20, err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// oursDump is sampleDump as rbscope writes it: "dumped_by" in its first
// line, its EndRoot line last.
func oursDump() string {
	lines := strings.Split(strings.TrimSuffix(sampleDump, "\n"), "\n")
	lines[0] = strings.TrimSuffix(lines[0], "}") + DumpedByField + "}"
	n := 0
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return strings.Join(lines, "\n") + "\n" + string(AppendEndLine(nil, uint64(n)))
}

// TestReaderTellsCutDumps: a dump of rbscope's own reads whole, without
// its end line among the records; cut at a line boundary, short of a line
// in the middle, or followed by more lines, it is an *Error that says so;
// cut mid-line it is invalid JSON. Ruby's own dump cut at a line boundary
// cannot be told from a whole one.
func TestReaderTellsCutDumps(t *testing.T) {
	whole := oursDump()
	recs, err := readAll(t, whole, "ours.json")
	if err != nil || len(recs) != 9 {
		t.Fatalf("whole dump: %d records, %v; want 9", len(recs), err)
	}
	for _, r := range recs {
		if r.Root == EndRoot {
			t.Errorf("the end line is returned as a record: %+v", r)
		}
	}
	lines := strings.SplitAfter(whole, "\n")
	atBoundary := strings.Join(lines[:6], "")
	midLine := whole[:len(atBoundary)+20]
	dropped := strings.Join(append(slices.Clone(lines[:3]), lines[4:]...), "")
	twice := whole + whole
	for _, c := range []struct {
		name, src, want string
	}{
		{"at a line boundary", atBoundary, "cut short after 5 lines"},
		{"mid-line", midLine, "invalid JSON"},
		{"a line dropped", dropped, "cut: the dump's last line says 9 lines came before it, and 8 did"},
		{"two dumps", twice, "a line after the ROOT line"},
	} {
		_, err := readAll(t, c.src, "ours.json")
		var he *Error
		if !errors.As(err, &he) || !strings.Contains(he.Msg, c.want) {
			t.Errorf("%s: %v, want an *Error saying %q", c.name, err, c.want)
		}
	}
	if _, err := Load(strings.NewReader(atBoundary), "ours.json"); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("Load of a cut dump: %v", err)
	}
	theirs := strings.Join(strings.SplitAfter(sampleDump, "\n")[:6], "")
	if _, err := readAll(t, theirs, "dump_all.json"); err != nil {
		t.Errorf("Ruby's dump cut at a line boundary: %v", err)
	}
}
