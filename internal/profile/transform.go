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
//
// The filters keep whole samples: "time" (From, To), and "thread",
// "endpoint" and "job", whose Function is then the thread as NAME|TID
// (ThreadMatch) or the label's value (NameMatch).
type Transform struct {
	Op       string
	Function string
	// From and To bound the samples an Op "time" keeps, by their time
	// since the recording began (the timeline's); To 0 means the end.
	From, To time.Duration
}

// ParseTransforms reads transforms written as "op:function" separated by
// newlines (the function's name may hold anything else), "time:FROM-TO"
// in seconds (TO empty: to the end), and "thread:NAME|TID",
// "endpoint:NAME" and "job:NAME".
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
		switch {
		case !ok || fn == "":
		case op == "focus" || op == "drop" || op == "merge" || op == "thread" || op == LabelEndpoint || op == LabelJob:
			out = append(out, Transform{Op: op, Function: fn})
			continue
		}
		return nil, fmt.Errorf("transform %q: want focus:FUNCTION, drop:FUNCTION, merge:FUNCTION, time:FROM-TO, thread:NAME|TID, endpoint:NAME or job:NAME", line)
	}
	return out, nil
}

// Apply returns a profile of p's stacks with the transforms applied; p
// is left as it is. The counts that are not the stacks' (ticks, errors,
// rate, times) are p's.
//
// The filters (time windows, threads, endpoints, jobs) apply first, to
// the samples: a time window or a thread needs the timeline
// (ErrNoTimeline). The others then apply in order. The timeline stays,
// each sample with its transformed stack (those left out, without), so
// that the timeline and the stack chart show the transforms too; each
// stack keeps its samples' labels.
func (p *Profile) Apply(ts []Transform) (*Profile, error) {
	var filters, rest []Transform
	for _, t := range ts {
		if t.isFilter() {
			filters = append(filters, t)
		} else {
			rest = append(rest, t)
		}
	}
	if len(filters) > 0 {
		var err error
		if p, err = p.filter(filters); err != nil {
			return nil, err
		}
	}
	if len(rest) == 0 {
		return p, nil
	}
	return p.applyStacks(rest), nil
}

// ErrNoTimeline is Apply's error for a time window or a thread on a
// recording that kept no timeline.
var ErrNoTimeline = errors.New("the recording kept no timeline (record --format raw keeps one)")

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
		if out.Stacks[moved[si]].Labels == nil {
			out.Stacks[moved[si]].Labels = st.Labels
		}
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
