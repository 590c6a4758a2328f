package profile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Transform is one of the changes a profile view applies before it is
// drawn, as speedscope and pprof have them: Op is "focus" (keep only the
// samples that pass through the function, from it down), "drop" (leave
// out the samples that pass through it) or "merge" (take the function's
// frames out of the stacks, its time going to its caller). Function is a
// function as Frame.Name(false) names it.
type Transform struct {
	Op       string
	Function string
	// From and To bound the samples an Op "time" keeps, by their time
	// since the recording began (the timeline's); To 0 means the end.
	From, To time.Duration
}

// ParseTransforms reads transforms written as "op:function" separated by
// newlines (the function's name may hold anything else), and
// "time:FROM-TO" in seconds (TO empty: to the end).
func ParseTransforms(s string) ([]Transform, error) {
	var out []Transform
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "time:"); ok {
			a, b, _ := strings.Cut(rest, "-")
			from, err1 := strconv.ParseFloat(a, 64)
			to, err2 := 0.0, error(nil)
			if b != "" {
				to, err2 = strconv.ParseFloat(b, 64)
			}
			if err1 != nil || err2 != nil || from < 0 || b != "" && to <= from {
				return nil, fmt.Errorf("transform %q: want time:FROM-TO, in seconds, FROM before TO (TO empty: to the end)", line)
			}
			out = append(out, Transform{Op: "time", From: time.Duration(from * float64(time.Second)), To: time.Duration(to * float64(time.Second))})
			continue
		}
		op, fn, ok := strings.Cut(line, ":")
		if !ok || fn == "" || (op != "focus" && op != "drop" && op != "merge") {
			return nil, fmt.Errorf("transform %q: want focus:FUNCTION, drop:FUNCTION or merge:FUNCTION", line)
		}
		out = append(out, Transform{Op: op, Function: fn})
	}
	return out, nil
}

// Apply returns a profile of p's stacks with the transforms applied
// in order; p is left as it is. The counts that are not the stacks'
// (ticks, errors, rate, times) are p's.
//
// Time windows ("time") apply first, to the timeline; a profile without
// one (ErrNoTimeline) cannot be windowed. The timeline stays, each sample
// with its transformed stack (those left out, without), so that the
// timeline and the stack chart show the transforms too.
func (p *Profile) Apply(ts []Transform) (*Profile, error) {
	var rest []Transform
	for _, t := range ts {
		if t.Op != "time" {
			rest = append(rest, t)
			continue
		}
		if p.Timeline == nil {
			return nil, ErrNoTimeline
		}
		p = p.window(t.From, t.To)
	}
	if len(rest) == 0 {
		return p, nil
	}
	return p.applyStacks(rest), nil
}

// ErrNoTimeline is Apply's error for a time window on a recording that
// kept no timeline.
var ErrNoTimeline = errors.New("the recording kept no timeline (record --format raw keeps one)")

// window is p's samples taken from from to to (0: the end).
func (p *Profile) window(from, to time.Duration) *Profile {
	out := &Profile{Ticks: p.Ticks, Errors: p.Errors, Waiting: p.Waiting, Wall: p.Wall, Rate: p.Rate, Start: p.Start, Duration: p.Duration}
	out.KeepTimeline()
	frames := make([]Frame, 0, 64)
	for _, s := range p.Timeline {
		if s.Time < from || to > 0 && s.Time >= to {
			continue
		}
		frames = frames[:0]
		for _, id := range p.Stacks[s.Stack].Frames {
			frames = append(frames, p.Frames[id])
		}
		si := out.Add(frames, 1)
		out.Timeline = append(out.Timeline, Sample{Time: s.Time, PID: s.PID, TID: s.TID, Thread: s.Thread, Stack: si})
	}
	return out
}

// applyStacks applies transforms that work on the stacks alone, and
// carries the timeline over to the stacks they make.
func (p *Profile) applyStacks(ts []Transform) *Profile {
	out := &Profile{Ticks: p.Ticks, Errors: p.Errors, Waiting: p.Waiting, Wall: p.Wall, Rate: p.Rate, Start: p.Start, Duration: p.Duration}
	moved := make([]int, len(p.Stacks)) // p's stack -> out's, -1: left out
	names := make([]string, len(p.Frames))
	for i, f := range p.Frames {
		names[i] = f.Name(false)
	}
	frames := make([]Frame, 0, 64)
	for si, st := range p.Stacks {
		moved[si] = -1
		ids := st.Frames
		keep := true
		for _, t := range ts {
			switch t.Op {
			case "focus":
				at := -1
				for k, id := range ids {
					if names[id] == t.Function {
						at = k
						break
					}
				}
				if at < 0 {
					keep = false
				} else {
					ids = ids[at:]
				}
			case "drop":
				for _, id := range ids {
					if names[id] == t.Function {
						keep = false
						break
					}
				}
			case "merge":
				kept := make([]int, 0, len(ids))
				for _, id := range ids {
					if names[id] != t.Function {
						kept = append(kept, id)
					}
				}
				ids = kept
			}
			if !keep || len(ids) == 0 {
				keep = false
				break
			}
		}
		if !keep {
			continue
		}
		frames = frames[:0]
		for _, id := range ids {
			frames = append(frames, p.Frames[id])
		}
		moved[si] = out.Add(frames, st.Count)
	}
	if p.Timeline != nil {
		out.KeepTimeline()
		for _, s := range p.Timeline {
			if s.Stack = moved[s.Stack]; s.Stack >= 0 {
				out.Timeline = append(out.Timeline, s)
			}
		}
	}
	return out
}

// Window is the stretch of time the time windows of ts keep, all of them
// at once: from from to to (0: the end).
func Window(ts []Transform) (from, to time.Duration) {
	for _, t := range ts {
		if t.Op != "time" {
			continue
		}
		from = max(from, t.From)
		if t.To > 0 && (to == 0 || t.To < to) {
			to = t.To
		}
	}
	return from, to
}
