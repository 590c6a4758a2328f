package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestUIProfileAgainstReport holds the profile views to report's summary
// and collapsed stacks of the same recording.
func TestUIProfileAgainstReport(t *testing.T) {
	raw := testruby.Testdata("golden/demo.raw.gz")
	notRaw := filepath.Join(t.TempDir(), "not.raw.gz")
	os.WriteFile(notRaw, []byte{0x1f, 0x8b, 8, 0, 0, 0}, 0o600)
	s := startUI(t, raw, notRaw)
	files := s.waitLoaded(t)
	if files[0].State != "ready" || files[0].Kind != "profile" || files[1].State != "error" ||
		!strings.HasPrefix(files[1].Error, notRaw+": not a raw recording (rbscope record --format raw): ") {
		t.Fatalf("files: %+v", files)
	}

	summary, stderr, code := rbscope(t, "report", "-i", raw, "-f", "summary", "-o", "-")
	if code != 0 {
		t.Fatalf("report: %s", stderr)
	}
	type row struct {
		Function        string
		Self, Total     int
		SelfPct, TotPct string
	}
	var want []row
	re := regexp.MustCompile(`(?m)^ *([\d.]+)% +([\d.]+)% +(\d+) +(\d+)  (.*)$`)
	for _, m := range re.FindAllStringSubmatch(summary, -1) {
		self, _ := strconv.Atoi(m[3])
		total, _ := strconv.Atoi(m[4])
		want = append(want, row{m[5], self, total, m[1], m[2]})
	}
	var fn struct {
		Samples   int
		Ticks     int
		Breakdown string
		Page      uiPage[struct {
			Function          string
			Self, Total       int
			SelfPct, TotalPct float64 `json:"-"`
			SP                float64 `json:"self_pct"`
			TP                float64 `json:"total_pct"`
		}]
	}
	s.get(t, "/api/profile/functions?f=0", &fn)
	var got []row
	for _, r := range fn.Page.Rows {
		got = append(got, row{r.Function, r.Self, r.Total, fmt.Sprintf("%.2f", r.SP), fmt.Sprintf("%.2f", r.TP)})
	}
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("functions:\n%+v\nreport -f summary:\n%+v", got, want)
	}
	if head := fmt.Sprintf("%d samples in ", fn.Samples); !strings.HasPrefix(summary, head) || !strings.Contains(summary, fmt.Sprintf("(%d ticks,", fn.Ticks)) ||
		!strings.Contains(summary, fn.Breakdown+"\n") {
		t.Errorf("header: %d samples, %d ticks, %q; summary:\n%s", fn.Samples, fn.Ticks, fn.Breakdown, summary)
	}
	var byTotal struct{ Page uiPage[struct{ Total int }] }
	s.get(t, "/api/profile/functions?f=0&sort=total", &byTotal)
	for k := 1; k < len(byTotal.Page.Rows); k++ {
		if byTotal.Page.Rows[k].Total > byTotal.Page.Rows[k-1].Total {
			t.Errorf("sort=total: not by total")
		}
	}

	// The call tree: every collapsed stack is a path of the tree whose
	// last node has the stack's count as its own.
	collapsed, _, code := rbscope(t, "report", "-i", raw, "-f", "collapsed", "-o", "-")
	if code != 0 {
		t.Fatal("report -f collapsed failed")
	}
	type node struct {
		Node     int
		Name     string
		Self     int
		Total    int
		Children int
	}
	kids := map[int][]node{}
	children := func(n int) []node {
		if k, ok := kids[n]; ok {
			return k
		}
		var d struct{ Children uiPage[node] }
		s.get(t, fmt.Sprintf("/api/profile/tree?f=0&node=%d&limit=1000", n), &d)
		kids[n] = d.Children.Rows
		return d.Children.Rows
	}
	var sum int
	for _, line := range strings.Split(strings.TrimSpace(collapsed), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		count, _ := strconv.Atoi(line[sp+1:])
		sum += count
		n := node{Node: 0}
		for _, name := range strings.Split(line[:sp], ";") {
			k := slices.IndexFunc(children(n.Node), func(c node) bool { return strings.ReplaceAll(c.Name, ";", ":") == name })
			if k < 0 {
				t.Fatalf("no node %q under node %d (%s)", name, n.Node, line)
			}
			n = children(n.Node)[k]
		}
		if n.Self != count {
			t.Errorf("%s: tree says %d samples, collapsed %d", line, n.Self, count)
		}
	}
	var root struct{ Node node }
	s.get(t, "/api/profile/tree?f=0", &root)
	if root.Node.Total != sum || sum != fn.Samples {
		t.Errorf("tree root %d samples, collapsed adds up to %d, summary %d", root.Node.Total, sum, fn.Samples)
	}

	// The flame graph is output's SVG, served with its own policy.
	resp, err := http.Get(s.base + "/api/profile/flame.svg?f=0&token=" + s.token)
	if err != nil {
		t.Fatal(err)
	}
	svg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(svg), fmt.Sprintf(">%d samples, ", fn.Samples)) ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("flame.svg: %d %s", resp.StatusCode, resp.Header)
	}
}

// summaryRows parses report -f summary's function table: function -> self,
// total.
func summaryRows(t *testing.T, raw string) map[string][2]int {
	t.Helper()
	summary, stderr, code := rbscope(t, "report", "-i", raw, "-f", "summary", "-o", "-")
	if code != 0 {
		t.Fatalf("report: %s", stderr)
	}
	out := map[string][2]int{}
	for _, m := range regexp.MustCompile(`(?m)^ *[\d.]+% +[\d.]+% +(\d+) +(\d+)  (.*)$`).FindAllStringSubmatch(summary, -1) {
		self, _ := strconv.Atoi(m[1])
		total, _ := strconv.Atoi(m[2])
		out[m[3]] = [2]int{self, total}
	}
	return out
}

// TestUIProfileSandwichAndDiff: a function's callers and callees are what
// the collapsed stacks of report say (a recording of split.rb: burn called
// from chain_a's, chain_b's and chain_c's blocks); the comparison of two
// recordings lists every function of either with report's self and total
// for each, and the change of its shares; both views render in Chromium.
func TestUIProfileSandwichAndDiff(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "30")
	raw := filepath.Join(t.TempDir(), "split.raw.gz")
	if _, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--rate", "250", "--duration", "2s", "-f", "raw", "-o", raw); code != 0 {
		t.Fatalf("record: %s", stderr)
	}
	// A second recording of the same program, to compare the first with
	// stack for stack.
	again := filepath.Join(t.TempDir(), "split-again.raw.gz")
	if _, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--rate", "250", "--duration", "1s", "-f", "raw", "-o", again); code != 0 {
		t.Fatalf("record: %s", stderr)
	}
	demo := testruby.Testdata("golden/demo.raw.gz")
	s := startUI(t, demo, raw, again)
	s.waitLoaded(t)

	// Sandwich of burn, against the collapsed stacks.
	collapsed, _, code := rbscope(t, "report", "-i", raw, "-f", "collapsed", "--nolineno", "-o", "-")
	if code != 0 {
		t.Fatal("report -f collapsed failed")
	}
	var burn string
	callers, callees := map[string]int{}, map[string]int{}
	var self, total int
	for _, line := range strings.Split(strings.TrimSpace(collapsed), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		n, _ := strconv.Atoi(line[sp+1:])
		frames := strings.Split(line[:sp], ";")
		seenR, seenE, in := map[string]bool{}, map[string]bool{}, false
		for k, fr := range frames {
			if !strings.HasPrefix(fr, "Object#burn (") {
				continue
			}
			burn, in = fr, true
			if c := frames[k-1]; !seenR[c] {
				seenR[c] = true
				callers[c] += n
			}
			if k+1 < len(frames) && !seenE[frames[k+1]] {
				seenE[frames[k+1]] = true
				callees[frames[k+1]] += n
			}
		}
		if in {
			total += n
			if strings.HasPrefix(frames[len(frames)-1], "Object#burn (") {
				self += n
			}
		}
	}
	if burn == "" || len(callers) != 3 {
		t.Fatalf("setup: burn %q called from %v in the collapsed stacks", burn, callers)
	}
	var sw struct {
		Function         string
		Self, Total      int
		Callers, Callees []struct {
			Function string
			Samples  int
		}
	}
	s.get(t, "/api/profile/sandwich?f=1&fn="+url.QueryEscape(burn), &sw)
	got := func(rows []struct {
		Function string
		Samples  int
	}) map[string]int {
		m := map[string]int{}
		for _, r := range rows {
			m[r.Function] = r.Samples
		}
		return m
	}
	if sw.Function != burn || sw.Self != self || sw.Total != total || !reflect.DeepEqual(got(sw.Callers), callers) || !reflect.DeepEqual(got(sw.Callees), callees) {
		t.Errorf("sandwich of %s: self %d total %d, callers %v callees %v; collapsed: self %d total %d, callers %v callees %v",
			burn, sw.Self, sw.Total, got(sw.Callers), got(sw.Callees), self, total, callers, callees)
	}

	// Search: the functions whose name holds "chain_", and the samples of
	// the collapsed stacks that pass through any of them.
	want, fns := 0, map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(collapsed), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		if n, _ := strconv.Atoi(line[sp+1:]); strings.Contains(strings.ToLower(line[:sp]), "chain_") {
			want += n
		}
		for _, fr := range strings.Split(line[:sp], ";") {
			if strings.Contains(strings.ToLower(fr), "chain_") {
				fns[fr] = true
			}
		}
	}
	var found struct {
		Matched int `json:"matched_samples"`
		Page    uiPage[struct{ Function string }]
	}
	s.get(t, "/api/profile/functions?f=1&limit=1000&search=CHAIN_", &found)
	if found.Matched != want || len(found.Page.Rows) != len(fns) || len(fns) < 3 {
		t.Errorf("search chain_: %d functions %v in %d samples; the collapsed stacks have %d", len(found.Page.Rows), found.Page.Rows, found.Matched, want)
	}

	// Transforms, against the collapsed stacks: focus on chain_a keeps the
	// samples through it, rooted at it; drop leaves them out; merging
	// burn gives its samples to its callers (the blocks of the chains).
	var chainA string
	through, all := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(collapsed), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		n, _ := strconv.Atoi(line[sp+1:])
		all += n
		for _, fr := range strings.Split(line[:sp], ";") {
			if strings.HasPrefix(fr, "Object#chain_a (") {
				chainA = fr
			}
		}
		if strings.Contains(line[:sp], "Object#chain_a (") {
			through += n
		}
	}
	type fnPage struct {
		Samples int
		Page    uiPage[struct {
			Function    string
			Self, Total int
		}]
	}
	for _, tc := range []struct {
		t       string
		samples int
	}{{"focus:" + chainA, through}, {"drop:" + chainA, all - through}, {"merge:" + burn, all}} {
		var fp fnPage
		s.get(t, "/api/profile/functions?f=1&limit=1000&t="+url.QueryEscape(tc.t), &fp)
		if fp.Samples != tc.samples {
			t.Errorf("%s: %d samples, the collapsed stacks give %d", tc.t, fp.Samples, tc.samples)
		}
		for _, r := range fp.Page.Rows {
			switch {
			case strings.HasPrefix(tc.t, "focus:") && r.Function == chainA && r.Total != tc.samples:
				t.Errorf("focus: chain_a in %d of %d samples", r.Total, tc.samples)
			case strings.HasPrefix(tc.t, "drop:") && r.Function == chainA, strings.HasPrefix(tc.t, "merge:") && r.Function == burn:
				t.Errorf("%s: %s still in the table", tc.t, r.Function)
			}
		}
	}
	resp, err := http.Get(s.base + "/api/profile/flame.svg?f=1&token=" + s.token + "&t=" + url.QueryEscape("focus:"+chainA))
	if err != nil {
		t.Fatal(err)
	}
	svg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(svg), fmt.Sprintf(">%d samples, ", through)) {
		t.Errorf("the flame graph focused on chain_a does not say %d samples", through)
	}

	// The differential flame graph against the other recording: burn,
	// none of whose frames the other has, took its whole share more.
	resp, err = http.Get(s.base + "/api/profile/flame.svg?f=1&before=0&token=" + s.token)
	if err != nil {
		t.Fatal(err)
	}
	svg, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`<title>Object#burn \(` + "[^<]*" + `, \+[\d.]+ points\)</title><rect [^>]*fill="rgb\(255,`).Match(svg) {
		t.Errorf("the differential flame graph does not show burn in red, up")
	}

	// The timeline: every sample in one stretch of one thread's track; two
	// halves of the recording in time add up to it.
	var tl struct {
		Samples int
		Span    float64 `json:"span_seconds"`
		Threads []struct {
			TID          int
			Run, GC, GVL []int
		}
	}
	s.get(t, "/api/profile/timeline?f=1&stretches=100", &tl)
	counted := 0
	for _, th := range tl.Threads {
		for k := range th.Run {
			counted += th.Run[k] + th.GC[k] + th.GVL[k]
		}
	}
	if len(tl.Threads) == 0 || counted != tl.Samples || tl.Samples != all || tl.Span <= 0 {
		t.Errorf("timeline: %d threads, %d samples in stretches, %d in the recording (%d in the collapsed stacks), over %.2f s", len(tl.Threads), counted, tl.Samples, all, tl.Span)
	}
	// Through a focus, the timeline keeps the samples through the function.
	var focused struct{ Samples int }
	s.get(t, "/api/profile/timeline?f=1&stretches=100&t="+url.QueryEscape("focus:"+chainA), &focused)
	if focused.Samples != through {
		t.Errorf("timeline focused on chain_a: %d samples, the collapsed stacks %d", focused.Samples, through)
	}
	// Split at the start of the last stretch that holds samples, so that
	// each side holds some however a busy machine spread them in time.
	firstNE, lastNE := -1, -1
	for k := 0; k < 100; k++ {
		n := 0
		for _, th := range tl.Threads {
			n += th.Run[k] + th.GC[k] + th.GVL[k]
		}
		if n > 0 {
			lastNE = k
			if firstNE < 0 {
				firstNE = k
			}
		}
	}
	half := fmt.Sprintf("%.4f", tl.Span*float64(lastNE)/100)
	var first, second fnPage
	s.get(t, "/api/profile/functions?f=1&limit=1&t="+url.QueryEscape("time:0-"+half), &first)
	s.get(t, "/api/profile/functions?f=1&limit=1&t="+url.QueryEscape("time:"+half+"-"), &second)
	if first.Samples+second.Samples != all || firstNE < lastNE && (first.Samples == 0 || second.Samples == 0) {
		t.Errorf("time windows split at %s s: %d + %d samples, the recording %d (stretches %d..%d hold samples)", half, first.Samples, second.Samples, all, firstNE, lastNE)
	}

	// The stack chart against the recording, box by box: internal/ui's
	// TestStackChart and TestProfileDiffViews.

	// The views against another recording (each node's, row's, box's and
	// stretch's shares those of each recording's own view): internal/ui's
	// TestProfileDiffViews.

	// The comparison: report's numbers for each side.
	before, after := summaryRows(t, demo), summaryRows(t, raw)
	var diff struct {
		Page uiPage[struct {
			Function string
			BS       int     `json:"before_self"`
			BT       int     `json:"before_total"`
			AS       int     `json:"after_self"`
			AT       int     `json:"after_total"`
			SC       float64 `json:"self_change"`
		}]
	}
	s.get(t, "/api/profile/diff?f=1&before=0&limit=1000", &diff)
	seen := map[string]bool{}
	for k, r := range diff.Page.Rows {
		seen[r.Function] = true
		if b, a := before[r.Function], after[r.Function]; r.BS != b[0] || r.BT != b[1] || r.AS != a[0] || r.AT != a[1] {
			t.Errorf("diff row %s: before %d/%d after %d/%d; report: before %v after %v", r.Function, r.BS, r.BT, r.AS, r.AT, b, a)
		}
		if k > 0 && math.Abs(r.SC) > math.Abs(diff.Page.Rows[k-1].SC) {
			t.Errorf("diff rows not by the size of the self change at %s", r.Function)
		}
	}
	for fn := range before {
		if !seen[fn] {
			t.Errorf("diff lacks %s of the first recording", fn)
		}
	}
	for fn := range after {
		if !seen[fn] {
			t.Errorf("diff lacks %s of the second recording", fn)
		}
	}

	ctx, problems := browser(t)
	visit(t, ctx, s, "#/profile/1/sandwich?fn="+url.QueryEscape(burn), "profile-sandwich")
	if rows := cells(t, ctx, "#callers"); len(rows) != 3 {
		t.Errorf("the page's callers of burn: %q", rows)
	}
	visit(t, ctx, s, "#/profile/1/functions?search=chain_", "profile-search")
	if got := eval[string](t, ctx, `document.getElementById("search-summary").innerText`); !strings.Contains(got, fmt.Sprintf("%d functions; in %s samples", len(fns), commas(uint64(want)))) {
		t.Errorf("the page's search: %q, want %d functions in %d samples", got, len(fns), want)
	}
	visit(t, ctx, s, "#/profile/1/functions?t="+url.QueryEscape("focus:"+chainA), "profile-focus")
	if got := eval[string](t, ctx, `document.getElementById("transforms").innerText`); !strings.Contains(got, "focus "+chainA) {
		t.Errorf("the page's transforms: %q", got)
	}
	if got := eval[string](t, ctx, `document.querySelector(".summary").innerText`); !strings.Contains(got, commas(uint64(through))+" samples") {
		t.Errorf("the focused summary %q, want %d samples", got, through)
	}
	visit(t, ctx, s, "#/profile/1/flame?before=0", "profile-flame-diff")
	visit(t, ctx, s, "#/profile/1/timeline", "profile-timeline")
	if n := eval[int](t, ctx, `document.querySelectorAll("#timeline .track").length`); n != len(tl.Threads) {
		t.Errorf("the page's timeline: %d tracks, %d threads", n, len(tl.Threads))
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#timeline .track:first-child .cell").length`); n != 200 {
		t.Errorf("the page's timeline: %d stretches in a track, want 200", n)
	}
	// The stack chart on the page: a box clicked in it offers to focus on
	// its function and to narrow the time to it, which keeps its samples.
	visit(t, ctx, s, "#/profile/1/stack", "profile-stack")
	chart := `document.getElementById("stackchart").contentDocument`
	if n := eval[int](t, ctx, chart+`.querySelectorAll("g.track").length`); n != len(tl.Threads) {
		t.Errorf("the page's stack chart: %d tracks, %d threads", n, len(tl.Threads))
	}
	box := eval[map[string]string](t, ctx, `(() => { const g = `+chart+`.querySelector("g.f[data-d='1']");
		g.dispatchEvent(new MouseEvent("click", { bubbles: true }));
		return { fn: g.getAttribute("data-fn"), n: g.getAttribute("data-n") }; })()`)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("chart-narrow") !== null`, chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Fatalf("a click on a box of the stack chart offers nothing: %v", err)
	}
	if got := eval[string](t, ctx, `document.querySelector("#chart-pick .transform-links a").getAttribute("href")`); !strings.Contains(got, url.QueryEscape("focus:"+box["fn"])) {
		t.Errorf("the clicked box's focus link %q, want focus on %s", got, box["fn"])
	}
	narrow := eval[string](t, ctx, `document.getElementById("chart-narrow").getAttribute("href")`)
	visit(t, ctx, s, narrow, "profile-stack-narrowed")
	if n, _ := strconv.ParseUint(box["n"], 10, 64); len(tl.Threads) == 1 && !strings.Contains(eval[string](t, ctx, `document.querySelector(".summary").innerText`), ": "+commas(n)+" samples") {
		t.Errorf("narrowed to a box of %s samples of %s: %q", box["n"], box["fn"], eval[string](t, ctx, `document.querySelector(".summary").innerText`))
	}
	// The call tree and the sandwich against the second recording, each
	// change on the differential flame graph's colour.
	var tree struct {
		Children uiPage[uiTreeRow]
	}
	s.get(t, "/api/profile/tree?f=1&before=2", &tree)
	visit(t, ctx, s, "#/profile/1/tree?before=2", "profile-tree-diff")
	if rows := cells(t, ctx, "#rows"); len(rows) != len(tree.Children.Rows) || len(rows) == 0 || len(rows[0]) != 6 {
		t.Errorf("the page's call tree against a recording: %q; %d children", rows, len(tree.Children.Rows))
	}
	if got := eval[string](t, ctx, `getComputedStyle(document.querySelector("#rows tbody .change")).backgroundColor`); got != strings.ReplaceAll(strings.ReplaceAll(tree.Children.Rows[0].Diff.Color, ",", ", "), "  ", " ") {
		t.Errorf("the page's call tree colours its first change %s, the answer %s", got, tree.Children.Rows[0].Diff.Color)
	}
	visit(t, ctx, s, "#/profile/1/sandwich?before=2&fn="+url.QueryEscape(burn), "profile-sandwich-diff")
	if rows := cells(t, ctx, "#callers"); len(rows) != 3 || len(rows[0]) != 7 {
		t.Errorf("the page's callers of burn against a recording: %q", rows)
	}
	// The stack chart and the timeline against the second recording, on
	// the same colours.
	visit(t, ctx, s, "#/profile/1/stack?before=2", "profile-stack-diff")
	if got := eval[string](t, ctx, chart+`.querySelector("g.f[data-change]") ? "compared" : "plain"`); got != "compared" {
		t.Errorf("the page's stack chart against a recording: %s boxes", got)
	}
	var tlDiff struct {
		Threads []struct{ Fn []string }
		Changes map[string]uiShares
	}
	s.get(t, "/api/profile/timeline?f=1&stretches=200&before=2", &tlDiff)
	visit(t, ctx, s, "#/profile/1/timeline?before=2", "profile-timeline-diff")
	cell := eval[map[string]string](t, ctx, `(() => { const a = document.querySelector("#timeline .cell[data-fn]");
		return a ? { fn: a.dataset.fn, bg: getComputedStyle(a).backgroundColor, title: a.title } : {}; })()`)
	if c, ok := tlDiff.Changes[cell["fn"]]; !ok || cell["bg"] != strings.ReplaceAll(c.Color, ",", ", ") || !strings.Contains(cell["title"], "points") {
		t.Errorf("the page's timeline against a recording: a stretch %v; the answer's change %+v", cell, c)
	}
	visit(t, ctx, s, "#/profile/1/diff?before=0", "profile-diff")
	if rows := cells(t, ctx, "#diff"); len(rows) != len(seen) && len(rows) != 100 {
		t.Errorf("the page's comparison: %d rows, %d functions", len(rows), len(seen))
	}
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page: %v", pr)
	}
}

// TestUIPprofWeb: pprof's own web interface over a recording, mounted on
// the page: its top table, flame graph and call graph (Graphviz's dot)
// answer with the recording's functions, under the page's token; a
// recording that is not one, or a page of pprof's it lacks, is refused.
func TestUIPprofWeb(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "30")
	raw := filepath.Join(t.TempDir(), "split.raw.gz")
	// Recorded again (at most 5 times) until burn has 20 samples: a busy
	// machine may give the program little CPU in a second, and pprof's
	// pages of an empty profile show no function.
	for try := 0; ; try++ {
		if _, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--rate", "250", "--duration", "1s", "-f", "raw", "-o", raw); code != 0 {
			t.Fatalf("record: %s", stderr)
		}
		out, stderr, code := rbscope(t, "report", "-i", raw, "-f", "collapsed", "-o", "-")
		if code != 0 {
			t.Fatalf("report: %s", stderr)
		}
		if burn, _ := samplesWith(out, "Object#burn"); burn >= 20 || try == 4 {
			break
		}
	}
	dump, _ := heapGraphDump(t, t.TempDir())
	s := startUI(t, raw, dump)
	s.waitLoaded(t)
	get := func(path string) (int, string) {
		resp, err := http.Get(s.base + path + "?token=" + s.token)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, page := range []string{"top", "flamegraph", ""} {
		code, body := get("/pprof/0/" + page)
		if code != 200 || !strings.Contains(body, "Object#burn") {
			t.Errorf("/pprof/0/%s: %d, burn in it: %v\n%.500s", page, code, strings.Contains(body, "Object#burn"), body)
		}
	}
	if code, _ := get("/pprof/1/top"); code != 404 {
		t.Errorf("pprof of a heap dump: %d", code)
	}
	if code, _ := get("/pprof/0/nothing"); code != 404 {
		t.Errorf("a page pprof lacks: %d", code)
	}
	resp, err := http.Get(s.base + "/pprof/0/top")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("pprof without the token: %d", resp.StatusCode)
	}
	// In Chromium: pprof's pages run (their script under the page's
	// policy) and ask nothing of the outside.
	ctx, problems := browser(t)
	visit(t, ctx, s, "#/profile/0/functions", "profile-functions-pprof-link")
	for _, page := range []string{"flamegraph", "top", ""} {
		if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/pprof/0/"+page)); err != nil {
			t.Fatal(err)
		}
		if text := eval[string](t, ctx, `document.body.innerText`); !strings.Contains(text, "Object#burn") {
			t.Errorf("pprof's %q page in Chromium lacks burn:\n%.500s", page, text)
		}
	}
	if pr := problems(); len(pr) > 0 {
		t.Errorf("pprof's pages: %v", pr)
	}
}

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
