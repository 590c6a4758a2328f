package profile

import (
	"testing"
)

func rf(label string, line int) Frame {
	return Frame{Kind: KindRuby, Label: label, Path: "a.rb", Line: line}
}

func TestFunctionsCountRecursionOnce(t *testing.T) {
	p := NewProfile(100)
	main, rec, leaf := rf("<main>", 1), rf("rec", 5), Frame{Kind: KindCFunc, Label: "Integer#+"}
	p.Add([]Frame{main, rec, rf("rec", 6), rec}, 3) // rec recursing, at two lines
	p.Add([]Frame{main, rec, leaf}, 1)
	p.Add([]Frame{{Kind: KindThread, Label: "thread main"}, main}, 2)
	if p.Samples != 6 || len(p.Stacks) != 3 {
		t.Fatalf("samples %d stacks %d", p.Samples, len(p.Stacks))
	}
	got := map[string]FunctionStat{}
	for _, s := range p.Functions() {
		got[s.Frame.Name(false)] = s
	}
	check := func(name string, self, total int) {
		t.Helper()
		if s := got[name]; s.Self != self || s.Total != total {
			t.Errorf("%s: self %d total %d, want %d %d", name, s.Self, s.Total, self, total)
		}
	}
	check("rec (a.rb)", 3, 4)
	check("Integer#+ (cfunc)", 1, 1)
	check("<main> (a.rb)", 2, 6)
	if _, ok := got["thread main"]; ok {
		t.Error("a synthetic thread root was counted as a function")
	}
	fs := p.Functions()
	if fs[0].Frame.Label != "rec" {
		t.Errorf("first function %q, want the one with most self samples", fs[0].Frame.Label)
	}

	q := NewProfile(100)
	q.Merge(p)
	q.Merge(p)
	if q.Samples != 12 || len(q.Stacks) != 3 {
		t.Errorf("merged: samples %d stacks %d", q.Samples, len(q.Stacks))
	}
}

func TestFrameName(t *testing.T) {
	for _, tc := range []struct {
		f     Frame
		lines bool
		want  string
	}{
		{rf("foo", 3), true, "foo (a.rb:3)"},
		{rf("foo", 3), false, "foo (a.rb)"},
		{Frame{Kind: KindCFunc, Label: "Kernel#sleep"}, true, "Kernel#sleep (cfunc)"},
		{Frame{Kind: KindProcess, Label: "pid 7"}, true, "pid 7"},
	} {
		if got := tc.f.Name(tc.lines); got != tc.want {
			t.Errorf("%+v.Name(%v) = %q, want %q", tc.f, tc.lines, got, tc.want)
		}
	}
}

// TestPrefixShares: each stack prefix's share is that of the samples
// whose stacks begin with it, by line or by function.
func TestPrefixShares(t *testing.T) {
	f := func(label string, line int) Frame {
		return Frame{Kind: KindRuby, Label: label, Path: "a.rb", Line: line}
	}
	p := NewProfile(100)
	p.Add([]Frame{f("main", 1), f("a", 1)}, 1)
	p.Add([]Frame{f("main", 1), f("a", 2)}, 2)
	p.Add([]Frame{f("main", 2)}, 1)
	main1 := PrefixKey("", f("main", 1).Name(true))
	byLine, byFunction := p.PrefixShares(true), p.PrefixShares(false)
	if len(byLine) != 4 || byLine[main1] != 75 || byLine[PrefixKey(main1, f("a", 2).Name(true))] != 50 {
		t.Errorf("by line: %v", byLine)
	}
	main := PrefixKey("", f("main", 0).Name(false))
	if len(byFunction) != 2 || byFunction[main] != 100 || byFunction[PrefixKey(main, f("a", 0).Name(false))] != 75 {
		t.Errorf("by function: %v", byFunction)
	}
}
