package profile

import (
	"fmt"
	"strings"
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
}

// ParseTransforms reads transforms written as "op:function" separated by
// newlines (the function's name may hold anything else).
func ParseTransforms(s string) ([]Transform, error) {
	var out []Transform
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
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

// Apply returns a new profile of p's stacks with the transforms applied
// in order; p is left as it is. The counts that are not the stacks'
// (ticks, errors, rate, times) are p's.
func (p *Profile) Apply(ts []Transform) *Profile {
	out := &Profile{Ticks: p.Ticks, Errors: p.Errors, Waiting: p.Waiting, Wall: p.Wall, Rate: p.Rate, Start: p.Start, Duration: p.Duration}
	names := make([]string, len(p.Frames))
	for i, f := range p.Frames {
		names[i] = f.Name(false)
	}
	frames := make([]Frame, 0, 64)
	for _, st := range p.Stacks {
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
		out.Add(frames, st.Count)
	}
	return out
}
