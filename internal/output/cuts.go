package output

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/textsafe"
)

// ByTable writes p's samples cut by key ("thread", or a label's key:
// "endpoint", "job"), a row each, the most samples first: its samples,
// their share of all, the seconds of thread time they stand for (samples
// over the rate), the shares of its samples in the GC and waiting for
// the GVL, and the function with the most self samples in it with its
// share of the row. Samples without the label make one row, "(no
// endpoint)".
func ByTable(w io.Writer, p *profile.Profile, key string) error {
	groups, err := p.By(key)
	if err != nil {
		return err
	}
	bw := &errWriter{w: w}
	bw.printf("%d samples in %.1fs at %g Hz, by %s\n", p.Samples, p.Duration.Seconds(), p.Rate, key)
	names := make([]string, len(groups))
	width := len(key)
	for i, g := range groups {
		switch {
		case key == "thread":
			names[i] = fmt.Sprintf("%s (tid %d)", g.Name, g.TID)
		case g.Name == "":
			names[i] = "(no " + key + ")"
		default:
			names[i] = g.Name
		}
		names[i] = textsafe.Clean(names[i])
		width = max(width, len(names[i]))
	}
	width = min(width, 60)
	bw.printf("%-*s %8s %6s %8s %5s %5s  %s\n", width, strings.ToUpper(key), "SAMPLES", "SHARE", "SECONDS", "GC%", "GVL%", "TOP SELF FUNCTION (its share of the row)")
	for i, g := range groups {
		top := "-"
		if g.TopSelf > 0 {
			top = fmt.Sprintf("%5.1f%% %s", Pct(g.TopSelf, g.Samples), textsafe.Clean(g.Top.Name(false)))
		}
		bw.printf("%-*s %8d %5.1f%% %8.2f %5.1f %5.1f  %s\n", width, names[i], g.Samples, Pct(g.Samples, p.Samples),
			float64(g.Samples)/p.Rate, Pct(g.GC, g.Samples), Pct(g.GVL, g.Samples), top)
	}
	return bw.err
}

// SandwichText writes function fn's place in p (profile.SandwichOf): the
// samples it is in and in its own code, its callers and its callees with
// the samples of its stacks in which each is, and, with lines, its
// callers by the line they call from, its callees by its line that calls
// them and its own samples by line.
func SandwichText(w io.Writer, p *profile.Profile, fn string, lines bool) error {
	sw := p.SandwichOf(fn, lines)
	bw := &errWriter{w: w}
	bw.printf("%s: in %d of %d samples (%.1f%%), %d of them in its own code (%.1f%%)\n",
		textsafe.Clean(fn), sw.Total, p.Samples, Pct(sw.Total, p.Samples), sw.Self, Pct(sw.Self, p.Samples))
	rows := func(title string, m map[string]int) {
		bw.printf("\n%s (samples, %% of its %d):\n", title, sw.Total)
		if len(m) == 0 {
			bw.printf("  none\n")
		}
		keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
		for _, k := range keys {
			bw.printf("%8d %6.1f%%  %s\n", m[k], Pct(m[k], sw.Total), textsafe.Clean(k))
		}
	}
	callers, callees := "Called by", "Calls"
	if lines {
		callers, callees = "Called by, from the line of each caller", "Calls, by its line that calls"
	}
	rows(callers, sw.Callers)
	rows(callees, sw.Callees)
	if lines {
		own := map[string]int{}
		for line, n := range sw.SelfLines {
			own[fmt.Sprintf("line %d", line)] = n
		}
		rows("In its own code, by line", own)
	}
	return bw.err
}
