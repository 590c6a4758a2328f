package output

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampler"
)

func sample() *sampler.Profile {
	p := sampler.NewProfile(100)
	main := sampler.Frame{Kind: rubyvm.KindRuby, Label: "<main>", Path: "app.rb", Line: 9}
	work := sampler.Frame{Kind: rubyvm.KindRuby, Label: "work", Path: "app.rb", Line: 3}
	sleep := sampler.Frame{Kind: rubyvm.KindCFunc, Label: "Kernel#sleep"}
	odd := sampler.Frame{Kind: rubyvm.KindRuby, Label: "a;b <&> \"c\"", Path: "x.rb", Line: 1}
	p.Add([]sampler.Frame{main, work}, 7)
	p.Add([]sampler.Frame{main, sleep}, 2)
	p.Add([]sampler.Frame{main, odd}, 1)
	return p
}

func TestCollapsedGolden(t *testing.T) {
	var b bytes.Buffer
	if err := Collapsed(&b, sample(), Options{Lines: true}); err != nil {
		t.Fatal(err)
	}
	want := `<main> (app.rb:9);Kernel#sleep (cfunc) 2
<main> (app.rb:9);a:b <&> "c" (x.rb:1) 1
<main> (app.rb:9);work (app.rb:3) 7
`
	if b.String() != want {
		t.Errorf("collapsed:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestPprofRoundTrip(t *testing.T) {
	var b bytes.Buffer
	if err := Pprof(&b, sample()); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, s := range p.Sample {
		total += s.Value[0]
		if leaf := s.Location[0].Line[0]; leaf.Function.Name == "work" && (leaf.Line != 3 || leaf.Function.Filename != "app.rb" || s.Value[0] != 7) {
			t.Errorf("work sample: %+v line %d", s.Value, leaf.Line)
		}
	}
	if total != 10 || p.Period != 10_000_000 {
		t.Errorf("total %d period %d", total, p.Period)
	}
}

func TestFlamegraphIsXMLWithEscapedNames(t *testing.T) {
	var b bytes.Buffer
	if err := Flamegraph(&b, sample(), Options{Lines: true, Title: "t <1>"}); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&b)
	titles := []string{}
	inTitle := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v", err)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			inTitle = x.Name.Local == "title"
		case xml.CharData:
			if inTitle {
				titles = append(titles, string(x))
			}
		case xml.EndElement:
			inTitle = false
		}
	}
	joined := strings.Join(titles, "\n")
	for _, want := range []string{"<main> (app.rb:9) (10 samples, 100.00%)", "work (app.rb:3) (7 samples, 70.00%)", `a;b <&> "c" (x.rb:1) (1 samples, 10.00%)`} {
		if !strings.Contains(joined, want) {
			t.Errorf("no frame titled %q in:\n%s", want, joined)
		}
	}
}

func TestFileAppearsOnlyOnCommit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.svg")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("partial")
	if _, err := os.Stat(path); err == nil {
		t.Fatal("the output exists before Commit")
	}
	f.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("Abort left %v", ents)
	}
	if _, err := Create(filepath.Join(dir, "missing", "out.svg")); err == nil || !strings.Contains(err.Error(), "cannot write") {
		t.Errorf("unwritable path: %v", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestWriteReportsErrors: every format returns a failed write, so a
// half-written output is never committed.
func TestWriteReportsErrors(t *testing.T) {
	for _, format := range Formats {
		if err := Write(failingWriter{}, format, sample(), Options{}); err == nil {
			t.Errorf("%s: a failed write was not reported", format)
		}
	}
}
