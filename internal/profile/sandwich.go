package profile

import (
	"fmt"
	"strconv"
	"strings"
)

// Sandwich is a function's place in a profile's stacks: the samples it is
// in (Total) and ends in (Self), and those of each of its callers and
// callees, by name. A stack counts once per caller and per callee,
// however deep the recursion.
type Sandwich struct {
	Self, Total      int
	Callers, Callees map[string]int
	// Kinds are the callers' and callees' frame kinds, by name.
	Kinds map[string]Kind
	// SelfLines are, by line, the function's self samples (with lines).
	SelfLines map[int]int
}

// SandwichOf finds the function fn (as Frame.Name(false) names it) in p's
// stacks. With lines, a caller is named with the line it calls from
// (Frame.Name(true)), a callee with the line of fn that calls it ("line
// 12: Kernel#sleep (cfunc)"), and fn's self samples are counted by line.
func (p *Profile) SandwichOf(fn string, lines bool) Sandwich {
	names := make([]string, len(p.Frames))
	for i, f := range p.Frames {
		names[i] = f.Name(false)
	}
	sw := Sandwich{Callers: map[string]int{}, Callees: map[string]int{}, Kinds: map[string]Kind{}, SelfLines: map[int]int{}}
	for _, st := range p.Stacks {
		in := false
		seenCaller, seenCallee := map[string]bool{}, map[string]bool{}
		for k, id := range st.Frames {
			if names[id] != fn {
				continue
			}
			in = true
			caller := "(root)"
			if k > 0 {
				f := p.Frames[st.Frames[k-1]]
				caller = f.Name(lines)
				sw.Kinds[caller] = f.Kind
			}
			if !seenCaller[caller] {
				seenCaller[caller] = true
				sw.Callers[caller] += st.Count
			}
			if k+1 < len(st.Frames) {
				f := p.Frames[st.Frames[k+1]]
				callee := names[st.Frames[k+1]]
				if lines {
					callee = "line " + strconv.Itoa(p.Frames[id].Line) + ": " + callee
				}
				sw.Kinds[callee] = f.Kind
				if !seenCallee[callee] {
					seenCallee[callee] = true
					sw.Callees[callee] += st.Count
				}
			}
		}
		if in {
			sw.Total += st.Count
			if leaf := st.Frames[len(st.Frames)-1]; names[leaf] == fn {
				sw.Self += st.Count
				if lines {
					sw.SelfLines[p.Frames[leaf].Line] += st.Count
				}
			}
		}
	}
	return sw
}

// FindFunction returns the function of p that fn names, as
// Frame.Name(false) names it: that name itself, or the label of one
// function ("Object#work" for "Object#work (app.rb)"). A name that
// matches none, or the labels of several, is a NoMatchError naming the
// functions it could have meant.
func (p *Profile) FindFunction(fn string) (string, error) {
	var byLabel, containing []string
	for _, st := range p.Functions() {
		name := st.Frame.Name(false)
		switch {
		case name == fn:
			return name, nil
		case st.Frame.Label == fn:
			byLabel = append(byLabel, name)
		case strings.Contains(strings.ToLower(name), strings.ToLower(fn)):
			containing = append(containing, name)
		}
	}
	switch {
	case len(byLabel) == 1:
		return byLabel[0], nil
	case len(byLabel) > 1:
		return "", NoMatchError{fmt.Sprintf("function %q is several; give one of: %s", fn, listOrNone(quoted(byLabel)))}
	}
	return "", NoMatchError{fmt.Sprintf("no sample is in a function named %q; functions whose name holds it, by self samples: %s", fn, listOrNone(quoted(containing)))}
}

// quoted quotes each of names.
func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}
