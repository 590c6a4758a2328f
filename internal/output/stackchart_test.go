package output

import (
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
)

// chartBox is a box of a stack chart SVG as its attributes give it.
type chartBox struct {
	tid, first, count, depth int
	fn, title                string
}

// readChart parses a stack chart: its boxes, track by track, and the
// subtitle.
func readChart(t *testing.T, svg []byte) ([]chartBox, string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var boxes []chartBox
	var subtitle, in string
	tid := 0
	attr := func(e xml.StartElement, name string) string {
		for _, a := range e.Attr {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	num := func(e xml.StartElement, name string) int { n, _ := strconv.Atoi(attr(e, name)); return n }
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
			in = x.Name.Local
			switch {
			case x.Name.Local == "g" && attr(x, "class") == "track":
				tid = num(x, "data-tid")
			case x.Name.Local == "g" && attr(x, "class") == "f":
				boxes = append(boxes, chartBox{tid: tid, first: num(x, "data-i"), count: num(x, "data-n"), depth: num(x, "data-d"), fn: attr(x, "data-fn")})
			case x.Name.Local == "text" && attr(x, "id") == "subtitle":
				in = "subtitle"
			}
		case xml.CharData:
			if in == "title" && len(boxes) > 0 {
				boxes[len(boxes)-1].title += string(x)
			} else if in == "subtitle" {
				subtitle += string(x)
			}
		case xml.EndElement:
			in = ""
		}
	}
	return boxes, subtitle
}

func chartSample() *profile.Profile {
	p := profile.NewProfile(100)
	p.KeepTimeline()
	main := profile.Frame{Kind: profile.KindRuby, Label: "<main>", Path: "app.rb", Line: 9}
	work := profile.Frame{Kind: profile.KindRuby, Label: "work", Path: "app.rb", Line: 3}
	work4 := work
	work4.Line = 4
	odd := profile.Frame{Kind: profile.KindRuby, Label: "a;b <&> \"c\"", Path: "x.rb", Line: 1}
	sleep := profile.Frame{Kind: profile.KindCFunc, Label: "Kernel#sleep"}
	stacks := [][]profile.Frame{{main, work}, {main, work4}, {main, work}, {main, odd}, {main, sleep}, {main, sleep}}
	for i, st := range stacks {
		p.AddSample(st, p.Start.Add(time.Duration(i)*10*time.Millisecond), 1, 11, "main")
		p.AddSample(st[:1], p.Start.Add(time.Duration(i)*10*time.Millisecond+time.Millisecond), 1, 12, "worker <1>")
	}
	p.Duration = 60 * time.Millisecond
	return p
}

// TestStackChart: the chart is XML; its boxes, by their attributes, give
// back each thread's samples in time order; a box's title has its lines
// and how long it lasted.
func TestStackChart(t *testing.T) {
	p := chartSample()
	var b bytes.Buffer
	if err := StackChart(&b, p, Options{Title: "t <1>"}); err != nil {
		t.Fatal(err)
	}
	boxes, subtitle := readChart(t, b.Bytes())
	if !strings.HasPrefix(subtitle, "12 samples, threads: 2, from 0.000 to 0.061 s at 100 Hz; 0 boxes") {
		t.Errorf("subtitle %q", subtitle)
	}
	got := map[int]map[[2]int]string{} // tid -> sample, depth -> function
	for _, bx := range boxes {
		if got[bx.tid] == nil {
			got[bx.tid] = map[[2]int]string{}
		}
		for k := bx.first; k < bx.first+bx.count; k++ {
			got[bx.tid][[2]int{k, bx.depth}] = bx.fn
		}
	}
	for tid, want := range map[int][]string{11: {"work", "work", "work", "a;b", "Kernel#sleep", "Kernel#sleep"}, 12: {"", "", "", "", "", ""}} {
		for k, fn := range want {
			if !strings.HasPrefix(got[tid][[2]int{k, 0}], "<main> (app.rb)") || !strings.HasPrefix(got[tid][[2]int{k, 1}], fn) {
				t.Errorf("thread %d, sample %d: %q, %q; want <main>, %q", tid, k, got[tid][[2]int{k, 0}], got[tid][[2]int{k, 1}], fn)
			}
		}
	}
	titles := ""
	for _, bx := range boxes {
		titles += bx.title + "\n"
	}
	for _, want := range []string{"<main> (app.rb:9) (60.0 ms, 6 samples, 0.000–0.060 s)", "work (app.rb:3-4) (30.0 ms, 3 samples, 0.000–0.030 s)",
		`a;b <&> "c" (x.rb:1) (10.0 ms, 1 samples, 0.030–0.040 s)`, "Kernel#sleep (cfunc) (20.0 ms, 2 samples, 0.040–0.060 s)"} {
		if !strings.Contains(titles, want) {
			t.Errorf("no box titled %q in:\n%s", want, titles)
		}
	}
	b.Reset()
	if err := StackChart(&b, p, Options{Lines: true}); err != nil {
		t.Fatal(err)
	}
	if boxes, _ := readChart(t, b.Bytes()); len(boxes) != 2+5 {
		t.Errorf("by line: %d boxes, want 7", len(boxes))
	}
}

// TestStackChartWindow: a window draws its time only, and a recording long
// enough leaves out the boxes too narrow to see, saying how many.
func TestStackChartWindow(t *testing.T) {
	p := profile.NewProfile(100)
	p.KeepTimeline()
	for i := 0; i < 20_000; i++ {
		f := profile.Frame{Kind: profile.KindRuby, Label: "f" + strconv.Itoa(i%2), Path: "a.rb", Line: 1}
		p.AddSample([]profile.Frame{{Kind: profile.KindRuby, Label: "main", Path: "a.rb"}, f}, p.Start.Add(time.Duration(i)*10*time.Millisecond), 1, 1, "main")
	}
	var b bytes.Buffer
	if err := StackChart(&b, p, Options{}); err != nil {
		t.Fatal(err)
	}
	boxes, subtitle := readChart(t, b.Bytes())
	if len(boxes) != 1 || !strings.Contains(subtitle, "; 20000 boxes narrower than 0.5 px left out") {
		t.Errorf("200 s: %d boxes, subtitle %q; want main alone", len(boxes), subtitle)
	}
	b.Reset()
	q, _ := p.Apply([]profile.Transform{{Op: "time", From: time.Second, To: 2 * time.Second}})
	if err := StackChart(&b, q, Options{From: time.Second, To: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if boxes, subtitle := readChart(t, b.Bytes()); len(boxes) != 101 || !strings.Contains(subtitle, "100 samples, threads: 1, from 1.000 to 2.000 s") {
		t.Errorf("1 s of it: %d boxes, subtitle %q", len(boxes), subtitle)
	}
	if err := StackChart(&b, profile.NewProfile(100), Options{}); err == nil {
		t.Errorf("a stack chart of no timeline")
	}
}

// TestStackChartBaseline: against another recording, each box is on the
// colour of the change of its function's share of the samples, whatever
// its line, and its title gives both shares and the change.
func TestStackChartBaseline(t *testing.T) {
	p := chartSample() // 12 samples: work in 3, Kernel#sleep in 2
	base := profile.NewProfile(100)
	main := profile.Frame{Kind: profile.KindRuby, Label: "<main>", Path: "app.rb", Line: 9}
	work := profile.Frame{Kind: profile.KindRuby, Label: "work", Path: "app.rb", Line: 7}
	base.Add([]profile.Frame{main, work}, 3)
	base.Add([]profile.Frame{main}, 1)
	var b bytes.Buffer
	if err := StackChart(&b, p, Options{Baseline: base}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`data-fn="work (app.rb)" data-from="0.000000" data-to="0.030000" data-before="75" data-after="25" data-change="-50"><title>work (app.rb:3-4) (30.0 ms, 3 samples, 0.000–0.030 s; in 25.00% of the samples, 75.00% before: -50.00 points)</title><rect x="10.00" y="110" width="580.33" height="15" fill="` + ChangeColor(-50) + `"`,
		`data-before="0" data-after="` + strconv.FormatFloat(Pct(2, 12), 'g', -1, 64) + `"`,
		`data-fn="&lt;main&gt; (app.rb)" data-from="0.000000" data-to="0.060000" data-before="100" data-after="100" data-change="0"`,
		"against a recording of 4 (red: more, blue: less)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the chart against another recording lacks %q:\n%s", want, b.String())
		}
	}
	if boxes, _ := readChart(t, b.Bytes()); len(boxes) != 2+3 {
		t.Errorf("against another recording: %d boxes, want 5", len(boxes))
	}
}
