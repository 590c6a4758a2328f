package main

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
)

// uiShares is a node's comparison with the recording before, as the
// page's answers give it.
type uiShares struct {
	BeforePct float64 `json:"before_pct"`
	AfterPct  float64 `json:"after_pct"`
	Change    float64
	Color     string
}

type uiTreeRow struct {
	Node     int
	Name     string
	Total    int
	TotalPct float64 `json:"total_pct"`
	Children int
	Diff     *uiShares
}

// treeShares walks the whole call tree of the page's recording f (against
// the recording before, unless -1) and returns each node's row by its
// path of frames.
func treeShares(t *testing.T, s *uiServer, f, before int) map[string]uiTreeRow {
	t.Helper()
	out := map[string]uiTreeRow{}
	var walk func(node int, path string)
	walk = func(node int, path string) {
		var d struct {
			Node     uiTreeRow
			Children uiPage[uiTreeRow]
			Before   *struct{ File string }
		}
		q := fmt.Sprintf("/api/profile/tree?f=%d&node=%d&limit=1000", f, node)
		if before >= 0 {
			q += fmt.Sprintf("&before=%d", before)
		}
		s.get(t, q, &d)
		if (before >= 0) != (d.Before != nil) || len(d.Children.Rows) != d.Children.Total {
			t.Fatalf("%s: before %v, %d of %d children", q, d.Before, len(d.Children.Rows), d.Children.Total)
		}
		out[path] = d.Node
		for _, c := range d.Children.Rows {
			walk(c.Node, path+";"+c.Name)
		}
	}
	walk(0, "")
	return out
}

// checkShares checks a comparison's figures: the shares of each side are
// the ones given, the change is their difference, coloured as the
// differential flame graph colours it (red up, blue down).
func checkShares(t *testing.T, what string, got *uiShares, before, after float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: no comparison", what)
		return
	}
	color := "rgb(255,255,255)"
	switch {
	case got.Change > 0:
		color = "rgb(255,"
	case got.Change < 0:
		color = "rgb("
	}
	if got.BeforePct != before || got.AfterPct != after || math.Abs(got.Change-(after-before)) > 1e-9 || !strings.HasPrefix(got.Color, color) ||
		got.Change < 0 && !strings.HasSuffix(got.Color, ",255)") {
		t.Errorf("%s: %+v; want before %v%%, after %v%%", what, got, before, after)
	}
}

// checkTreeDiff checks the call tree of the page's recording f against
// before: every node has its share of f's samples as f's own call tree
// gives it, and its stack's share of before's as before's own call tree
// does (none for a stack before lacks).
func checkTreeDiff(t *testing.T, s *uiServer, f, before int) {
	t.Helper()
	own, base, diffed := treeShares(t, s, f, -1), treeShares(t, s, before, -1), treeShares(t, s, f, before)
	if len(diffed) != len(own) || len(own) < 5 {
		t.Errorf("call tree against %d: %d nodes, its own %d", before, len(diffed), len(own))
	}
	shared := 0
	for path, r := range diffed {
		b, ok := base[path]
		if ok {
			shared++
		}
		checkShares(t, "call tree node "+path, r.Diff, b.TotalPct, own[path].TotalPct)
	}
	if shared < 2 {
		t.Errorf("call tree against %d: %d stacks in both, want some beyond the root", before, shared)
	}
}

type uiSandwich struct {
	Samples          int
	Self, Total      int
	BeforeSelf       int       `json:"before_self"`
	BeforeTotal      int       `json:"before_total"`
	SelfDiff         *uiShares `json:"self_diff"`
	TotalDiff        *uiShares `json:"total_diff"`
	Callers, Callees []struct {
		Function string
		Samples  int
		Before   int `json:"before_samples"`
		Diff     *uiShares
	}
	Before *struct{ Samples int }
}

// checkSandwichDiff checks the sandwich of fn in the page's recording f
// against before: the function's and each caller's and callee's samples
// on either side are those of each recording's own sandwich, their shares
// of each one's samples.
func checkSandwichDiff(t *testing.T, s *uiServer, f, before int, fn string) {
	t.Helper()
	var own, base, diffed uiSandwich
	s.get(t, fmt.Sprintf("/api/profile/sandwich?f=%d&fn=%s", f, url.QueryEscape(fn)), &own)
	s.get(t, fmt.Sprintf("/api/profile/sandwich?f=%d&fn=%s", before, url.QueryEscape(fn)), &base)
	s.get(t, fmt.Sprintf("/api/profile/sandwich?f=%d&fn=%s&before=%d", f, url.QueryEscape(fn), before), &diffed)
	if diffed.Before == nil || diffed.Before.Samples != base.Samples || diffed.Total != own.Total || diffed.BeforeTotal != base.Total || diffed.BeforeSelf != base.Self {
		t.Fatalf("sandwich of %s against %d: total %d before %d, self before %d; own %d, before's %d and %d", fn, before, diffed.Total, diffed.BeforeTotal, diffed.BeforeSelf, own.Total, base.Total, base.Self)
	}
	pct := func(n, of int) float64 { return 100 * float64(n) / float64(of) }
	checkShares(t, "sandwich of "+fn+", total", diffed.TotalDiff, pct(base.Total, base.Samples), pct(own.Total, own.Samples))
	checkShares(t, "sandwich of "+fn+", self", diffed.SelfDiff, pct(base.Self, base.Samples), pct(own.Self, own.Samples))
	for _, side := range []struct {
		name            string
		got, mine, base []struct {
			Function string
			Samples  int
			Before   int `json:"before_samples"`
			Diff     *uiShares
		}
	}{{"callers", diffed.Callers, own.Callers, base.Callers}, {"callees", diffed.Callees, own.Callees, base.Callees}} {
		mine, theirs := map[string]int{}, map[string]int{}
		for _, r := range side.mine {
			mine[r.Function] = r.Samples
		}
		for _, r := range side.base {
			theirs[r.Function] = r.Samples
		}
		seen := map[string]bool{}
		for _, r := range side.got {
			seen[r.Function] = true
			if r.Samples != mine[r.Function] || r.Before != theirs[r.Function] {
				t.Errorf("sandwich of %s, %s %s: %d, before %d; its own sandwiches: %d and %d", fn, side.name, r.Function, r.Samples, r.Before, mine[r.Function], theirs[r.Function])
			}
			checkShares(t, "sandwich of "+fn+", "+side.name+" "+r.Function, r.Diff, pct(theirs[r.Function], base.Samples), pct(mine[r.Function], own.Samples))
		}
		if len(seen) < len(mine) || len(seen) < len(theirs) {
			t.Errorf("sandwich of %s, %s: %d rows; %d and %d in its own sandwiches", fn, side.name, len(seen), len(mine), len(theirs))
		}
	}
}
