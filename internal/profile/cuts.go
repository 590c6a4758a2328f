package profile

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The keys of the context labels a stack's samples carry (Stack.Labels;
// package ctxlabels derives them), which the cuts by label filter and
// group on.
const (
	LabelEndpoint = "endpoint" // the Rails controller action or Sinatra route
	LabelJob      = "job"      // the Sidekiq or ActiveJob job class
)

// Label returns the value of the stack's label key, "" for none.
func (st Stack) Label(key string) string {
	for _, l := range st.Labels {
		if l.Key == key {
			return l.Value
		}
	}
	return ""
}

// NameMatch matches a name given by the user (a thread's, an endpoint's,
// a job's): the name itself, or a regular expression that matches the
// whole name ("puma srv tp .*"). A name that is no regular expression
// (a Sinatra route such as "GET (?-mix:^/x$)" may not be) still matches
// itself.
type NameMatch struct {
	spec string
	re   *regexp.Regexp
}

// NewNameMatch returns the match of spec.
func NewNameMatch(spec string) NameMatch {
	re, _ := regexp.Compile("^(?:" + spec + ")$")
	return NameMatch{spec: spec, re: re}
}

// Match reports whether name matches.
func (m NameMatch) Match(name string) bool {
	return name == m.spec || m.re != nil && m.re.MatchString(name)
}

// String is the spec as given.
func (m NameMatch) String() string { return m.spec }

// ThreadMatch matches a thread given as NAME|TID: a spec of digits alone
// is a kernel thread ID, and a name is matched as NameMatch does against
// the thread's name as profiles show it (sampling.ThreadName: Thread#name,
// "main" for the unnamed main thread, "tid N" for another unnamed one).
type ThreadMatch struct {
	name NameMatch
	tid  int
}

// NewThreadMatch returns the match of spec.
func NewThreadMatch(spec string) ThreadMatch {
	m := ThreadMatch{name: NewNameMatch(spec)}
	if n, err := strconv.Atoi(spec); err == nil && n > 0 && strings.Trim(spec, "0123456789") == "" {
		m.tid = n
	}
	return m
}

// Match reports whether the thread named name with kernel thread ID tid
// matches.
func (m ThreadMatch) Match(name string, tid int) bool {
	return m.tid > 0 && tid == m.tid || m.name.Match(name)
}

// isFilter reports whether t keeps or leaves out whole samples (a time
// window, a thread, a label's value) rather than changing stacks.
func (t Transform) isFilter() bool {
	return t.Op == "time" || t.Op == "thread" || t.Op == LabelEndpoint || t.Op == LabelJob
}

// filter returns p's samples that pass every filter of fs (time, thread,
// endpoint, job), with their stacks' labels. A time window or a thread
// needs the timeline (ErrNoTimeline); the timeline stays, with the
// samples kept.
func (p *Profile) filter(fs []Transform) (*Profile, error) {
	type labelCut struct {
		key string
		m   NameMatch
	}
	var labels []labelCut
	var threads []ThreadMatch
	var windows []Transform
	for _, t := range fs {
		switch t.Op {
		case "time":
			windows = append(windows, t)
		case "thread":
			threads = append(threads, NewThreadMatch(t.Function))
		default:
			labels = append(labels, labelCut{t.Op, NewNameMatch(t.Function)})
		}
	}
	keepStack := make([]bool, len(p.Stacks))
	for si, st := range p.Stacks {
		keepStack[si] = true
		for _, l := range labels {
			if v := st.Label(l.key); v == "" || !l.m.Match(v) {
				keepStack[si] = false
			}
		}
	}
	out := &Profile{Ticks: p.Ticks, Errors: p.Errors, Waiting: p.Waiting, Wall: p.Wall, Rate: p.Rate, Start: p.Start, Duration: p.Duration}
	add := func(si, count int) int {
		ni := out.Add(p.StackFrames(si), count)
		if out.Stacks[ni].Labels == nil {
			out.Stacks[ni].Labels = p.Stacks[si].Labels
		}
		return ni
	}
	if p.Timeline == nil {
		if len(windows) > 0 || len(threads) > 0 {
			return nil, ErrNoTimeline
		}
		for si, st := range p.Stacks {
			if keepStack[si] {
				add(si, st.Count)
			}
		}
		return out, nil
	}
	out.KeepTimeline()
	moved := make([]int, len(p.Stacks)) // p's stack -> out's + 1, 0: not yet
	for _, s := range p.Timeline {
		keep := keepStack[s.Stack]
		for _, w := range windows {
			keep = keep && s.Time >= w.From && (w.To == 0 || s.Time < w.To)
		}
		for _, m := range threads {
			keep = keep && m.Match(s.Thread, s.TID)
		}
		if !keep {
			continue
		}
		if moved[s.Stack] == 0 {
			moved[s.Stack] = add(s.Stack, 0) + 1
		}
		ni := moved[s.Stack] - 1
		out.Stacks[ni].Count++
		out.Samples++
		s.Stack = ni
		out.Timeline = append(out.Timeline, s)
	}
	return out, nil
}

// ThreadStat is a thread's samples in a profile's timeline.
type ThreadStat struct {
	PID, TID int
	Name     string
	Samples  int
}

// Threads lists the threads of p's timeline with their samples, most
// first (nil without a timeline).
func (p *Profile) Threads() []ThreadStat {
	var out []ThreadStat
	for _, tr := range p.tracks() {
		out = append(out, ThreadStat{PID: tr.PID, TID: tr.TID, Name: tr.Thread, Samples: len(tr.Samples)})
	}
	slices.SortStableFunc(out, func(a, b ThreadStat) int { return cmp.Compare(b.Samples, a.Samples) })
	return out
}

// LabelValues lists the values of label key in p's samples with their
// samples, most first; samples without it are left out.
func (p *Profile) LabelValues(key string) []Group {
	byValue := map[string]int{}
	for _, st := range p.Stacks {
		if v := st.Label(key); v != "" {
			byValue[v] += st.Count
		}
	}
	out := make([]Group, 0, len(byValue))
	for v, n := range byValue {
		out = append(out, Group{Name: v, Samples: n})
	}
	slices.SortFunc(out, func(a, b Group) int { return cmp.Or(cmp.Compare(b.Samples, a.Samples), cmp.Compare(a.Name, b.Name)) })
	return out
}

// ErrNoMatch is what the error of a cut (a thread, an endpoint, a job)
// that no sample matches is (errors.Is): a mistake in what the user asked
// for. The error itself says which cut and what there was instead.
var ErrNoMatch = errors.New("the cut keeps no sample")

// NoMatchError is an error of ErrNoMatch's kind with its own words.
type NoMatchError struct{ Msg string }

func (e NoMatchError) Error() string { return e.Msg }

// Is makes a NoMatchError an ErrNoMatch.
func (e NoMatchError) Is(target error) bool { return target == ErrNoMatch }

// NoMatch explains a filter of ts that no sample of p passes, naming
// what p has instead, or returns nil when each of them matches some
// sample. A filter that keeps nothing is a mistake to say, not an empty
// profile to draw.
func (p *Profile) NoMatch(ts []Transform) error {
	for _, t := range ts {
		var have []string
		found := false
		switch t.Op {
		case "thread":
			m := NewThreadMatch(t.Function)
			for _, th := range p.Threads() {
				found = found || m.Match(th.Name, th.TID)
				have = append(have, fmt.Sprintf("%q (tid %d)", th.Name, th.TID))
			}
			if !found {
				return NoMatchError{fmt.Sprintf("--thread %q: no sample is of a thread so named (whole, or as a regular expression) or with that TID; the recording's threads: %s", t.Function, listOrNone(have))}
			}
		case LabelEndpoint, LabelJob:
			m := NewNameMatch(t.Function)
			for _, g := range p.LabelValues(t.Op) {
				found = found || m.Match(g.Name)
				have = append(have, strconv.Quote(g.Name))
			}
			if !found {
				return NoMatchError{fmt.Sprintf("--%s %q: no sample has that %s (whole, or as a regular expression); the recording's: %s", t.Op, t.Function, t.Op, listOrNone(have))}
			}
		}
	}
	return nil
}

// listOrNone joins up to 10 names, saying how many more there are.
func listOrNone(names []string) string {
	switch {
	case len(names) == 0:
		return "none"
	case len(names) > 10:
		return strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
	}
	return strings.Join(names, ", ")
}

// Group is one row of a profile cut by thread or label (By): its samples,
// those in the GC and waiting for the GVL, and the function with the
// most self samples among them.
type Group struct {
	// Name is the thread's name, or the label's value ("" for the
	// samples without one); TID and PID are a thread's.
	Name     string
	TID, PID int
	Samples  int
	GC, GVL  int
	// Top is the function (Frame.Function) with the most self samples of
	// the group, synthetic frames left out, and TopSelf those samples.
	Top     Frame
	TopSelf int
}

// By cuts p's samples by "thread" (which needs the timeline) or by a
// label key ("" for the samples without it), the groups with the most
// samples first.
func (p *Profile) By(key string) ([]Group, error) {
	type gkey struct {
		name     string
		pid, tid int
	}
	idx := map[gkey]int{}
	var groups []Group
	var selfs []map[Frame]int
	add := func(k gkey, si, n int) {
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			groups = append(groups, Group{Name: k.name, PID: k.pid, TID: k.tid})
			selfs = append(selfs, map[Frame]int{})
		}
		g := &groups[i]
		g.Samples += n
		st := p.Stacks[si]
		gc, gvl := false, false
		leaf := -1
		for _, id := range st.Frames {
			f := p.Frames[id]
			gc = gc || f.Kind == KindGC
			gvl = gvl || f.Kind == KindGVL
			if !f.Synthetic() {
				leaf = id
			}
		}
		if gc {
			g.GC += n
		}
		if gvl {
			g.GVL += n
		}
		if leaf >= 0 {
			selfs[i][p.Frames[leaf].Function()] += n
		}
	}
	if key == "thread" {
		if p.Timeline == nil {
			return nil, ErrNoTimeline
		}
		for _, s := range p.Timeline {
			add(gkey{s.Thread, s.PID, s.TID}, s.Stack, 1)
		}
	} else {
		for si, st := range p.Stacks {
			add(gkey{name: st.Label(key)}, si, st.Count)
		}
	}
	for i := range groups {
		for f, n := range selfs[i] {
			if g := &groups[i]; n > g.TopSelf || n == g.TopSelf && f.Name(false) < g.Top.Name(false) {
				g.Top, g.TopSelf = f, n
			}
		}
	}
	slices.SortStableFunc(groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(b.Samples, a.Samples), cmp.Compare(a.Name, b.Name), cmp.Compare(a.TID, b.TID))
	})
	return groups, nil
}
