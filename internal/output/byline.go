package output

import (
	"fmt"
	"io"
	"sort"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/textsafe"
)

// LineStat is a source line's self and total sample counts: a Ruby
// file:line, or a C method (which has no line).
type LineStat struct {
	// Location is "file:line", the C method's name with "(cfunc)", or the
	// label of a frame without a line ("(garbage collection)").
	Location string
	// Function is the label of the (first seen) frame at the location.
	Function    string
	Self, Total int
}

// Lines aggregates p by line: self is the samples whose innermost frame
// is at the line, total those with the line anywhere on the stack (once
// per sample, however deep it recurses). Sorted by self, then total.
func Lines(p *profile.Profile) []LineStat {
	function := map[string]string{} // location -> the first label seen there
	tallies := profile.Aggregate(p, func(f profile.Frame) string {
		var loc string
		switch f.Kind {
		case profile.KindCFunc:
			loc = f.Label + " (cfunc)"
		case profile.KindRuby:
			loc = fmt.Sprintf("%s:%d", f.Path, f.Line)
			if _, ok := function[loc]; !ok {
				function[loc] = f.Label
			}
		default: // the GC's and the GVL's frames have no line
			loc = f.Label
		}
		return loc
	})
	out := make([]LineStat, 0, len(tallies))
	for loc, t := range tallies {
		out = append(out, LineStat{Location: loc, Function: function[loc], Self: t.Self, Total: t.Total})
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
