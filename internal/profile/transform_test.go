package profile

import (
	"errors"
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
		{[]Transform{{Op: "focus", Function: name("a")}}, 8, 1, name("a")},
		{[]Transform{{Op: "drop", Function: name("b")}}, 5, 1, name("main")},
		{[]Transform{{Op: "merge", Function: name("b")}}, 10, 2, name("main")}, // main;a;leaf gets 8
		{[]Transform{{Op: "focus", Function: name("b")}, {Op: "drop", Function: name("c")}}, 3, 1, name("b")},
		{[]Transform{{Op: "focus", Function: name("nothing")}}, 0, 0, ""},
	} {
		q, err := p.Apply(tc.ts)
		if err != nil {
			t.Fatal(err)
		}
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
	if _, err := p.Apply([]Transform{{Op: "time"}}); !errors.Is(err, ErrNoTimeline) {
		t.Errorf("a time window without a timeline: %v", err)
	}
	for _, bad := range []string{"time:2-1", "time:x-3", "time:-1-2"} {
		if _, err := ParseTransforms(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if ts, err := ParseTransforms("time:1.5-"); err != nil || ts[0].From != 1500*time.Millisecond || ts[0].To != 0 {
		t.Errorf("time:1.5-: %v %v", ts, err)
	}
	if _, err := ParseTransforms("focus:x\nzoom:y"); err == nil {
		t.Errorf("zoom accepted")
	}
	if ts, err := ParseTransforms("focus:Foo#bar (a.rb)\ndrop:x:y"); err != nil || len(ts) != 2 || ts[1].Function != "x:y" {
		t.Errorf("ParseTransforms: %v %v", ts, err)
	}
}

func TestApplyTimeWindow(t *testing.T) {
	f := func(label string) Frame { return Frame{Kind: KindRuby, Label: label, Path: "a.rb"} }
	p := NewProfile(100)
	p.KeepTimeline()
	for i := 0; i < 10; i++ {
		label := "early"
		if i >= 6 {
			label = "late"
		}
		p.AddSample([]Frame{f("main"), f(label)}, p.Start.Add(time.Duration(i)*100*time.Millisecond), 1, 1, "main")
	}
	for _, tc := range []struct {
		from, to string
		samples  int
	}{{"0", "0.6", 6}, {"0.6", "", 4}, {"0.25", "0.45", 2}} {
		ts, err := ParseTransforms("time:" + tc.from + "-" + tc.to)
		if err != nil {
			t.Fatal(err)
		}
		q, err := p.Apply(ts)
		if err != nil || q.Samples != tc.samples || len(q.Timeline) != tc.samples {
			t.Errorf("time %s-%s: %v samples, timeline %d, err %v; want %d", tc.from, tc.to, q.Samples, len(q.Timeline), err, tc.samples)
		}
	}
	ts, _ := ParseTransforms("time:0.6-\nfocus:" + f("late").Name(false))
	if q, err := p.Apply(ts); err != nil || q.Samples != 4 || q.Frames[q.Stacks[0].Frames[0]].Label != "late" {
		t.Errorf("window then focus: %+v %v", q, err)
	}
}
