package profile

import (
	"cmp"
	"slices"
	"time"
)

// Track is one thread's row of a stack chart (speedscope's "time order",
// the Firefox Profiler's stack chart): its samples in time order and the
// boxes they make.
type Track struct {
	PID, TID int
	Thread   string
	// Samples indexes Profile.Timeline: the thread's samples, in time
	// order.
	Samples []int
	// Boxes are the runs of the thread's samples that share their stack
	// from the root down to a frame, that frame's box; a box's parent is
	// the box one level up that holds it. They come out in the order they
	// end, so a parent follows its children.
	Boxes []Box
	// Small counts the boxes left out for lasting less than the minimum
	// (Chart's shortest), their descendants (shorter still) among them.
	Small int
}

// Box is a run of consecutive samples of a thread whose stacks are alike
// from the root down to depth Depth (0: the root).
type Box struct {
	Depth int
	// Frame is the frame at that depth of the run's first sample (an
	// index into Profile.Frames); with lines, the run's samples are all
	// at that line, else MinLine and MaxLine bound their lines.
	Frame            int
	MinLine, MaxLine int
	// First and Count are the run's samples, as indexes into the track's
	// Samples.
	First, Count int
	// Start and End are the run's time since the recording began: from
	// its first sample to the end of its last one (SampleEnd).
	Start, End time.Duration
}

// Chart cuts p's timeline into a stack chart: a track per thread (by
// process and thread id, in the order of their first sample), each of
// boxes that run from left to right in time. A run continues while the
// samples follow one another without a gap (SampleEnd) and share the
// stack down to the box's frame; frames count as alike when their
// function is (lines false) or their frame is (lines true). Boxes shorter
// than shortest are left out (Track.Small), with everything below them. A
// profile without a timeline has no chart (nil).
func (p *Profile) Chart(lines bool, shortest time.Duration) []Track {
	if p.Timeline == nil {
		return nil
	}
	keys := p.frameKeys(lines)
	tracks := p.tracks()
	for k := range tracks {
		p.chartTrack(&tracks[k], keys, shortest)
	}
	return tracks
}

// frameKeys maps each frame to what a run compares: the frame itself
// (lines) or its function's first frame.
func (p *Profile) frameKeys(lines bool) []int {
	keys := make([]int, len(p.Frames))
	fn := map[Frame]int{}
	for i, f := range p.Frames {
		keys[i] = i
		if lines {
			continue
		}
		if k, ok := fn[f.Function()]; ok {
			keys[i] = k
		} else {
			fn[f.Function()] = i
		}
	}
	return keys
}

// tracks groups the timeline by thread, each thread's samples sorted by
// time (a merged profile's need not be).
func (p *Profile) tracks() []Track {
	type key struct{ pid, tid int }
	idx := map[key]int{}
	var out []Track
	for i, s := range p.Timeline {
		k := key{s.PID, s.TID}
		t, ok := idx[k]
		if !ok {
			t = len(out)
			idx[k] = t
			out = append(out, Track{PID: s.PID, TID: s.TID, Thread: s.Thread})
		}
		out[t].Samples = append(out[t].Samples, i)
	}
	for k := range out {
		byTime := func(a, b int) int { return cmp.Compare(p.Timeline[a].Time, p.Timeline[b].Time) }
		if !slices.IsSortedFunc(out[k].Samples, byTime) {
			slices.SortStableFunc(out[k].Samples, byTime)
		}
	}
	return out
}

// SampleEnd is when the sample at time t, followed by the thread's next
// at next (ok false: none), stops counting: at the next sample when it
// comes within two sampling periods (a late tick is no gap), else one
// period after it (the thread was not seen in between: off its CPU, or
// not yet running). gap says the run of boxes breaks there.
func (p *Profile) SampleEnd(t, next time.Duration, ok bool) (end time.Duration, gap bool) {
	period := time.Second
	if p.Rate > 0 {
		period = time.Duration(float64(time.Second) / p.Rate)
	}
	if ok && next-t <= 2*period {
		return next, false
	}
	return t + period, true
}

// openRun is a box being built: its frame's key, first sample and lines.
type openRun struct {
	key, frame       int
	first            int
	start            time.Duration
	minLine, maxLine int
}

// chartTrack makes tr's boxes: one pass over its samples, keeping the
// runs open at each depth and closing those the next sample does not
// continue.
func (p *Profile) chartTrack(tr *Track, keys []int, shortest time.Duration) {
	var open []openRun
	closeFrom := func(depth, last int, end time.Duration) {
		for d := len(open) - 1; d >= depth; d-- {
			r := open[d]
			if end-r.start < shortest {
				tr.Small++
			} else {
				tr.Boxes = append(tr.Boxes, Box{Depth: d, Frame: r.frame, MinLine: r.minLine, MaxLine: r.maxLine,
					First: r.first, Count: last - r.first + 1, Start: r.start, End: end})
			}
		}
		open = open[:depth]
	}
	var end time.Duration // of the previous sample
	gap := true
	for k, si := range tr.Samples {
		s := p.Timeline[si]
		ids := p.Stacks[s.Stack].Frames
		same := 0
		if !gap {
			for same < len(open) && same < len(ids) && open[same].key == keys[ids[same]] {
				same++
			}
		}
		if k > 0 {
			closeFrom(same, k-1, end)
		}
		for d, id := range ids {
			line := p.Frames[id].Line
			if d < same {
				open[d].minLine, open[d].maxLine = min(open[d].minLine, line), max(open[d].maxLine, line)
				continue
			}
			open = append(open, openRun{key: keys[id], frame: id, first: k, start: s.Time, minLine: line, maxLine: line})
		}
		end, gap = p.trackSampleEnd(tr, k)
	}
	if n := len(tr.Samples); n > 0 {
		closeFrom(0, n-1, end)
	}
}

// trackSampleEnd is SampleEnd of the track's k-th sample.
func (p *Profile) trackSampleEnd(tr *Track, k int) (time.Duration, bool) {
	t := p.Timeline[tr.Samples[k]].Time
	if k+1 < len(tr.Samples) {
		return p.SampleEnd(t, p.Timeline[tr.Samples[k+1]].Time, true)
	}
	return p.SampleEnd(t, 0, false)
}
