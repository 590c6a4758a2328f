package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rbscope/rbscope/internal/output/rawtest"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestUICuts: the UI's profile views cut a recording of testdata/cuts.rb
// by thread and endpoint, as report does: the page offers each thread
// and endpoint ("Cut by"), a cut keeps the samples the program's own
// thread or action had, and a cut matching nothing is an error naming
// what there is.
func TestUICuts(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "cuts.rb", nil, "60")
	var rep cutsReport
	p.WaitReport(t, &rep, 30*time.Second)
	raw := filepath.Join(t.TempDir(), "cuts.raw.gz")
	if _, errOut, code := rbscope(t, "record", "-p", strconv.Itoa(p.PID()), "-d", "3", "-r", "200", "-f", "raw", "-o", raw); code != 0 {
		t.Fatalf("record: exit %d: %s", code, errOut)
	}
	all := rawtest.Read(t, raw)
	byThread := map[int]int{}
	for _, s := range all.Timeline {
		byThread[s.TID]++
	}
	index := 0
	for _, st := range all.Stacks {
		if st.Label("endpoint") == "ItemsController#index" {
			index += st.Count
		}
	}
	s := startUI(t, raw)
	s.waitLoaded(t)
	type row struct {
		Name    string
		TID     int
		Samples int
		Cut     string
	}
	var cuts struct{ Threads, Endpoints []row }
	s.get(t, "/api/profile/cuts?f=0", &cuts)
	find := func(rows []row, cut string) *row {
		for i := range rows {
			if rows[i].Cut == cut {
				return &rows[i]
			}
		}
		return nil
	}
	if r := find(cuts.Threads, "thread:cruncher"); r == nil || r.TID != rep.TIDs["cruncher"] || r.Samples != byThread[r.TID] {
		t.Errorf("cuts: cruncher %+v, want tid %d with %d samples: %+v", r, rep.TIDs["cruncher"], byThread[rep.TIDs["cruncher"]], cuts.Threads)
	}
	if r := find(cuts.Endpoints, "endpoint:ItemsController#index"); r == nil || r.Samples != index || index == 0 {
		t.Errorf("cuts: ItemsController#index %+v, want %d samples: %+v", r, index, cuts.Endpoints)
	}
	var fn struct{ Samples int }
	s.get(t, "/api/profile/functions?f=0&t="+url.QueryEscape("thread:"+strconv.Itoa(rep.TIDs["cruncher"])), &fn)
	if fn.Samples != byThread[rep.TIDs["cruncher"]] {
		t.Errorf("functions cut to cruncher's TID: %d samples, want %d", fn.Samples, byThread[rep.TIDs["cruncher"]])
	}
	resp, err := http.Get(s.base + "/api/profile/functions?f=0&t=" + url.QueryEscape("thread:nobody") + "&token=" + s.token)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 200 || !strings.Contains(string(b), `\"cruncher\"`) {
		t.Errorf("a cut to no thread: %d %s, want an error naming the threads", resp.StatusCode, b)
	}

	ctx, problems := browser(t)
	visit(t, ctx, s, "#/profile/0/functions", "profile-cuts")
	href := eval[string](t, ctx, `document.querySelector('#cuts a[data-cut="endpoint:ItemsController#index"]').getAttribute("href")`)
	visit(t, ctx, s, href, "profile-cut-endpoint")
	if got := eval[string](t, ctx, `document.getElementById("transforms").innerText`); !strings.Contains(got, "endpoint ItemsController#index") {
		t.Errorf("the page's transforms after the cut: %q", got)
	}
	if got := eval[string](t, ctx, `document.querySelector(".summary").innerText`); !strings.Contains(got, ": "+commas(uint64(index))+" samples") {
		t.Errorf("the page cut to ItemsController#index: %q, want %d samples", got, index)
	}
	flameStart(t, ctx, s, all)
	if p := problems(); len(p) > 0 {
		t.Errorf("the page: %v", p)
	}
}

// flameStart checks where the UI's flame graph of cuts.rb's recording
// (all) opens: scrolled to the actions' frames, 80 frames of fake
// middleware above the roots, which the first screen shows; and that a
// frame clicked can be started from, a choice the page remembers until
// told to forget it.
func flameStart(t *testing.T, ctx context.Context, s *uiServer, all *profile.Profile) {
	t.Helper()
	depth := -1
	for si, st := range all.Stacks {
		if e := st.Label(profile.LabelEndpoint); e != "" {
			for k, f := range all.StackFrames(si) {
				if f.Label == e && (depth < 0 || k < depth) {
					depth = k
				}
			}
		}
	}
	if depth < 80 {
		t.Fatalf("setup: the actions' frames at depth %d, want 80 or more", depth)
	}
	visit(t, ctx, s, "#/profile/0/flame", "profile-flame-start")
	doc := `document.getElementById("flame").contentDocument`
	if got := eval[string](t, ctx, doc+`.getElementById("frames").getAttribute("data-start")`); got != strconv.Itoa(depth) {
		t.Errorf("the flame graph starts at depth %s, want %d (the actions')", got, depth)
	}
	// The actions' row is on the first screen: the frame scrolled to it.
	shown := eval[map[string]float64](t, ctx, `(() => { const w = document.getElementById("flame").contentWindow;
		const r = w.document.querySelector('g.f[data-d="`+strconv.Itoa(depth)+`"] rect');
		return { y: parseFloat(r.getAttribute("y")) - w.scrollY, h: w.innerHeight, scroll: w.scrollY }; })()`)
	if shown["scroll"] <= 0 || shown["y"] < 0 || shown["y"] > shown["h"] {
		t.Errorf("the actions' row at %v px of a %v px frame (scrolled %v px): not on the first screen", shown["y"], shown["h"], shown["scroll"])
	}
	fn := eval[string](t, ctx, `(() => { const g = `+doc+`.querySelector('g.f[data-fn^="ItemsController#index"]');
		g.dispatchEvent(new MouseEvent("click", { bubbles: true })); return g.getAttribute("data-fn"); })()`)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("flame-start") !== null`, chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Fatalf("a click on a frame of the flame graph offers nothing: %v", err)
	}
	eval[bool](t, ctx, `(document.getElementById("flame-start").click(), true)`)
	// Opened again without a transform, it starts from the frame chosen.
	visit(t, ctx, s, "#/profile/0/functions", "profile-functions-again")
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"#/profile/0/flame")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("flame-remembered") !== null && document.getElementById("view").dataset.state === "ready"`, chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Fatalf("the flame graph opened again does not start from %s: %v", fn, err)
	}
	if got := eval[string](t, ctx, `location.hash`); !strings.Contains(got, url.QueryEscape("focus:"+fn)) {
		t.Errorf("the flame graph opened again: %s, want a focus on %s", got, fn)
	}
	eval[bool](t, ctx, `(document.getElementById("flame-forget").click(), true)`)
	if got := eval[string](t, ctx, `String(localStorage.getItem("rbscope.flameStart"))`); got != "null" {
		t.Errorf("forgotten, the choice is still %q", got)
	}
}
