package ui

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/profile"
)

// treeNode is a node of the call tree: a frame under its parent, with the
// samples whose stack passes through it (Total) or ends in it (Self).
type treeNode struct {
	Frame    int
	Parent   int
	Total    int
	Self     int
	Children []int
}

// callTree merges p's stacks into a tree; node 0 is the root (no frame),
// children sorted by total, largest first.
func callTree(p *profile.Profile) []treeNode {
	nodes := []treeNode{{Frame: -1, Parent: -1}}
	index := map[[2]int]int{} // parent, frame -> node
	for _, st := range p.Stacks {
		n := 0
		nodes[0].Total += st.Count
		for _, id := range st.Frames {
			c, ok := index[[2]int{n, id}]
			if !ok {
				c = len(nodes)
				nodes = append(nodes, treeNode{Frame: id, Parent: n})
				nodes[n].Children = append(nodes[n].Children, c)
				index[[2]int{n, id}] = c
			}
			nodes[c].Total += st.Count
			n = c
		}
		nodes[n].Self += st.Count
	}
	for k := range nodes {
		slices.SortStableFunc(nodes[k].Children, func(a, b int) int { return cmp.Compare(nodes[b].Total, nodes[a].Total) })
	}
	return nodes
}

// profileSummary heads every profile view: summary's header figures.
type profileSummary struct {
	File      string  `json:"file"`
	Title     string  `json:"title"`
	Samples   int     `json:"samples"`
	Seconds   float64 `json:"seconds"`
	Rate      float64 `json:"rate"`
	Ticks     int     `json:"ticks"`
	Errors    int     `json:"errors"`
	GCPct     float64 `json:"gc_pct"`
	GVLPct    float64 `json:"gvl_pct"`
	Breakdown string  `json:"breakdown"`
}

func (f *file) profileSummary() profileSummary { return f.summaryOf(f.prof) }

// summaryOf is the summary of the recording f seen through view pv (its
// transforms applied).
func (f *file) summaryOf(pv *profileView) profileSummary {
	p := pv.p
	gc, gvl := p.Breakdown()
	return profileSummary{File: f.Name, Title: pv.title, Samples: p.Samples, Seconds: p.Duration.Seconds(), Rate: p.Rate,
		Ticks: p.Ticks, Errors: p.Errors, GCPct: output.Pct(gc, p.Samples), GVLPct: output.Pct(gvl, p.Samples), Breakdown: output.Breakdown(p)}
}

// functionRow is a row of the function table (summary's).
type functionRow struct {
	Function string  `json:"function"`
	Kind     string  `json:"kind"`
	Path     string  `json:"path,omitempty"`
	Self     int     `json:"self"`
	Total    int     `json:"total"`
	SelfPct  float64 `json:"self_pct"`
	TotalPct float64 `json:"total_pct"`
}

// apiFunctions: the functions by self and total samples, as summary
// prints them; sort=self|total|name.
func apiFunctions(f *file, q *query) (any, error) {
	sortBy := q.oneOf("sort", "self", "self", "total", "name")
	offset, limit := q.num("offset", 0, 0, 1<<31-1), q.num("limit", 100, 1, maxLimit)
	pv, err := f.view(q)
	if err != nil {
		return nil, err
	}
	p := pv.p
	rows := slices.Clone(pv.funcs) // summary's order: self, total, name
	// search: the functions whose name holds it (any case), and the
	// samples in which any of them is.
	search := strings.ToLower(q.str("search", ""))
	matched := 0
	if search != "" {
		rows = slices.DeleteFunc(rows, func(s profile.FunctionStat) bool {
			return !strings.Contains(strings.ToLower(s.Frame.Name(false)), search)
		})
		hit := make([]bool, len(p.Frames))
		for i, fr := range p.Frames {
			hit[i] = strings.Contains(strings.ToLower(fr.Name(false)), search)
		}
		for _, st := range p.Stacks {
			if slices.ContainsFunc(st.Frames, func(id int) bool { return hit[id] }) {
				matched += st.Count
			}
		}
	}
	switch sortBy {
	case "total":
		slices.SortStableFunc(rows, func(a, b profile.FunctionStat) int { return cmp.Compare(b.Total, a.Total) })
	case "name":
		slices.SortStableFunc(rows, func(a, b profile.FunctionStat) int { return cmp.Compare(a.Frame.Name(false), b.Frame.Name(false)) })
	}
	return struct {
		profileSummary
		Sort    string            `json:"sort"`
		Search  string            `json:"search,omitempty"`
		Matched int               `json:"matched_samples"`
		Page    page[functionRow] `json:"page"`
	}{f.summaryOf(pv), sortBy, search, matched, paged(rows, offset, limit, func(s profile.FunctionStat) functionRow {
		return functionRow{Function: s.Frame.Name(false), Kind: string(s.Frame.Kind), Path: s.Frame.Path, Self: s.Self, Total: s.Total,
			SelfPct: output.Pct(s.Self, p.Samples), TotalPct: output.Pct(s.Total, p.Samples)}
	})}, nil
}

// treeRow is a node of the call tree as the page shows it.
type treeRow struct {
	Node     int     `json:"node"`
	Name     string  `json:"name"`
	Kind     string  `json:"kind,omitempty"`
	Self     int     `json:"self"`
	Total    int     `json:"total"`
	TotalPct float64 `json:"total_pct"`
	Children int     `json:"children"`
	// Diff compares the node's total with the same stack's in the
	// recording before (the before parameter).
	Diff *shareChange `json:"diff,omitempty"`
}

// shareChange is a node of a view compared with another recording (the
// before parameter): its share of each recording's samples in percent,
// and the change in points with its colour, as the differential flame
// graph has them (profile.Profile.PrefixShares, output.ChangeColor).
type shareChange struct {
	BeforePct float64 `json:"before_pct"`
	AfterPct  float64 `json:"after_pct"`
	Change    float64 `json:"change"`
	Color     string  `json:"color"`
}

func newShareChange(before, after float64) *shareChange {
	return &shareChange{BeforePct: before, AfterPct: after, Change: after - before, Color: output.ChangeColor(after - before)}
}

// baseline returns the recording a view compares its own with, seen
// through the same transforms, or nil for none.
func baseline(q *query) (*profileView, error) {
	if q.before == nil {
		return nil, nil
	}
	bv, err := q.before.view(q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q.before.Name, err)
	}
	return bv, nil
}

// nodeKey is the profile.PrefixKey of call tree node n's stack, frames by
// line.
func nodeKey(p *profile.Profile, t []treeNode, n int) string {
	if t[n].Frame < 0 {
		return ""
	}
	return profile.PrefixKey(nodeKey(p, t, t[n].Parent), p.Frames[t[n].Frame].Name(true))
}

// apiTree: one node of the call tree and its children (node=0: the
// root), expanded one level at a time.
func apiTree(f *file, q *query) (any, error) {
	pv, err := f.view(q)
	if err != nil {
		return nil, err
	}
	t := pv.tree
	id := q.num("node", 0, 0, len(t)-1)
	offset, limit := q.num("offset", 0, 0, 1<<31-1), q.num("limit", 200, 1, maxLimit)
	if q.err != nil {
		return nil, q.err
	}
	p := pv.p
	bv, err := baseline(q)
	if err != nil {
		return nil, err
	}
	row := func(n int) treeRow {
		r := treeRow{Node: n, Name: "(all)", Self: t[n].Self, Total: t[n].Total, TotalPct: output.Pct(t[n].Total, p.Samples), Children: len(t[n].Children)}
		if fr := t[n].Frame; fr >= 0 {
			r.Name, r.Kind = p.Frames[fr].Name(true), string(p.Frames[fr].Kind)
		}
		if bv != nil {
			before := bv.prefixShares()[nodeKey(p, t, n)]
			if n == 0 {
				before = output.Pct(bv.p.Samples, bv.p.Samples)
			}
			r.Diff = newShareChange(before, r.TotalPct)
		}
		return r
	}
	ancestors := []treeRow{}
	for a := t[id].Parent; a >= 0; a = t[a].Parent {
		ancestors = append([]treeRow{row(a)}, ancestors...)
	}
	out := struct {
		profileSummary
		Node      treeRow       `json:"node"`
		Ancestors []treeRow     `json:"ancestors"`
		Children  page[treeRow] `json:"children"`
		// Before is the recording compared with, when one is.
		Before *profileSummary `json:"before,omitempty"`
	}{profileSummary: f.summaryOf(pv), Node: row(id), Ancestors: ancestors, Children: paged(t[id].Children, offset, limit, row)}
	if bv != nil {
		bs := q.before.summaryOf(bv)
		out.Before = &bs
	}
	return out, nil
}

// cutRow is a thread, endpoint or job of a view, with its samples.
type cutRow struct {
	Name    string `json:"name"`
	TID     int    `json:"tid,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Samples int    `json:"samples"`
	// Cut is the transform that keeps its samples (thread:NAME, by the
	// TID where two threads share the name, endpoint:NAME, job:NAME).
	Cut string `json:"cut"`
}

// apiCuts: the threads, endpoints and jobs of a view's samples, the most
// samples first, each with the transform that cuts the view to it (what
// record, report and top's --thread, --endpoint and --job keep).
func apiCuts(f *file, q *query) (any, error) {
	pv, err := f.view(q)
	if err != nil {
		return nil, err
	}
	p := pv.p
	threads := p.Threads()
	out := struct {
		profileSummary
		Threads   []cutRow `json:"threads"`
		Endpoints []cutRow `json:"endpoints"`
		Jobs      []cutRow `json:"jobs"`
	}{profileSummary: f.summaryOf(pv), Threads: []cutRow{}, Endpoints: []cutRow{}, Jobs: []cutRow{}}
	for _, th := range threads {
		// By its name where that names it alone (a name matches as a
		// regular expression too), else by its TID.
		cut, m := "thread:"+th.Name, profile.NewThreadMatch(th.Name)
		for _, other := range threads {
			if other != th && m.Match(other.Name, other.TID) {
				cut = fmt.Sprintf("thread:%d", th.TID)
			}
		}
		out.Threads = append(out.Threads, cutRow{Name: th.Name, TID: th.TID, PID: th.PID, Samples: th.Samples, Cut: cut})
	}
	for _, g := range p.LabelValues(profile.LabelEndpoint) {
		out.Endpoints = append(out.Endpoints, cutRow{Name: g.Name, Samples: g.Samples, Cut: profile.LabelEndpoint + ":" + g.Name})
	}
	for _, g := range p.LabelValues(profile.LabelJob) {
		out.Jobs = append(out.Jobs, cutRow{Name: g.Name, Samples: g.Samples, Cut: profile.LabelJob + ":" + g.Name})
	}
	return out, nil
}

// callRow is a caller or callee of the sandwich view: a function and the
// samples of the sandwiched function's stacks it is in that place in.
type callRow struct {
	Function string  `json:"function"`
	Kind     string  `json:"kind"`
	Samples  int     `json:"samples"`
	Pct      float64 `json:"pct"` // of the sandwiched function's total
	// Before and Diff compare it with the recording before (the before
	// parameter): its samples there, and its share of each recording's.
	Before int          `json:"before_samples,omitempty"`
	Diff   *shareChange `json:"diff,omitempty"`
}

// apiSandwich: one function (fn, as the function table names it), with
// the functions that call it and those it calls, each with the samples of
// the stacks in which it does. Against a recording before, each of them
// (those of either recording) has its share of the samples of each and
// the change.
func apiSandwich(f *file, q *query) (any, error) {
	name := q.str("fn", "")
	pv, err := f.view(q)
	if err != nil {
		return nil, err
	}
	bv, err := baseline(q)
	if err != nil {
		return nil, err
	}
	p := pv.p
	sw := p.SandwichOf(name, false)
	var before profile.Sandwich
	if bv != nil {
		before = bv.p.SandwichOf(name, false)
		for fn, k := range before.Kinds {
			sw.Kinds[fn] = cmp.Or(sw.Kinds[fn], k)
		}
	}
	if sw.Total == 0 && before.Total == 0 {
		// (One that only the recording before has is what it lost.)
		return nil, fmt.Errorf("fn=%q: no sample of the recording is in that function", name)
	}
	rows := func(m, bm map[string]int) []callRow {
		out := make([]callRow, 0, len(m))
		for fn, n := range m {
			out = append(out, callRow{Function: fn, Kind: string(sw.Kinds[fn]), Samples: n, Pct: output.Pct(n, sw.Total)})
		}
		for fn := range bm {
			if _, ok := m[fn]; !ok {
				out = append(out, callRow{Function: fn, Kind: string(sw.Kinds[fn])})
			}
		}
		for k := range out {
			if bv == nil {
				break
			}
			out[k].Before = bm[out[k].Function]
			out[k].Diff = newShareChange(output.Pct(out[k].Before, bv.p.Samples), output.Pct(out[k].Samples, p.Samples))
		}
		slices.SortFunc(out, func(a, b callRow) int {
			return cmp.Or(cmp.Compare(b.Samples, a.Samples), cmp.Compare(b.Before, a.Before), cmp.Compare(a.Function, b.Function))
		})
		return out
	}
	out := struct {
		profileSummary
		Function string    `json:"function"`
		Self     int       `json:"self"`
		Total    int       `json:"total"`
		Callers  []callRow `json:"callers"`
		Callees  []callRow `json:"callees"`
		// Against a recording before: its figures, the function's self
		// and total there, and their shares of each recording's samples.
		Before      *profileSummary `json:"before,omitempty"`
		BeforeSelf  int             `json:"before_self,omitempty"`
		BeforeTotal int             `json:"before_total,omitempty"`
		SelfDiff    *shareChange    `json:"self_diff,omitempty"`
		TotalDiff   *shareChange    `json:"total_diff,omitempty"`
	}{profileSummary: f.summaryOf(pv), Function: name, Self: sw.Self, Total: sw.Total,
		Callers: rows(sw.Callers, before.Callers), Callees: rows(sw.Callees, before.Callees)}
	if bv != nil {
		bs := q.before.summaryOf(bv)
		out.Before, out.BeforeSelf, out.BeforeTotal = &bs, before.Self, before.Total
		out.SelfDiff = newShareChange(output.Pct(before.Self, bv.p.Samples), output.Pct(sw.Self, p.Samples))
		out.TotalDiff = newShareChange(output.Pct(before.Total, bv.p.Samples), output.Pct(sw.Total, p.Samples))
	}
	return out, nil
}

// diffRow is a function of the comparison of two recordings: its self and
// total samples in each, and the change of its shares of each one's
// samples, in points.
type diffRow struct {
	Function     string  `json:"function"`
	Kind         string  `json:"kind"`
	BeforeSelf   int     `json:"before_self"`
	BeforeTotal  int     `json:"before_total"`
	AfterSelf    int     `json:"after_self"`
	AfterTotal   int     `json:"after_total"`
	SelfChange   float64 `json:"self_change"`
	TotalChange  float64 `json:"total_change"`
	BeforeSelfPc float64 `json:"before_self_pct"`
	AfterSelfPc  float64 `json:"after_self_pct"`
}

// profileDiff compares the function tables of the recording f and the
// recording before: every function of either, largest change of its self
// share first (sort=self) or of its total share (sort=total).
func (s *Server) profileDiff(w http.ResponseWriter, r *http.Request) {
	before, after := s.openPair(w, r, "profile")
	if after == nil {
		return
	}
	answer(w, r, after, func(f *file, q *query) (any, error) {
		sortBy := q.oneOf("sort", "self", "self", "total")
		offset, limit := q.num("offset", 0, 0, 1<<31-1), q.num("limit", 100, 1, maxLimit)
		a, b := before.prof.p, f.prof.p
		byName := map[string]*diffRow{}
		row := func(st profile.FunctionStat) *diffRow {
			n := st.Frame.Name(false)
			d := byName[n]
			if d == nil {
				d = &diffRow{Function: n, Kind: string(st.Frame.Kind)}
				byName[n] = d
			}
			return d
		}
		for _, st := range before.prof.funcs {
			d := row(st)
			d.BeforeSelf, d.BeforeTotal = st.Self, st.Total
		}
		for _, st := range f.prof.funcs {
			d := row(st)
			d.AfterSelf, d.AfterTotal = st.Self, st.Total
		}
		rows := make([]diffRow, 0, len(byName))
		for _, d := range byName {
			d.BeforeSelfPc, d.AfterSelfPc = output.Pct(d.BeforeSelf, a.Samples), output.Pct(d.AfterSelf, b.Samples)
			d.SelfChange = d.AfterSelfPc - d.BeforeSelfPc
			d.TotalChange = output.Pct(d.AfterTotal, b.Samples) - output.Pct(d.BeforeTotal, a.Samples)
			rows = append(rows, *d)
		}
		key := func(d diffRow) float64 {
			if sortBy == "total" {
				return math.Abs(d.TotalChange)
			}
			return math.Abs(d.SelfChange)
		}
		slices.SortFunc(rows, func(x, y diffRow) int {
			return cmp.Or(cmp.Compare(key(y), key(x)), cmp.Compare(x.Function, y.Function))
		})
		return struct {
			Before profileSummary `json:"before"`
			After  profileSummary `json:"after"`
			Sort   string         `json:"sort"`
			Page   page[diffRow]  `json:"page"`
		}{before.profileSummary(), f.profileSummary(), sortBy, paged(rows, offset, limit, func(d diffRow) diffRow { return d })}, nil
	})
}

// maxViews bounds the transformed views a recording keeps.
const maxViews = 32

// view returns the recording f with the transforms the t parameter names
// (profile.ParseTransforms' form) applied, made once and kept.
func (f *file) view(q *query) (*profileView, error) {
	spec := q.str("t", "")
	if spec == "" {
		return f.prof, nil
	}
	ts, err := profile.ParseTransforms(spec)
	if err != nil {
		return nil, err
	}
	pv := f.prof
	pv.mu.Lock()
	defer pv.mu.Unlock()
	if v, ok := pv.transformed[spec]; ok {
		return v, nil
	}
	if pv.transformed == nil || len(pv.transformed) >= maxViews {
		pv.transformed = map[string]*profileView{}
	}
	if err := pv.p.NoMatch(ts); err != nil {
		return nil, err
	}
	tp, err := pv.p.Apply(ts)
	if err != nil {
		return nil, err
	}
	v := newProfileView(tp, pv.title)
	pv.transformed[spec] = v
	return v, nil
}

// timelineThread is a thread's track of the timeline: for each stretch of
// the recording, how many of its samples ran Ruby code (or C), ran the
// GC, or waited for the GVL.
type timelineThread struct {
	Thread string `json:"thread"`
	TID    int    `json:"tid"`
	PID    int    `json:"pid"`
	// Run, GC and GVL hold a count per stretch.
	Run []int `json:"run"`
	GC  []int `json:"gc"`
	GVL []int `json:"gvl"`
	// Fn is, against a recording before (the before parameter), the
	// function each stretch stands for and is coloured by: of those its
	// samples are in, the one that did the most of the change
	// (stretchFunctions); "" for a stretch without samples.
	Fn []string `json:"fn,omitempty"`
}

// apiTimeline: a track per thread over the recording, cut in stretches
// of equal time, with what each thread's samples were doing in each;
// against a recording before, the function each stretch stands for and
// the change of its share. With zoom=1 the stretches cut the time window
// of the transforms (time:FROM-TO) instead of the whole recording.
func apiTimeline(f *file, q *query) (any, error) {
	n := q.num("stretches", 200, 10, 2000)
	zoom := q.oneOf("zoom", "0", "0", "1") == "1"
	pv, err := f.view(q)
	if err != nil {
		return nil, err
	}
	if q.err != nil {
		return nil, q.err
	}
	p := pv.p
	if p.Timeline == nil {
		return nil, profile.ErrNoTimeline
	}
	state := make([]byte, len(p.Stacks)) // 0 run, 1 gc, 2 gvl
	for i, st := range p.Stacks {
		for _, id := range st.Frames {
			switch p.Frames[id].Kind {
			case profile.KindGC:
				state[i] = 1
			case profile.KindGVL:
				state[i] = 2
			}
		}
	}
	span := p.Duration
	for _, s := range p.Timeline {
		span = max(span, s.Time+1)
	}
	// The stretches cut [lo, lo+span): the whole recording, or zoomed,
	// the window its transforms keep (view has read them).
	var lo time.Duration
	if zoom {
		ts, _ := profile.ParseTransforms(q.str("t", ""))
		from, to := profile.Window(ts)
		if to == 0 || to > span {
			to = span
		}
		if from < to {
			lo, span = from, to-from
		}
	}
	type key struct{ pid, tid int }
	idx := map[key]int{}
	threads := []timelineThread{}
	for _, s := range p.Timeline {
		k := key{s.PID, s.TID}
		i, ok := idx[k]
		if !ok {
			i = len(threads)
			idx[k] = i
			threads = append(threads, timelineThread{Thread: s.Thread, TID: s.TID, PID: s.PID, Run: make([]int, n), GC: make([]int, n), GVL: make([]int, n)})
		}
		b := stretchOf(s.Time-lo, span, n)
		switch state[s.Stack] {
		case 1:
			threads[i].GC[b]++
		case 2:
			threads[i].GVL[b]++
		default:
			threads[i].Run[b]++
		}
	}
	out := struct {
		profileSummary
		// The stretches cut the time from From for Span seconds.
		From    float64          `json:"from_seconds"`
		Span    float64          `json:"span_seconds"`
		Threads []timelineThread `json:"threads"`
		// Against a recording before: its figures, and the change of
		// the share of the samples of each function a stretch stands
		// for, as each recording's function table gives it.
		Before  *profileSummary         `json:"before,omitempty"`
		Changes map[string]*shareChange `json:"changes,omitempty"`
	}{profileSummary: f.summaryOf(pv), From: lo.Seconds(), Span: span.Seconds(), Threads: threads}
	bv, err := baseline(q)
	if err != nil || bv == nil {
		return out, err
	}
	bs := q.before.summaryOf(bv)
	out.Before, out.Changes = &bs, map[string]*shareChange{}
	before, after := output.TotalShares(bv.funcs, bv.p.Samples), output.TotalShares(pv.funcs, p.Samples)
	change := make(map[string]float64, len(after))
	for fn, a := range after {
		change[fn] = a - before[fn]
	}
	for i, fns := range stretchFunctions(p, len(threads), n, lo, span, func(s profile.Sample) int { return idx[key{s.PID, s.TID}] }, change) {
		threads[i].Fn = fns
		for _, fn := range fns {
			if _, ok := out.Changes[fn]; fn != "" && !ok {
				out.Changes[fn] = newShareChange(before[fn], after[fn])
			}
		}
	}
	return out, nil
}

// stretchOf is the stretch of the n over span that time t (since the
// first stretch's start) falls in.
func stretchOf(t, span time.Duration, n int) int {
	return max(0, min(int(int64(t)*int64(n)/int64(max(span, 1))), n-1))
}

// stretchFunctions returns, for each of the timeline's threads (thread
// gives a sample's) and each of its n stretches over span from lo, the function
// of its samples' stacks whose share changed the most against the
// recording before, by change[function] times the samples it is in: the
// function that did most of the stretch's part in the change ("" for a
// stretch without samples; of two alike, the first by name).
func stretchFunctions(p *profile.Profile, threads, n int, lo, span time.Duration, thread func(profile.Sample) int, change map[string]float64) [][]string {
	type cell struct{ thread, stretch, stack int }
	counts := map[cell]int{}
	for _, s := range p.Timeline {
		counts[cell{thread(s), stretchOf(s.Time-lo, span, n), s.Stack}]++
	}
	// Each stack's functions, each once however deep it recurses.
	fns := make([][]string, len(p.Stacks))
	for i, st := range p.Stacks {
		for _, id := range st.Frames {
			if fn := p.Frames[id].Name(false); !slices.Contains(fns[i], fn) {
				fns[i] = append(fns[i], fn)
			}
		}
	}
	type fnCell struct {
		thread, stretch int
		fn              string
	}
	in := map[fnCell]int{}
	for c, k := range counts {
		for _, fn := range fns[c.stack] {
			in[fnCell{c.thread, c.stretch, fn}] += k
		}
	}
	out := make([][]string, threads)
	most := make([][]float64, threads)
	for i := range out {
		out[i], most[i] = make([]string, n), make([]float64, n)
	}
	for c, k := range in {
		score := math.Abs(change[c.fn]) * float64(k)
		if o, m := out[c.thread][c.stretch], most[c.thread][c.stretch]; o == "" || score > m || score == m && c.fn < o {
			out[c.thread][c.stretch], most[c.thread][c.stretch] = c.fn, score
		}
	}
	return out
}
