package output

import (
	"fmt"
	"github.com/rbscope/rbscope/internal/textsafe"
	"io"
	"sort"

	"github.com/rbscope/rbscope/internal/profile"
)

// LineStat is a source line's self and total sample counts: a Ruby
// file:line, or a C method (which has no line).
type LineStat struct {
	// Location is "file:line", or the C method's name with "(cfunc)".
	Location string
	// Function is the label of the (first seen) frame at the location.
	Function    string
	Self, Total int
}

// Lines aggregates p by line: self is the samples whose innermost frame
// is at the line, total those with the line anywhere on the stack (once
// per sample, however deep it recurses). Sorted by self, then total.
func Lines(p *profile.Profile) []LineStat {
	stats := map[string]*LineStat{}
	for _, st := range p.Stacks {
		seen := map[string]bool{}
		for i, id := range st.Frames {
			f := p.Frames[id]
			if f.Synthetic() {
				continue
			}
			loc := f.Label + " (cfunc)"
			if f.Kind != profile.KindCFunc {
				loc = fmt.Sprintf("%s:%d", f.Path, f.Line)
			}
			s := stats[loc]
			if s == nil {
				s = &LineStat{Location: loc, Function: f.Label}
				if f.Kind == profile.KindCFunc {
					s.Function = ""
				}
				stats[loc] = s
			}
			if !seen[loc] {
				s.Total += st.Count
				seen[loc] = true
			}
			if i == len(st.Frames)-1 {
				s.Self += st.Count
			}
		}
	}
	out := make([]LineStat, 0, len(stats))
	for _, s := range stats {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Self != b.Self {
			return a.Self > b.Self
		}
		if a.Total != b.Total {
			return a.Total > b.Total
		}
		return a.Location < b.Location
	})
	return out
}

// SummaryByLine writes a table of source lines by self and total share of
// samples, as rbspy's and py-spy's summary by line.
func SummaryByLine(w io.Writer, p *profile.Profile) error {
	bw := &errWriter{w: w}
	bw.printf("%s", summaryHeader(p))
	bw.printf("%7s %7s %8s %8s  %s\n", "self%", "total%", "self", "total", "line")
	for _, s := range Lines(p) {
		fn := ""
		if s.Function != "" {
			fn = "  (" + textsafe.Clean(s.Function) + ")"
		}
		bw.printf("%6.2f%% %6.2f%% %8d %8d  %s%s\n", Pct(s.Self, p.Samples), Pct(s.Total, p.Samples), s.Self, s.Total, textsafe.Clean(s.Location), fn)
	}
	return bw.err
}
