package profile

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// randomTimeline is a profile of n samples of three threads taken in
// turns, with stacks that share their roots, some lines apart, and a
// pause now and then.
func randomTimeline(n int) *Profile {
	rng := rand.New(rand.NewPCG(3, 4))
	p := NewProfile(100)
	p.KeepTimeline()
	fn := func(k, line int) Frame {
		return Frame{Kind: KindRuby, Label: fmt.Sprintf("M#f%d", k), Path: "a.rb", Line: line}
	}
	at := time.Duration(0)
	var prev []Frame
	for i := 0; i < n; i++ {
		at += 10 * time.Millisecond
		if rng.IntN(20) == 0 {
			at += time.Second // a pause: no sample of any thread
		}
		// Keep a prefix of the previous stack, then new frames.
		st := slices.Clone(prev[:rng.IntN(len(prev)+1)])
		for len(st) < 1+rng.IntN(8) {
			st = append(st, fn(rng.IntN(6), 1+rng.IntN(2)))
		}
		prev = st
		tid := 1 + i%3
		p.AddSample(st, p.Start.Add(at), 7, tid, fmt.Sprint("t", tid))
	}
	return p
}

// TestChartReproducesTimeline: the boxes of each track, read left to
// right at each depth, give back the thread's samples in time order, frame
// for frame; a box lies within its parent, and ends where its next sample
// begins unless a pause follows it.
func TestChartReproducesTimeline(t *testing.T) {
	p := randomTimeline(3000)
	for _, lines := range []bool{true, false} {
		tracks := p.Chart(lines, 0)
		if len(tracks) != 3 {
			t.Fatalf("%d tracks, want 3", len(tracks))
		}
		total := 0
		for _, tr := range tracks {
			total += len(tr.Samples)
			got := make([][]string, len(tr.Samples))
			for _, b := range tr.Boxes {
				for k := b.First; k < b.First+b.Count; k++ {
					for len(got[k]) <= b.Depth {
						got[k] = append(got[k], "")
					}
					if got[k][b.Depth] != "" {
						t.Fatalf("lines %v: sample %d, depth %d in two boxes", lines, k, b.Depth)
					}
					got[k][b.Depth] = p.Frames[b.Frame].Name(lines)
				}
				if b.Start != p.Timeline[tr.Samples[b.First]].Time || b.End <= b.Start {
					t.Errorf("box %+v does not start at its first sample", b)
				}
			}
			for k, si := range tr.Samples {
				s := p.Timeline[si]
				if s.TID != tr.TID || k > 0 && s.Time < p.Timeline[tr.Samples[k-1]].Time {
					t.Fatalf("track %d: sample %d out of place", tr.TID, k)
				}
				var want []string
				for _, f := range p.StackFrames(s.Stack) {
					want = append(want, f.Name(lines))
				}
				if !slices.Equal(got[k], want) {
					t.Fatalf("lines %v, track %d, sample %d: boxes say %q, the timeline %q", lines, tr.TID, k, got[k], want)
				}
			}
			checkNesting(t, tr)
		}
		if total != p.Samples {
			t.Errorf("tracks hold %d samples of %d", total, p.Samples)
		}
	}
}

// checkNesting checks that every box below the root lies within a box one
// level up.
func checkNesting(t *testing.T, tr Track) {
	t.Helper()
	parent := map[[2]int]Box{} // depth, sample -> box
	for _, b := range tr.Boxes {
		for k := b.First; k < b.First+b.Count; k++ {
			parent[[2]int{b.Depth, k}] = b
		}
	}
	for _, b := range tr.Boxes {
		if b.Depth == 0 {
			continue
		}
		up, ok := parent[[2]int{b.Depth - 1, b.First}]
		if !ok || up.First > b.First || up.First+up.Count < b.First+b.Count {
			t.Fatalf("box %+v is not within %+v", b, up)
		}
	}
}

// TestChartRuns: the samples of a run are one box, as long as the stack
// down to it stays and no pause breaks it; boxes shorter than the minimum
// are left out and counted.
func TestChartRuns(t *testing.T) {
	f := func(label string, line int) Frame {
		return Frame{Kind: KindRuby, Label: label, Path: "a.rb", Line: line}
	}
	p := NewProfile(100)
	p.KeepTimeline()
	add := func(ms int, frames ...Frame) {
		p.AddSample(frames, p.Start.Add(time.Duration(ms)*time.Millisecond), 1, 1, "main")
	}
	add(0, f("main", 1), f("a", 1))
	add(10, f("main", 1), f("a", 2))
	add(21, f("main", 2), f("b", 1))  // a little late: no gap
	add(500, f("main", 2), f("b", 1)) // after a pause
	tracks := p.Chart(false, 0)
	type box struct {
		name             string
		first, count     int
		startMs, endMs   int
		minLine, maxLine int
	}
	var got []box
	for _, b := range tracks[0].Boxes {
		got = append(got, box{p.Frames[b.Frame].Label, b.First, b.Count, int(b.Start / time.Millisecond), int(b.End / time.Millisecond), b.MinLine, b.MaxLine})
	}
	want := []box{
		{"a", 0, 2, 0, 21, 1, 2},
		{"b", 2, 1, 21, 31, 1, 1},
		{"main", 0, 3, 0, 31, 1, 2},
		{"b", 3, 1, 500, 510, 1, 1},
		{"main", 3, 1, 500, 510, 2, 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("boxes:\n%v\nwant\n%v", got, want)
	}
	if tr := p.Chart(true, 0)[0]; len(tr.Boxes) != 7 {
		t.Errorf("by line: %d boxes, want 7", len(tr.Boxes))
	}
	if tr := p.Chart(false, 15*time.Millisecond)[0]; len(tr.Boxes) != 2 || tr.Small != 3 {
		t.Errorf("15 ms at least: %d boxes, %d left out; want 2 and 3", len(tr.Boxes), tr.Small)
	}
}

// TestApplyKeepsTimeline: focus, drop and merge leave each kept sample in
// the timeline with its new stack, in its place.
func TestApplyKeepsTimeline(t *testing.T) {
	p := randomTimeline(500)
	name := Frame{Kind: KindRuby, Label: "M#f2", Path: "a.rb"}.Name(false)
	for _, op := range []string{"focus", "drop", "merge"} {
		q, err := p.Apply([]Transform{{Op: op, Function: name}})
		if err != nil {
			t.Fatal(err)
		}
		if len(q.Timeline) != q.Samples {
			t.Errorf("%s: %d samples, %d in the timeline", op, q.Samples, len(q.Timeline))
		}
		counts := make([]int, len(q.Stacks))
		for _, s := range q.Timeline {
			counts[s.Stack]++
		}
		for si, st := range q.Stacks {
			if counts[si] != st.Count {
				t.Errorf("%s: stack %d counted %d, in the timeline %d times", op, si, st.Count, counts[si])
			}
		}
	}
}

func TestWindow(t *testing.T) {
	ts, _ := ParseTransforms("time:1-5\nfocus:x\ntime:2-\ntime:0-4")
	if from, to := Window(ts); from != 2*time.Second || to != 4*time.Second {
		t.Errorf("Window: %v-%v, want 2s-4s", from, to)
	}
	if from, to := Window(nil); from != 0 || to != 0 {
		t.Errorf("Window of none: %v-%v", from, to)
	}
}
