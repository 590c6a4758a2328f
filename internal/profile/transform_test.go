package profile

import (
	"testing"
	"time"
)

func TestApply(t *testing.T) {
	f := func(label string) Frame { return Frame{Kind: KindRuby, Label: label, Path: "a.rb"} }
	p := NewProfile(100)
	p.Add([]Frame{f("main"), f("a"), f("leaf")}, 5)
	p.Add([]Frame{f("main"), f("b"), f("a"), f("leaf")}, 3)
	p.Add([]Frame{f("main"), f("b"), f("c")}, 2)
	p.Duration = time.Second
	name := func(l string) string { return f(l).Name(false) }
	for _, tc := range []struct {
		ts      []Transform
		samples int
		stacks  int
		root    string
	}{
		{nil, 10, 3, name("main")},
		{[]Transform{{"focus", name("a")}}, 8, 1, name("a")},
		{[]Transform{{"drop", name("b")}}, 5, 1, name("main")},
		{[]Transform{{"merge", name("b")}}, 10, 2, name("main")}, // main;a;leaf gets 8
		{[]Transform{{"focus", name("b")}, {"drop", name("c")}}, 3, 1, name("b")},
		{[]Transform{{"focus", name("nothing")}}, 0, 0, ""},
	} {
		q := p.Apply(tc.ts)
		root := ""
		if len(q.Stacks) > 0 {
			root = q.Frames[q.Stacks[0].Frames[0]].Name(false)
		}
		if q.Samples != tc.samples || len(q.Stacks) != tc.stacks || root != tc.root || q.Duration != p.Duration {
			t.Errorf("%v: %d samples in %d stacks from %q, want %d in %d from %q", tc.ts, q.Samples, len(q.Stacks), root, tc.samples, tc.stacks, tc.root)
		}
	}
	if p.Samples != 10 || len(p.Stacks) != 3 {
		t.Errorf("Apply changed its profile")
	}
	if _, err := ParseTransforms("focus:x\nzoom:y"); err == nil {
		t.Errorf("zoom accepted")
	}
	if ts, err := ParseTransforms("focus:Foo#bar (a.rb)\ndrop:x:y"); err != nil || len(ts) != 2 || ts[1].Function != "x:y" {
		t.Errorf("ParseTransforms: %v %v", ts, err)
	}
}
