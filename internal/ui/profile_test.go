package ui

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/output/rawtest"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/testruby"
)

// demoRecording is the committed raw recording of testdata/demo.rb (two
// threads of a real Ruby) and its profile, read as report reads it.
func demoRecording(t *testing.T) (string, *profile.Profile) {
	t.Helper()
	raw := testruby.Testdata("golden/demo.raw.gz")
	return raw, rawtest.Read(t, raw)
}

// through counts the samples of p whose stack holds the function named
// fn (as the views name functions), once a sample.
func through(p *profile.Profile, fn string) int {
	n := 0
	for _, st := range p.Stacks {
		if slices.ContainsFunc(st.Frames, func(id int) bool { return p.Frames[id].Name(false) == fn }) {
			n += st.Count
		}
	}
	return n
}

type functionsView struct {
	Samples int
	Ticks   int
	Matched int `json:"matched_samples"`
	Page    page[struct {
		Function    string
		Self, Total int
	}]
}

type treeView struct {
	Node     treeRow
	Children page[treeRow]
}

// TestProfileViews drives the recording's views on the committed demo
// recording, each against the samples the recording holds: the function
// table (self adding up to every sample, each total the samples through
// the function, sorted, searched), the call tree (each node's total its
// self and its children's), the sandwich, focus and drop, the timeline
// (every sample in one stretch; two windows in time adding up to the
// whole), the flame graph and stack chart under their own policy, the
// comparison of a recording with itself (no change), and one message per
// bad request. A file that is not a raw recording says so.
func TestProfileViews(t *testing.T) {
	raw, p := demoRecording(t)
	notRaw := filepath.Join(t.TempDir(), "not.raw.gz")
	if err := os.WriteFile(notRaw, []byte{0x1f, 0x8b, 8, 0, 0, 0}, 0o600); err != nil {
		t.Fatal(err)
	}
	dump, _ := heapGraphDump(t, t.TempDir())
	ts := newTestServer(t, Options{Files: []string{raw, notRaw, dump}})
	files := ts.files(t)
	if len(files) != 3 || files[0].State != "ready" || files[0].Kind != "profile" || files[0].Samples != p.Samples || files[1].State != "error" ||
		!strings.HasPrefix(files[1].Error, notRaw+": not a raw recording (rbscope record --format raw): ") {
		t.Fatalf("files: %+v", files)
	}

	var fn functionsView
	ts.get(t, "/api/profile/functions?f=0&limit=1000", &fn)
	self := 0
	for k, r := range fn.Page.Rows {
		self += r.Self
		if want := through(p, r.Function); r.Total != want || r.Self > r.Total {
			t.Errorf("%s: self %d total %d; %d samples go through it", r.Function, r.Self, r.Total, want)
		}
		if k > 0 && r.Self > fn.Page.Rows[k-1].Self {
			t.Errorf("functions not by self at %s", r.Function)
		}
	}
	if fn.Samples != p.Samples || fn.Ticks != p.Ticks || self != p.Samples || len(fn.Page.Rows) < 3 || fn.Page.Total != len(fn.Page.Rows) {
		t.Fatalf("functions: %d samples (%d ticks), self adds up to %d in %d rows of %d; the recording %d samples, %d ticks",
			fn.Samples, fn.Ticks, self, len(fn.Page.Rows), fn.Page.Total, p.Samples, p.Ticks)
	}
	var byTotal functionsView
	ts.get(t, "/api/profile/functions?f=0&sort=total&limit=1000", &byTotal)
	for k := 1; k < len(byTotal.Page.Rows); k++ {
		if byTotal.Page.Rows[k].Total > byTotal.Page.Rows[k-1].Total {
			t.Errorf("sort=total: not by total at %s", byTotal.Page.Rows[k].Function)
		}
	}
	var one functionsView
	ts.get(t, "/api/profile/functions?f=0&offset=1&limit=1", &one)
	if len(one.Page.Rows) != 1 || one.Page.Offset != 1 || one.Page.Rows[0] != fn.Page.Rows[1] {
		t.Errorf("offset=1&limit=1: %+v, want %+v", one.Page, fn.Page.Rows[1])
	}
	// Search, any case: the functions whose name holds it, and the samples
	// through any of them.
	var found functionsView
	ts.get(t, "/api/profile/functions?f=0&limit=1000&search=FIB", &found)
	matched := 0
	for _, st := range p.Stacks {
		if slices.ContainsFunc(st.Frames, func(id int) bool { return strings.Contains(strings.ToLower(p.Frames[id].Name(false)), "fib") }) {
			matched += st.Count
		}
	}
	if len(found.Page.Rows) == 0 || found.Matched != matched || matched == 0 {
		t.Errorf("search fib: %d functions in %d samples; the recording has %d", len(found.Page.Rows), found.Matched, matched)
	}

	// The call tree: every node's total is its self and its children's;
	// the selves add up to every sample.
	var walk func(n int) int
	walk = func(n int) int {
		var tv treeView
		ts.get(t, fmt.Sprintf("/api/profile/tree?f=0&node=%d&limit=1000", n), &tv)
		sum, selves := tv.Node.Self, tv.Node.Self
		for _, c := range tv.Children.Rows {
			sum += c.Total
			selves += walk(c.Node)
		}
		if sum != tv.Node.Total || len(tv.Children.Rows) != tv.Node.Children {
			t.Errorf("node %d (%s): total %d; self and children %d", n, tv.Node.Name, tv.Node.Total, sum)
		}
		return selves
	}
	if selves := walk(0); selves != p.Samples {
		t.Errorf("the call tree's selves add up to %d, the recording has %d samples", selves, p.Samples)
	}

	// The sandwich of the function most samples go through but the
	// outermost: its figures are its row's, each caller's samples within
	// its total.
	top := byTotal.Page.Rows[min(1, len(byTotal.Page.Rows)-1)]
	var sw struct {
		Function         string
		Self, Total      int
		Callers, Callees []struct {
			Function string
			Samples  int
		}
	}
	ts.get(t, "/api/profile/sandwich?f=0&fn="+url.QueryEscape(top.Function), &sw)
	if sw.Function != top.Function || sw.Self != top.Self || sw.Total != top.Total || len(sw.Callers)+len(sw.Callees) == 0 {
		t.Errorf("sandwich of %s: %+v; its row %+v", top.Function, sw, top)
	}
	for _, c := range append(sw.Callers, sw.Callees...) {
		if c.Samples <= 0 || c.Samples > sw.Total {
			t.Errorf("sandwich of %s: %s in %d samples of %d", top.Function, c.Function, c.Samples, sw.Total)
		}
	}

	// Focus keeps the samples through the function; drop the others.
	n := through(p, top.Function)
	for tr, want := range map[string]int{"focus:" + top.Function: n, "drop:" + top.Function: p.Samples - n} {
		var v functionsView
		ts.get(t, "/api/profile/functions?f=0&limit=1000&t="+url.QueryEscape(tr), &v)
		if v.Samples != want {
			t.Errorf("%s: %d samples, the recording has %d", tr, v.Samples, want)
		}
	}

	// The timeline: every sample in one stretch of one thread's track;
	// focused, the samples through the function; two windows in time add
	// up to the whole.
	type timeline struct {
		Samples int
		Span    float64 `json:"span_seconds"`
		Threads []struct{ Run, GC, GVL []int }
	}
	var tl timeline
	ts.get(t, "/api/profile/timeline?f=0&stretches=100", &tl)
	counted := 0
	for _, th := range tl.Threads {
		for k := range th.Run {
			counted += th.Run[k] + th.GC[k] + th.GVL[k]
		}
	}
	if len(tl.Threads) < 2 || counted != p.Samples || tl.Samples != p.Samples || tl.Span <= 0 {
		t.Errorf("timeline: %d threads, %d samples in stretches, %d in all, over %.2f s; the recording %d samples", len(tl.Threads), counted, tl.Samples, tl.Span, p.Samples)
	}
	var focused timeline
	ts.get(t, "/api/profile/timeline?f=0&stretches=100&t="+url.QueryEscape("focus:"+top.Function), &focused)
	if focused.Samples != n {
		t.Errorf("timeline focused on %s: %d samples, %d through it", top.Function, focused.Samples, n)
	}
	half := fmt.Sprintf("%.4f", tl.Span/2)
	var first, second functionsView
	ts.get(t, "/api/profile/functions?f=0&limit=1&t="+url.QueryEscape("time:0-"+half), &first)
	ts.get(t, "/api/profile/functions?f=0&limit=1&t="+url.QueryEscape("time:"+half+"-"), &second)
	if first.Samples+second.Samples != p.Samples || first.Samples == 0 || second.Samples == 0 {
		t.Errorf("time windows split at %s s: %d + %d samples, the recording %d", half, first.Samples, second.Samples, p.Samples)
	}

	// The SVGs: output's, served under a policy of their own.
	for _, path := range []string{"/api/profile/flame.svg?f=0", "/api/profile/stackchart.svg?f=0"} {
		rec := ts.request(t, path)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "image/svg+xml" || !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'") ||
			!strings.Contains(rec.Body.String(), "<svg") {
			t.Errorf("%s: %d %v", path, rec.Code, rec.Header())
		}
	}
	if body := ts.request(t, "/api/profile/flame.svg?f=0").Body.String(); !strings.Contains(body, fmt.Sprintf(">%d samples, ", p.Samples)) {
		t.Errorf("the flame graph does not say %d samples", p.Samples)
	}

	// A recording against itself: every function, no change.
	var diff struct {
		Page page[struct {
			Function string
			BS       int     `json:"before_self"`
			AS       int     `json:"after_self"`
			SC       float64 `json:"self_change"`
		}]
	}
	ts.get(t, "/api/profile/diff?f=0&before=0&limit=1000", &diff)
	if len(diff.Page.Rows) != len(fn.Page.Rows) {
		t.Errorf("the recording against itself: %d rows, %d functions", len(diff.Page.Rows), len(fn.Page.Rows))
	}
	for _, r := range diff.Page.Rows {
		if r.BS != r.AS || r.SC != 0 {
			t.Errorf("against itself, %s: self %d then %d, change %v", r.Function, r.BS, r.AS, r.SC)
		}
	}

	// Bad requests: one message each.
	for path, want := range map[string]struct {
		code int
		msg  string
	}{
		"/api/profile/functions?f=0&sort=size":   {400, `sort="size": want one of self, total, name`},
		"/api/profile/functions?f=0&t=nonsense":  {400, "nonsense"},
		"/api/profile/functions?f=9":             {404, `no file "9"`},
		"/api/profile/functions?f=2":             {400, "is a heap, not a profile"},
		"/api/heap/overview?f=0":                 {400, "is a profile, not a heap"},
		"/api/profile/functions?f=1":             {422, "not a raw recording"},
		"/api/profile/diff?f=0&before=2":         {400, "is a heap, not a profile"},
		"/api/profile/sandwich?f=0&fn=no-such()": {400, "no-such()"},
	} {
		if code, msg := ts.getError(t, path); code != want.code || !strings.Contains(msg, want.msg) {
			t.Errorf("GET %s: %d %q, want %d saying %s", path, code, msg, want.code, want.msg)
		}
	}
}

// TestPprofWeb: pprof's own web interface over a recording, mounted on
// the page: its top table and flame graph answer with the recording's
// functions, under the page's token; a file that is not a recording, or
// a page of pprof's it lacks, is refused.
func TestPprofWeb(t *testing.T) {
	raw, p := demoRecording(t)
	dump, _ := heapGraphDump(t, t.TempDir())
	ts := newTestServer(t, Options{Files: []string{raw, dump}})
	fn := p.Functions()[0].Frame.Name(false)
	label, _, _ := strings.Cut(fn, " (")
	for _, pg := range []string{"top", "flamegraph"} {
		rec := ts.request(t, "/pprof/0/"+pg)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), label) {
			t.Errorf("/pprof/0/%s: %d, %s in it: %v\n%.500s", pg, rec.Code, label, strings.Contains(rec.Body.String(), label), rec.Body)
		}
	}
	if code := ts.request(t, "/pprof/1/top").Code; code != http.StatusNotFound {
		t.Errorf("pprof of a heap dump: %d", code)
	}
	if code := ts.request(t, "/pprof/0/nothing").Code; code != http.StatusNotFound {
		t.Errorf("a page pprof lacks: %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, "/pprof/0/top", nil)
	req.Host = ts.host
	rec := httptest.NewRecorder()
	ts.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("pprof without the token: %d", rec.Code)
	}
}
