package main

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/rbscope/rbscope/internal/output/rawtest"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/testruby"
)

// held is the state of a move with the left button down.
func held(p *input.DispatchMouseEventParams) { p.Button, p.Buttons = input.MouseButtonLeft, 1 }

// drag presses the left button at (x0, y), moves to (x1, y) in steps,
// runs during with the button still down, and releases it there: the
// browser's own mouse events, as a user's hand makes them.
func drag(t *testing.T, ctx context.Context, x0, y, x1 float64, during func()) {
	t.Helper()
	acts := []chromedp.Action[chromedp.Void]{
		chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x0, y, chromedp.ButtonNone),
		chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, x0, y, chromedp.ButtonLeft, chromedp.ClickCount(1)),
	}
	for k := 1; k <= 10; k++ {
		acts = append(acts, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x0+(x1-x0)*float64(k)/10, y, held))
	}
	if err := chromedp.Do(ctx, acts...); err != nil {
		t.Fatalf("dragging from %.0f to %.0f: %v", x0, x1, err)
	}
	if during != nil {
		during()
	}
	if err := chromedp.Do(ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, x1, y, chromedp.ButtonLeft, chromedp.ClickCount(1))); err != nil {
		t.Fatalf("releasing at %.0f: %v", x1, err)
	}
}

// click presses and releases the left button at (x, y) without moving.
func click(t *testing.T, ctx context.Context, x, y float64) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.MouseClickXY(x, y)); err != nil {
		t.Fatalf("clicking at %.0f,%.0f: %v", x, y, err)
	}
}

// waitView waits until the page shows a view whose URL fragment holds
// want, rendered, and returns the fragment.
func waitView(t *testing.T, ctx context.Context, want string) string {
	t.Helper()
	check := fmt.Sprintf(`(() => { const v = document.getElementById("view"); return location.hash.includes(%q) && v.dataset.route === location.hash && v.dataset.state === "ready"; })()`, want)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](check, chromedp.WithPollingTimeout(2*time.Minute))); err != nil {
		t.Fatalf("no view with %q in its URL: %v (the URL: %s)", want, err, eval[string](t, ctx, `location.hash`))
	}
	return eval[string](t, ctx, `location.hash`)
}

// fragmentParams reads the parameters of a fragment #/path?a=b.
func fragmentParams(t *testing.T, frag string) url.Values {
	t.Helper()
	_, qs, _ := strings.Cut(frag, "?")
	v, err := url.ParseQuery(qs)
	if err != nil {
		t.Fatalf("fragment %s: %v", frag, err)
	}
	return v
}

// timeWindow returns the time window the transforms in frag's t
// parameter keep; ok false without one.
func timeWindow(t *testing.T, frag string) (ts string, from, to float64, ok bool) {
	t.Helper()
	ts = fragmentParams(t, frag).Get("t")
	for _, line := range strings.Split(ts, "\n") {
		if rest, found := strings.CutPrefix(line, "time:"); found {
			a, b, _ := strings.Cut(rest, "-")
			from, err1 := strconv.ParseFloat(a, 64)
			to, err2 := strconv.ParseFloat(b, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("time window %q of %s", line, frag)
			}
			return ts, from, to, true
		}
	}
	return ts, 0, 0, false
}

var rangeLabelRe = regexp.MustCompile(`^([\d.]+)–([\d.]+) s: ([\d.]+) (ms|s)$`)

// shows tells whether label, the label of a range drawn on the page,
// gives the range from..to and its length as the URL keeps them.
func shows(label string, from, to float64) bool {
	m := rangeLabelRe.FindStringSubmatch(strings.TrimSpace(label))
	if m == nil {
		return false
	}
	a, _ := strconv.ParseFloat(m[1], 64)
	b, _ := strconv.ParseFloat(m[2], 64)
	l, _ := strconv.ParseFloat(m[3], 64)
	if m[4] == "ms" {
		l /= 1000
	}
	return a == from && b == to && math.Abs(l-(to-from)) < 0.0006
}

var summarySamplesRe = regexp.MustCompile(`: ([\d,]+) samples in `)

// pageSamples is the number of samples the view's summary line gives.
func pageSamples(t *testing.T, ctx context.Context) int {
	t.Helper()
	text := eval[string](t, ctx, `document.querySelector(".summary").innerText`)
	m := summarySamplesRe.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the view's summary %q gives no samples", text)
	}
	n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	return n
}

// TestUITimelineDrag: on a recording of testdata/gvl_spin.rb (two threads
// taking turns with the GVL, the main thread asleep in join; --idle
// samples all three at every tick, however busy the machine), a range dragged across the timeline with
// the mouse is drawn with its length while dragging and, released, kept in
// the URL; every other view keeps the samples of that time, as many as the
// API gives for it and as the recording holds in it; Esc and the clear
// link take it off, the zoom shows it alone, each of its stretches holding
// the recording's samples of its time. A click on a stretch, or a press
// that moves less than the least drag, still narrows to that stretch. A
// range dragged across the stack chart's axis zooms the chart into it, a
// click on a box still offers its function, and Esc in the chart clears
// the range.
func TestUITimelineDrag(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "gvl_spin.rb", nil, "30")
	var rep struct{ PID int }
	p.WaitReport(t, &rep, 30*time.Second)
	raw := filepath.Join(t.TempDir(), "gvl.raw.gz")
	if _, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--rate", "200", "--duration", "2s", "--threads", "--idle", "-f", "raw", "-o", raw); code != 0 {
		t.Fatalf("record: %s", stderr)
	}
	s := startUI(t, raw)
	s.waitLoaded(t)
	var whole struct {
		Samples int
		Span    float64 `json:"span_seconds"`
		Threads []struct{ TID int }
	}
	s.get(t, "/api/profile/timeline?f=0&stretches=200", &whole)
	if whole.Samples == 0 || len(whole.Threads) < 2 {
		t.Fatalf("setup: the recording has %d samples of %d threads", whole.Samples, len(whole.Threads))
	}
	// inRecording counts the recording's samples from from to to seconds,
	// as the recording itself has them.
	inRecording := func(from, to float64) int {
		n := 0
		for _, ss := range rawtest.Samples(t, raw, func(s profile.Sample, fns []string) []string {
			if sec := s.Time.Seconds(); sec >= from && sec < to {
				return fns
			}
			return nil
		}) {
			n += len(ss)
		}
		return n
	}
	// samplesFor is what the API gives for the transforms ts.
	samplesFor := func(ts string) int {
		var fp struct{ Samples int }
		s.get(t, "/api/profile/functions?f=0&limit=1&t="+url.QueryEscape(ts), &fp)
		return fp.Samples
	}

	// The range to drag across: from before the samples of a time a
	// quarter into the recording's tick times to before those of a time
	// three quarters in (from the first to the last when those are close),
	// so that it keeps some of the samples and not all, however sparse a
	// busy machine left the ticks.
	var ticks []time.Duration
	rawtest.Samples(t, raw, func(s profile.Sample, _ []string) []string {
		if !slices.Contains(ticks, s.Time) {
			ticks = append(ticks, s.Time)
		}
		return nil
	})
	slices.Sort(ticks)
	if len(ticks) < 2 {
		t.Fatalf("setup: the recording's samples were taken at %d times", len(ticks))
	}
	early, late := ticks[len(ticks)/4].Seconds(), ticks[len(ticks)*3/4].Seconds()
	if (late-early)/whole.Span < 0.05 {
		early, late = ticks[0].Seconds(), ticks[len(ticks)-1].Seconds()
	}

	ctx, problems := browser(t)
	visit(t, ctx, s, "#/profile/0/timeline", "timeline-drag-before")
	box := eval[map[string]float64](t, ctx, `(() => { const r = document.querySelector("#timeline .track-cells").getBoundingClientRect(); return { left: r.left, width: r.width, top: r.top, height: r.height }; })()`)
	// 1.5 pixels before each time, in the timeline's pixels.
	fracA, fracB := early/whole.Span-1.5/box["width"], late/whole.Span-1.5/box["width"]
	x0, x1, y := box["left"]+fracA*box["width"], box["left"]+fracB*box["width"], box["top"]+box["height"]/2
	var during string
	drag(t, ctx, x0, y, x1, func() {
		// While the button is down: the range is drawn with its length,
		// and the URL has not changed.
		during = eval[string](t, ctx, `(() => { const s = document.getElementById("selection"); return s ? s.innerText : ""; })()`)
		saveScreenshot(t, ctx, "timeline-dragging")
		if h := eval[string](t, ctx, `location.hash`); h != "#/profile/0/timeline" {
			t.Errorf("while dragging, the URL is already %s", h)
		}
	})
	frag := waitView(t, ctx, "time")
	saveScreenshot(t, ctx, "timeline-dragged")
	ts, from, to, ok := timeWindow(t, frag)
	if !ok {
		t.Fatalf("after the drag, the URL %s keeps no time", frag)
	}
	// The range is where the pointer went, to a pixel's time (and the
	// millisecond it is written to).
	pixel := whole.Span/box["width"] + 0.001
	if math.Abs(from-fracA*whole.Span) > 2*pixel || math.Abs(to-fracB*whole.Span) > 2*pixel {
		t.Errorf("dragged across %.1f%%..%.1f%% of %.3f s, the URL keeps %.4f..%.4f s", 100*fracA, 100*fracB, whole.Span, from, to)
	}
	if !shows(during, from, to) {
		t.Errorf("while dragging the range shows %q, the range kept %g..%g s", during, from, to)
	}
	if got := eval[string](t, ctx, `(() => { const s = document.getElementById("selection-kept"); return s ? s.dataset.from + "-" + s.dataset.to : ""; })()`); got == "" {
		t.Errorf("the timeline does not draw the range it keeps")
	}
	api, rec := samplesFor(ts), inRecording(from, to)
	if api == 0 || api >= whole.Samples || api != rec {
		t.Errorf("the range %.3f..%.3f s: %d samples by the API, %d in the recording, %d in all", from, to, api, rec, whole.Samples)
	}

	// Every other view keeps the range: its tab's link, and the
	// functions view's samples.
	for _, href := range eval[[]string](t, ctx, `[...document.querySelectorAll(".tabs a")].filter(a => a.id !== "pprof-link" && a.id !== "profile-diff-tab").map(a => a.getAttribute("href"))`) {
		if fragmentParams(t, href).Get("t") != ts {
			t.Errorf("the tab %s drops the range %q", href, ts)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.tabs a:first-child`))); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, "/functions?")
	saveScreenshot(t, ctx, "timeline-dragged-functions")
	if n := pageSamples(t, ctx); n != api {
		t.Errorf("the functions view of the range: %d samples, the API %d", n, api)
	}
	// Esc takes the range off.
	if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Escape)); err != nil {
		t.Fatal(err)
	}
	frag = waitView(t, ctx, "#/profile/0/functions")
	if _, _, _, ok := timeWindow(t, frag); ok || pageSamples(t, ctx) != whole.Samples {
		t.Errorf("after Esc: %s, %d samples, the recording %d", frag, pageSamples(t, ctx), whole.Samples)
	}

	// The clear link takes it off too; the zoom shows the range alone.
	visit(t, ctx, s, "#/profile/0/timeline?t="+url.QueryEscape(ts), "timeline-range")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#zoom-in`))); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, "zoom=1")
	saveScreenshot(t, ctx, "timeline-zoomed")
	var zoomed struct {
		Samples int
		From    float64 `json:"from_seconds"`
		Span    float64 `json:"span_seconds"`
		Threads []struct{ Run, GC, GVL []int }
	}
	s.get(t, "/api/profile/timeline?f=0&stretches=200&zoom=1&t="+url.QueryEscape(ts), &zoomed)
	if math.Abs(zoomed.From-from) > 1e-6 || math.Abs(zoomed.From+zoomed.Span-to) > 1e-6 || zoomed.Samples != api {
		t.Errorf("zoomed into %.3f..%.3f s: the timeline spans %.3f s from %.3f, %d samples (the range %d)", from, to, zoomed.Span, zoomed.From, zoomed.Samples, api)
	}
	// Each of the zoomed timeline's 200 stretches holds the samples the
	// recording took in its 200th of the range.
	lo, hi := time.Duration(from*float64(time.Second)), time.Duration(to*float64(time.Second))
	want, got := make([]int, 200), make([]int, 200)
	rawtest.Samples(t, raw, func(s profile.Sample, _ []string) []string {
		if s.Time >= lo && s.Time < hi {
			want[int64(s.Time-lo)*200/int64(hi-lo)]++
		}
		return nil
	})
	for _, th := range zoomed.Threads {
		for k := range got {
			got[k] += th.Run[k] + th.GC[k] + th.GVL[k]
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the zoomed timeline's stretches hold %v samples, the recording %v", got, want)
	}
	if got := eval[string](t, ctx, `document.querySelector("#timeline .cell").title`); !strings.HasPrefix(got, fmt.Sprintf("%.2f–", from)) {
		t.Errorf("zoomed into %.3f s.., the first stretch is %q", from, got)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#range-clear`))); err != nil {
		t.Fatal(err)
	}
	frag = waitView(t, ctx, "#/profile/0/timeline")
	if _, _, _, ok := timeWindow(t, frag); ok || strings.Contains(frag, "zoom") {
		t.Errorf("after clear: %s", frag)
	}

	// A click on a stretch, with no move, still narrows to that stretch;
	// so does a press that moves less than the least drag (2 pixels
	// within a stretch).
	for _, move := range []float64{0, 2} {
		visit(t, ctx, s, "#/profile/0/timeline", "timeline-before-click")
		cell := eval[map[string]float64](t, ctx, fmt.Sprintf(`(() => { const r = document.elementFromPoint(%f, %f).getBoundingClientRect(); return { x: r.left + r.width / 2, w: r.width }; })()`, box["left"]+0.4*box["width"], y))
		if cell["w"] < 2*move+1 {
			t.Fatalf("a stretch is %.1f pixels wide", cell["w"])
		}
		href := eval[string](t, ctx, fmt.Sprintf(`document.elementFromPoint(%f, %f).getAttribute("href")`, cell["x"], y))
		if move == 0 {
			click(t, ctx, cell["x"], y)
		} else {
			drag(t, ctx, cell["x"]-move/2, y, cell["x"]+move/2, nil)
		}
		if frag = waitView(t, ctx, "time"); frag != href {
			t.Errorf("a click on the stretch %s (moving %g pixels) went to %s", href, move, frag)
		}
	}

	// The stack chart: a range dragged across its time axis zooms the
	// chart into it and keeps it in every view; a click on a box still
	// offers its function.
	visit(t, ctx, s, "#/profile/0/stack", "stack-drag-before")
	chart := `document.getElementById("stackchart")`
	geo := eval[map[string]float64](t, ctx, `(() => { const f = `+chart+`, r = f.getBoundingClientRect(), d = f.contentDocument, g = d.getElementById("frames"), m = d.documentElement.getScreenCTM();
		const n = a => parseFloat(g.getAttribute(a));
		return { left: r.left + f.clientLeft + m.e, top: r.top + f.clientTop + m.f, scale: m.a, x0: n("data-x0"), x1: n("data-x1"), y0: n("data-y0"), t0: n("data-from"), t1: n("data-to") }; })()`)
	at := func(frac float64) float64 { return geo["left"] + geo["scale"]*(geo["x0"]+frac*(geo["x1"]-geo["x0"])) }
	ay := geo["top"] + geo["scale"]*(geo["y0"]-6) // on the axis's labels
	span := geo["t1"] - geo["t0"]
	perPixel := span / (geo["x1"] - geo["x0"]) / geo["scale"]
	fracA, fracB = (early-1.5*perPixel-geo["t0"])/span, (late-1.5*perPixel-geo["t0"])/span
	drag(t, ctx, at(fracA), ay, at(fracB), func() {
		if got := eval[string](t, ctx, chart+`.contentDocument.getElementById("range") ? `+chart+`.contentDocument.getElementById("range").textContent : ""`); !strings.Contains(got, " s: ") {
			t.Errorf("while dragging across the stack chart it shows %q", got)
		}
		saveScreenshot(t, ctx, "stack-dragging")
	})
	frag = waitView(t, ctx, "time")
	saveScreenshot(t, ctx, "stack-dragged")
	ts, from, to, ok = timeWindow(t, frag)
	pixel = perPixel + 0.001
	if !ok || !strings.HasPrefix(frag, "#/profile/0/stack?") || math.Abs(from-(geo["t0"]+fracA*span)) > 2*pixel || math.Abs(to-(geo["t0"]+fracB*span)) > 2*pixel {
		t.Errorf("dragged across %.1f%%..%.1f%% of the stack chart's %.3f..%.3f s: %s", 100*fracA, 100*fracB, geo["t0"], geo["t1"], frag)
	}
	if got := eval[float64](t, ctx, `parseFloat(`+chart+`.contentDocument.getElementById("frames").getAttribute("data-from"))`); math.Abs(got-from) > 1e-6 {
		t.Errorf("the stack chart of the range %.6f.. draws from %.6f s", from, got)
	}
	if n, api, rec := pageSamples(t, ctx), samplesFor(ts), inRecording(from, to); n != api || n != rec || n == 0 || n >= whole.Samples {
		t.Errorf("the stack chart's range %.6f..%.6f s: %d samples on the page, %d by the API, %d in the recording, %d in all", from, to, n, api, rec, whole.Samples)
	}
	// A click on the widest box, with no move: the box is offered, the
	// URL stays.
	bx := eval[map[string]float64](t, ctx, `(() => { let best = null, w = 0; for (const r of `+chart+`.contentDocument.querySelectorAll("g.f rect")) { const x = parseFloat(r.getAttribute("width")); if (x > w) { w = x; best = r; } }
		return { x: parseFloat(best.getAttribute("x")) + w / 2, y: parseFloat(best.getAttribute("y")) + 5 }; })()`)
	click(t, ctx, geo["left"]+geo["scale"]*bx["x"], geo["top"]+geo["scale"]*bx["y"])
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("chart-narrow") !== null`, chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Errorf("a click on a box of the stack chart offers nothing: %v", err)
	}
	if h := eval[string](t, ctx, `location.hash`); h != frag {
		t.Errorf("a click on a box moved the page from %s to %s", frag, h)
	}
	// Esc pressed in the chart (when a browser gives the frame the focus)
	// takes the range off the page; the page's own Esc is checked above.
	eval[bool](t, ctx, chart+`.contentDocument.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true }))`)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const v = document.getElementById("view"); return location.hash === "#/profile/0/stack" && v.dataset.route === location.hash && v.dataset.state === "ready"; })()`, chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Errorf("Esc in the stack chart left the page at %s: %v", eval[string](t, ctx, `location.hash`), err)
	}
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page: %v", pr)
	}
}
