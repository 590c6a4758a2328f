package output

import (
	"fmt"
	"io"
	"sort"

	"github.com/rbscope/rbscope/internal/profile"
)

// cgFunc is a function as callgrind names it: file and name.
type cgFunc struct{ file, name string }

// cgCall is a call from a line of one function to another function.
type cgCall struct {
	caller cgFunc
	line   int
	callee cgFunc
}

// cgCost is a call's count and inclusive samples, with the callee's line.
type cgCost struct {
	calls, inclusive, calleeLine int
}

func callgrindFunc(f profile.Frame) cgFunc {
	if f.Kind == profile.KindCFunc {
		return cgFunc{"<cfunc>", f.Label}
	}
	return cgFunc{f.Path, f.Label}
}

// Callgrind writes the profile in callgrind's format, for kcachegrind,
// qcachegrind and callgrind_annotate: one event, Samples; a function is a
// Ruby method's label in its file (C methods in the file "<cfunc>"), its
// self samples by line, and each call from one of its lines with the
// samples spent below it. A call from a line to a function counts once per
// sample however deep it recurses. The process and thread roots of
// --subprocesses and --threads are left out.
func Callgrind(w io.Writer, p *profile.Profile, o Options) error {
	self := map[cgFunc]map[int]int{}
	calls := map[cgCall]*cgCost{}
	for _, st := range p.Stacks {
		var frames []profile.Frame
		for _, id := range st.Frames {
			if f := p.Frames[id]; !f.Synthetic() {
				frames = append(frames, f)
			}
		}
		if len(frames) == 0 {
			continue
		}
		leaf := frames[len(frames)-1]
		fn := callgrindFunc(leaf)
		if self[fn] == nil {
			self[fn] = map[int]int{}
		}
		self[fn][leaf.Line] += st.Count
		seen := map[cgCall]bool{}
		for i := 0; i+1 < len(frames); i++ {
			c := cgCall{callgrindFunc(frames[i]), frames[i].Line, callgrindFunc(frames[i+1])}
			if self[c.caller] == nil {
				self[c.caller] = map[int]int{}
			}
			cost := calls[c]
			if cost == nil {
				cost = &cgCost{calleeLine: frames[i+1].Line}
				calls[c] = cost
			}
			cost.calls += st.Count
			if !seen[c] {
				cost.inclusive += st.Count
				seen[c] = true
			}
		}
	}
	byCaller := map[cgFunc][]cgCall{}
	for c := range calls {
		byCaller[c.caller] = append(byCaller[c.caller], c)
	}
	funcs := make([]cgFunc, 0, len(self))
	for fn := range self {
		funcs = append(funcs, fn)
	}
	sort.Slice(funcs, func(i, j int) bool {
		if funcs[i].file != funcs[j].file {
			return funcs[i].file < funcs[j].file
		}
		return funcs[i].name < funcs[j].name
	})

	bw := &errWriter{w: w}
	bw.printf("# callgrind format\nversion: 1\ncreator: rbscope\n")
	if o.Title != "" {
		bw.printf("cmd: %s\n", oneLine(o.Title))
	}
	bw.printf("positions: line\nevents: Samples\nsummary: %d\n", p.Samples)
	// Names are compressed: "(N) name" the first time, "(N)" after.
	files, names := map[string]int{}, map[string]int{}
	ref := func(ids map[string]int, s string) string {
		if id, ok := ids[s]; ok {
			return fmt.Sprintf("(%d)", id)
		}
		id := len(ids) + 1
		ids[s] = id
		return fmt.Sprintf("(%d) %s", id, oneLine(s))
	}
	for _, fn := range funcs {
		bw.printf("\nfl=%s\nfn=%s\n", ref(files, fn.file), ref(names, fn.name))
		lines := make([]int, 0, len(self[fn]))
		for l := range self[fn] {
			lines = append(lines, l)
		}
		sort.Ints(lines)
		for _, l := range lines {
			if n := self[fn][l]; n > 0 {
				bw.printf("%d %d\n", l, n)
			}
		}
		cs := byCaller[fn]
		sort.Slice(cs, func(i, j int) bool {
			a, b := cs[i], cs[j]
			if a.line != b.line {
				return a.line < b.line
			}
			if a.callee.file != b.callee.file {
				return a.callee.file < b.callee.file
			}
			return a.callee.name < b.callee.name
		})
		for _, c := range cs {
			cost := calls[c]
			bw.printf("cfl=%s\ncfn=%s\ncalls=%d %d\n%d %d\n", ref(files, c.callee.file), ref(names, c.callee.name), cost.calls, cost.calleeLine, c.line, cost.inclusive)
		}
	}
	return bw.err
}

// oneLine replaces line breaks, which would end a callgrind record.
func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\n' || c == '\r' {
			b[i] = ' '
		}
	}
	return string(b)
}
