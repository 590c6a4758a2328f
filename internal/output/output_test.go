package output

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pprof "github.com/google/pprof/profile"

	"github.com/rbscope/rbscope/internal/profile"
)

func sample() *profile.Profile {
	p := profile.NewProfile(100)
	main := profile.Frame{Kind: profile.KindRuby, Label: "<main>", Path: "app.rb", Line: 9}
	work := profile.Frame{Kind: profile.KindRuby, Label: "work", Path: "app.rb", Line: 3}
	sleep := profile.Frame{Kind: profile.KindCFunc, Label: "Kernel#sleep"}
	odd := profile.Frame{Kind: profile.KindRuby, Label: "a;b <&> \"c\"", Path: "x.rb", Line: 1}
	p.Add([]profile.Frame{main, work}, 7)
	p.Add([]profile.Frame{main, sleep}, 2)
	p.Add([]profile.Frame{main, odd}, 1)
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
	p, err := pprof.Parse(&b)
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

// TestPprofSampleLabels: a stack's labels are its sample's labels.
func TestPprofSampleLabels(t *testing.T) {
	p := sample()
	p.Stacks[0].Labels = []profile.Label{{Key: "endpoint", Value: "IssuesController#show"}, {Key: "job", Value: "SpinJob"}}
	var b bytes.Buffer
	if err := Pprof(&b, p); err != nil {
		t.Fatal(err)
	}
	got, err := pprof.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	labelled := map[string]int64{}
	for _, s := range got.Sample {
		labelled[fmt.Sprint(s.Label)] += s.Value[0]
	}
	want := map[string]int64{"map[endpoint:[IssuesController#show] job:[SpinJob]]": 7, "map[]": 3}
	if fmt.Sprint(labelled) != fmt.Sprint(want) {
		t.Errorf("samples by labels %v, want %v", labelled, want)
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
	for _, f := range formats {
		if err := f.Write(failingWriter{}, sample(), Options{}); err == nil {
			t.Errorf("%s: a failed write was not reported", f.Name)
		}
	}
}

// TestFileMode: an output file (a profile, a heap dump) is its owner's only.
func TestFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("x")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
}

// TestLookup: every format is found by its name, with an extension, and an
// unknown name is refused naming the known ones.
func TestLookup(t *testing.T) {
	for _, name := range Names() {
		f, err := Lookup(name)
		if err != nil || f.Name != name || f.Ext == "" || f.Write == nil {
			t.Errorf("Lookup(%q) = %+v, %v", name, f, err)
		}
	}
	if _, err := Lookup("svgz"); err == nil || !strings.Contains(err.Error(), "flamegraph") {
		t.Errorf("unknown format: %v", err)
	}
}

// TestFunctionTableShared: summary's table is FunctionTable's, and top's
// limits (rows, width, raw newlines) apply.
func TestFunctionTableShared(t *testing.T) {
	var sum, tab bytes.Buffer
	if err := Summary(&sum, sample()); err != nil {
		t.Fatal(err)
	}
	if _, err := FunctionTable(&tab, sample(), TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(sum.String(), "\n\n"+tab.String()) {
		t.Errorf("summary:\n%s\ndoes not end with the table:\n%s", sum.String(), tab.String())
	}
	lines := strings.Split(tab.String(), "\n")
	if !strings.Contains(lines[1], "70.00%") || !strings.HasSuffix(lines[1], "work (app.rb)") {
		t.Errorf("first row %q, want work with 70%%", lines[1])
	}
	tab.Reset()
	n, _ := FunctionTable(&tab, sample(), TableOptions{MaxRows: 1, Width: 20, Newline: "\r\n"})
	if n != 1 || tab.String() != "  self%  total%     \r\n 70.00%  70.00%     \r\n" {
		t.Errorf("limited table (%d rows): %q", n, tab.String())
	}
}

// TestBreakdown: summary and summary-by-line say which share of the
// samples the GC and waiting for the GVL took, from the sampler's frames.
func TestBreakdown(t *testing.T) {
	p := sample() // 10 samples
	main := profile.Frame{Kind: profile.KindRuby, Label: "<main>", Path: "app.rb", Line: 9}
	gc := profile.Frame{Kind: profile.KindGC, Label: profile.LabelGC}
	marking := profile.Frame{Kind: profile.KindGC, Label: profile.LabelMarking}
	wait := profile.Frame{Kind: profile.KindGVL, Label: profile.LabelGVLWait}
	p.Add([]profile.Frame{main, gc, marking}, 6)
	p.Add([]profile.Frame{main, wait}, 4)
	for name, write := range map[string]func(io.Writer, *profile.Profile) error{"summary": Summary, "summary-by-line": SummaryByLine} {
		var b bytes.Buffer
		if err := write(&b, p); err != nil {
			t.Fatal(err)
		}
		if want := "GC 30.0%, waiting for GVL 20.0% of samples\n"; !strings.Contains(b.String(), want) {
			t.Errorf("%s:\n%s\nlacks %q", name, b.String(), want)
		}
		// The GC's frames are rows of their own, without a line.
		if !strings.Contains(b.String(), "30.00%        6        6  "+profile.LabelMarking) || strings.Contains(b.String(), ":0") {
			t.Errorf("%s: no row for %s with 6 samples, or a frame without a line shown with one:\n%s", name, profile.LabelMarking, b.String())
		}
	}
}

// TestCreateSweepsStale: a temporary output left by an rbscope killed
// outright, unwritten for long, is removed when the same output is
// written again; a fresh one (another rbscope writing it now) is kept.
func TestCreateSweepsStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "heap.json")
	stale, fresh := filepath.Join(dir, ".heap.json.tmp-1"), filepath.Join(dir, ".heap.json.tmp-2")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Abort()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary output kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temporary output removed: %v", err)
	}
}

// TestFileDevicesStay: an output path that names a device or a FIFO is
// written to in place: /dev/null stays the device (a rename over it, as
// root, would have replaced it with a regular file), and a named pipe's
// reader gets what was written.
func TestFileDevicesStay(t *testing.T) {
	f, err := Create(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("discarded\n")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(os.DevNull); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("%s after an output written to it: %v (%v)", os.DevNull, st.Mode(), err)
	}

	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- string(b)
	}()
	w, err := Create(fifo)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("through the pipe\n")
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe\n" {
		t.Errorf("the pipe's reader got %q", s)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO after an output written to it: %v (%v)", st.Mode(), err)
	}
}

// TestFlamegraphIcicle: the icicle draws every frame mirrored: the roots
// at the top, each callee below its caller, where the flame graph has
// the roots at the bottom and callees above.
func TestFlamegraphIcicle(t *testing.T) {
	yOf := func(icicle bool) map[int][]float64 {
		var b bytes.Buffer
		if err := Flamegraph(&b, sample(), Options{Icicle: icicle}); err != nil {
			t.Fatal(err)
		}
		ys := map[int][]float64{}
		for _, m := range regexp.MustCompile(`data-d="(\d+)"><title>[^<]*</title><rect x="[^"]*" y="([\d.]+)"`).FindAllStringSubmatch(b.String(), -1) {
			d, _ := strconv.Atoi(m[1])
			y, _ := strconv.ParseFloat(m[2], 64)
			ys[d] = append(ys[d], y)
		}
		return ys
	}
	flame, icicle := yOf(false), yOf(true)
	if len(flame) < 2 || len(flame) != len(icicle) {
		t.Fatalf("depths: flame %v, icicle %v", flame, icicle)
	}
	for d := 1; d < len(flame); d++ {
		if !(flame[d][0] < flame[d-1][0]) || !(icicle[d][0] > icicle[d-1][0]) {
			t.Errorf("depth %d: flame y %v (its caller's %v), icicle y %v (its caller's %v)", d, flame[d], flame[d-1], icicle[d], icicle[d-1])
		}
	}
}

// TestFlamegraphDifferential: against a baseline, a stack that took a
// larger share is red, one that took less is blue, and each frame's title
// says the change in points.
func TestFlamegraphDifferential(t *testing.T) {
	f := func(l string) profile.Frame { return profile.Frame{Kind: profile.KindRuby, Label: l, Path: "a.rb"} }
	before, after := profile.NewProfile(100), profile.NewProfile(100)
	before.Add([]profile.Frame{f("main"), f("grows")}, 20)
	before.Add([]profile.Frame{f("main"), f("shrinks")}, 80)
	after.Add([]profile.Frame{f("main"), f("grows")}, 60)
	after.Add([]profile.Frame{f("main"), f("shrinks")}, 40)
	var b bytes.Buffer
	if err := Flamegraph(&b, after, Options{Baseline: before}); err != nil {
		t.Fatal(err)
	}
	fill := map[string]string{}
	for _, m := range regexp.MustCompile(`<title>(\w+) \(a\.rb\) \(\d+ samples, [\d.]+%, ([+-][\d.]+) points\)</title><rect [^>]*fill="([^"]+)"`).FindAllStringSubmatch(b.String(), -1) {
		fill[m[1]] = m[2] + " " + m[3]
	}
	if fill["grows"] != "+40.00 rgb(255,55,55)" || fill["shrinks"] != "-40.00 rgb(55,55,255)" || fill["main"] != "+0.00 rgb(255,255,255)" {
		t.Errorf("differential frames: %v", fill)
	}
}
