package ui

import (
	"context"
	"fmt"
	"html"
	"math"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/recording"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/testruby"
)

// recordRaw records live process pid for d into a raw recording, as
// record -p PID --rate 250 --duration d -f raw does.
func recordRaw(t *testing.T, pid int, d time.Duration, path string) {
	t.Helper()
	raw, err := output.Lookup("raw")
	if err != nil {
		t.Fatal(err)
	}
	opts := sampler.Options{Rate: 250, Duration: d, VM: rubyvm.Options{}, Realtime: true, Timeline: raw.Timeline}
	if _, err := recording.Run(context.Background(), recording.Options{PID: pid, Sampler: opts, Path: path, Format: raw, Output: output.Options{Lines: true}}); err != nil {
		t.Fatalf("recording pid %d: %v", pid, err)
	}
}

// TestProfileDiffViews: two recordings of one program (testdata/split.rb:
// burn called from chain_a's, chain_b's and chain_c's blocks); the first's
// stack chart is its samples (checkStackChart); the two compared in
// every view that compares: each call tree node's, sandwich row's, stack
// chart box's and timeline stretch's shares of each recording are the
// ones each recording's own view gives, the change their difference on
// the differential flame graph's colour.
func TestProfileDiffViews(t *testing.T) {
	p := testruby.Start(t, testruby.Rubies(t)[0], "split.rb", nil, "30")
	var rep struct{ PID int }
	p.WaitReport(t, &rep, 30*time.Second)
	dir := t.TempDir()
	first, again := filepath.Join(dir, "split.raw.gz"), filepath.Join(dir, "split-again.raw.gz")
	recordRaw(t, p.PID(), 2*time.Second, first)
	recordRaw(t, p.PID(), time.Second, again)
	ts := newTestServer(t, Options{Files: []string{first, again}})
	var fns struct {
		Page page[struct{ Function string }]
	}
	ts.get(t, "/api/profile/functions?f=0&limit=1000", &fns)
	var burn, chainA string
	for _, r := range fns.Page.Rows {
		switch {
		case strings.HasPrefix(r.Function, "Object#burn ("):
			burn = r.Function
		case strings.HasPrefix(r.Function, "Object#chain_a ("):
			chainA = r.Function
		}
	}
	if burn == "" || chainA == "" {
		t.Fatalf("setup: no burn or chain_a among %+v", fns.Page.Rows)
	}
	// The stack chart of the split workload's one thread, box by box, is
	// the recording's samples.
	checkStackChart(t, ts, 0, first, chainA)
	checkTreeDiff(t, ts, 0, 1)
	checkSandwichDiff(t, ts, 0, 1, burn)
	checkSandwichDiff(t, ts, 0, 1, chainA)
	checkStackChartDiff(t, ts, 0, 1)
	checkTimelineDiff(t, ts, 0, 1)
}

// shareView is a node's comparison with the recording before, as the
// views answer it.
type shareView struct {
	BeforePct float64 `json:"before_pct"`
	AfterPct  float64 `json:"after_pct"`
	Change    float64
	Color     string
}

// treeRowView is a call tree node as the tree view answers it.
type treeRowView struct {
	Node     int
	Name     string
	Total    int
	TotalPct float64 `json:"total_pct"`
	Children int
	Diff     *shareView
}

// treeShares walks the whole call tree of the page's recording f (against
// the recording before, unless -1) and returns each node's row by its
// path of frames.
func treeShares(t *testing.T, ts *testServer, f, before int) map[string]treeRowView {
	t.Helper()
	out := map[string]treeRowView{}
	var walk func(node int, path string)
	walk = func(node int, path string) {
		var d struct {
			Node     treeRowView
			Children page[treeRowView]
			Before   *struct{ File string }
		}
		q := fmt.Sprintf("/api/profile/tree?f=%d&node=%d&limit=1000", f, node)
		if before >= 0 {
			q += fmt.Sprintf("&before=%d", before)
		}
		ts.get(t, q, &d)
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
func checkShares(t *testing.T, what string, got *shareView, before, after float64) {
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
func checkTreeDiff(t *testing.T, ts *testServer, f, before int) {
	t.Helper()
	own, base, diffed := treeShares(t, ts, f, -1), treeShares(t, ts, before, -1), treeShares(t, ts, f, before)
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

type sandwichView struct {
	Samples          int
	Self, Total      int
	BeforeSelf       int        `json:"before_self"`
	BeforeTotal      int        `json:"before_total"`
	SelfDiff         *shareView `json:"self_diff"`
	TotalDiff        *shareView `json:"total_diff"`
	Callers, Callees []struct {
		Function string
		Samples  int
		Before   int `json:"before_samples"`
		Diff     *shareView
	}
	Before *struct{ Samples int }
}

// checkSandwichDiff checks the sandwich of fn in the page's recording f
// against before: the function's and each caller's and callee's samples
// on either side are those of each recording's own sandwich, their shares
// of each one's samples.
func checkSandwichDiff(t *testing.T, ts *testServer, f, before int, fn string) {
	t.Helper()
	var own, base, diffed sandwichView
	ts.get(t, fmt.Sprintf("/api/profile/sandwich?f=%d&fn=%s", f, url.QueryEscape(fn)), &own)
	ts.get(t, fmt.Sprintf("/api/profile/sandwich?f=%d&fn=%s", before, url.QueryEscape(fn)), &base)
	ts.get(t, fmt.Sprintf("/api/profile/sandwich?f=%d&fn=%s&before=%d", f, url.QueryEscape(fn), before), &diffed)
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
			Diff     *shareView
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

// functionShares is each function's share of the page's recording f's
// samples, in percent, as its own function table gives it.
func functionShares(t *testing.T, ts *testServer, f int) map[string]float64 {
	t.Helper()
	var d struct {
		Page page[struct {
			Function string
			TotalPct float64 `json:"total_pct"`
		}]
	}
	ts.get(t, fmt.Sprintf("/api/profile/functions?f=%d&limit=1000", f), &d)
	if len(d.Page.Rows) != d.Page.Total || len(d.Page.Rows) < 3 {
		t.Fatalf("function table of %d: %d of %d rows", f, len(d.Page.Rows), d.Page.Total)
	}
	out := map[string]float64{}
	for _, r := range d.Page.Rows {
		out[r.Function] = r.TotalPct
	}
	return out
}

var chartDiffBoxRe = regexp.MustCompile(`<g class="f" [^>]*data-fn="([^"]*)"[^>]*data-before="([^"]*)" data-after="([^"]*)" data-change="([^"]*)"><title>([^<]*)</title><rect [^>]*fill="([^"]*)"`)

// checkStackChartDiff checks the stack chart of the page's recording f
// against before: every box has its function's share of each recording's
// samples as each one's own function table gives it, the change on the
// differential flame graph's colour, and all three in its title.
func checkStackChartDiff(t *testing.T, ts *testServer, f, before int) {
	t.Helper()
	own, base := functionShares(t, ts, f), functionShares(t, ts, before)
	rec := ts.request(t, fmt.Sprintf("/api/profile/stackchart.svg?f=%d&before=%d", f, before))
	svg := rec.Body.Bytes()
	if rec.Code != 200 {
		t.Fatalf("stack chart of %d against %d: %d %s", f, before, rec.Code, svg)
	}
	boxes := strings.Count(string(svg), `<g class="f" `)
	matches := chartDiffBoxRe.FindAllStringSubmatch(string(svg), -1)
	if len(matches) != boxes || boxes < 5 {
		t.Fatalf("stack chart of %d against %d: %d boxes, %d of them compared", f, before, boxes, len(matches))
	}
	up, down := 0, 0
	for _, m := range matches {
		fn := html.UnescapeString(m[1])
		b, _ := strconv.ParseFloat(m[2], 64)
		a, _ := strconv.ParseFloat(m[3], 64)
		c, _ := strconv.ParseFloat(m[4], 64)
		if _, ok := own[fn]; !ok {
			t.Errorf("stack chart box of %s, which %d's function table lacks", fn, f)
		}
		checkShares(t, "stack chart box of "+fn, &shareView{BeforePct: b, AfterPct: a, Change: c, Color: m[6]}, base[fn], own[fn])
		if m[6] != output.ChangeColor(own[fn]-base[fn]) {
			t.Errorf("stack chart box of %s: %s, the differential flame graph's colour %s", fn, m[6], output.ChangeColor(own[fn]-base[fn]))
		}
		if want := fmt.Sprintf("; in %.2f%% of the samples, %.2f%% before: %+.2f points)", own[fn], base[fn], own[fn]-base[fn]); !strings.HasSuffix(html.UnescapeString(m[5]), want) {
			t.Errorf("stack chart box of %s: title %q, want it to end %q", fn, m[5], want)
		}
		switch {
		case c > 0:
			up++
		case c < 0:
			down++
		}
	}
	// Two recordings of one program: some box changes (which way each
	// goes is the sampling's luck; each one's colour is checked above).
	if up+down == 0 {
		t.Errorf("stack chart of %d against %d: no box changed", f, before)
	}
	t.Logf("stack chart of %d against %d: %d boxes up, %d down", f, before, up, down)
}

// checkTimelineDiff checks the timeline of the page's recording f against
// before: each stretch with samples stands for a function of f's, its
// shares those of each recording's own function table; without before,
// none.
func checkTimelineDiff(t *testing.T, ts *testServer, f, before int) {
	t.Helper()
	own, base := functionShares(t, ts, f), functionShares(t, ts, before)
	type timeline struct {
		Threads []struct {
			Run, GC, GVL []int
			Fn           []string
		}
		Before  *struct{ File string }
		Changes map[string]*shareView
	}
	var plain, diffed timeline
	ts.get(t, fmt.Sprintf("/api/profile/timeline?f=%d&stretches=100", f), &plain)
	ts.get(t, fmt.Sprintf("/api/profile/timeline?f=%d&stretches=100&before=%d", f, before), &diffed)
	if plain.Before != nil || plain.Changes != nil || diffed.Before == nil || len(diffed.Threads) != len(plain.Threads) {
		t.Fatalf("timeline of %d: before %v, %d changes; against %d: before %v, %d threads of %d", f, plain.Before, len(plain.Changes), before, diffed.Before, len(diffed.Threads), len(plain.Threads))
	}
	used := map[string]bool{}
	for i, th := range diffed.Threads {
		if len(th.Fn) != 100 || !slices.Equal(th.Run, plain.Threads[i].Run) || !slices.Equal(th.GC, plain.Threads[i].GC) {
			t.Fatalf("timeline of %d against %d, thread %d: %d functions, its stretches' counts differ from its own timeline's", f, before, i, len(th.Fn))
		}
		for k, fn := range th.Fn {
			if all := th.Run[k] + th.GC[k] + th.GVL[k]; (all > 0) != (fn != "") {
				t.Errorf("timeline of %d against %d, thread %d, stretch %d: %d samples, function %q", f, before, i, k, all, fn)
			}
			if fn == "" {
				continue
			}
			used[fn] = true
			if _, ok := own[fn]; !ok {
				t.Errorf("timeline stretch of %s, which %d's function table lacks", fn, f)
			}
			if _, ok := diffed.Changes[fn]; !ok {
				t.Errorf("timeline stretch of %s without its change", fn)
			}
		}
	}
	for fn, c := range diffed.Changes {
		if !used[fn] {
			t.Errorf("timeline change of %s, which no stretch stands for", fn)
		}
		checkShares(t, "timeline stretch of "+fn, c, base[fn], own[fn])
	}
	if len(used) == 0 {
		t.Errorf("timeline of %d against %d: no stretch stands for a function", f, before)
	}
}
