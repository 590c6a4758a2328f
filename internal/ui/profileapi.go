package ui

import (
	"cmp"
	"slices"

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

func (f *file) profileSummary() profileSummary {
	p := f.prof.p
	gc, gvl := p.Breakdown()
	return profileSummary{File: f.Name, Title: f.prof.title, Samples: p.Samples, Seconds: p.Duration.Seconds(), Rate: p.Rate,
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
	p := f.prof.p
	rows := slices.Clone(f.prof.funcs) // summary's order: self, total, name
	switch sortBy {
	case "total":
		slices.SortStableFunc(rows, func(a, b profile.FunctionStat) int { return cmp.Compare(b.Total, a.Total) })
	case "name":
		slices.SortStableFunc(rows, func(a, b profile.FunctionStat) int { return cmp.Compare(a.Frame.Name(false), b.Frame.Name(false)) })
	}
	return struct {
		profileSummary
		Sort string            `json:"sort"`
		Page page[functionRow] `json:"page"`
	}{f.profileSummary(), sortBy, paged(rows, offset, limit, func(s profile.FunctionStat) functionRow {
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
}

// apiTree: one node of the call tree and its children (node=0: the
// root), expanded one level at a time.
func apiTree(f *file, q *query) (any, error) {
	t := f.prof.tree
	id := q.num("node", 0, 0, len(t)-1)
	offset, limit := q.num("offset", 0, 0, 1<<31-1), q.num("limit", 200, 1, maxLimit)
	if q.err != nil {
		return nil, q.err
	}
	p := f.prof.p
	row := func(n int) treeRow {
		r := treeRow{Node: n, Name: "(all)", Self: t[n].Self, Total: t[n].Total, TotalPct: output.Pct(t[n].Total, p.Samples), Children: len(t[n].Children)}
		if fr := t[n].Frame; fr >= 0 {
			r.Name, r.Kind = p.Frames[fr].Name(true), string(p.Frames[fr].Kind)
		}
		return r
	}
	ancestors := []treeRow{}
	for a := t[id].Parent; a >= 0; a = t[a].Parent {
		ancestors = append([]treeRow{row(a)}, ancestors...)
	}
	return struct {
		profileSummary
		Node      treeRow       `json:"node"`
		Ancestors []treeRow     `json:"ancestors"`
		Children  page[treeRow] `json:"children"`
	}{f.profileSummary(), row(id), ancestors, paged(t[id].Children, offset, limit, row)}, nil
}
