package output

import (
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
)

// Stack chart geometry, in SVG pixels, beyond the flame graph's.
const (
	scAxisY    = 64.0 // the time axis's labels
	scTop      = 76.0 // the first track
	scTrackHdr = 18.0 // a track's heading, the thread's name
	scGap      = 8.0  // between tracks
	// scMinWidth: narrower boxes are left out (Track.Small) of a chart
	// with a track of more samples than it has pixels across, so that a
	// recording of 100,000 samples draws what can be seen, not every
	// sample; narrowing the time shows them. A chart with fewer draws
	// them all (a late tick's sample and the next, taken to catch up, may
	// be a fraction of a millisecond apart).
	scMinWidth = 0.5
)

// StackChart writes a self-contained SVG stack chart of p's timeline (as
// speedscope's "time order" view and the Firefox Profiler's stack chart
// draw one): a track per thread, time left to right, each box a frame
// lasting as long as the run of consecutive samples whose stacks are
// alike from the root down to it (profile.Profile.Chart), roots at the
// top. o.From and o.To bound the time drawn; o.Lines tells frames apart by
// line, not only by function. Hovering a box shows its frame, file and
// lines, and how long it lasted; clicking one selects it and, when the
// chart is framed by rbscope ui's page, tells the page (a message with its
// function and time) so that it offers to focus on it or narrow the time
// to it. Dragging across the chart draws a range of time with its length
// and, framed by the page, tells the page the range, which keeps it in
// every view. With o.Baseline, each box is coloured by the change of its
// function's share of the samples (TotalShares) from o.Baseline's to p's,
// as the differential flame graph colours a frame (ChangeColor), and its
// title gives both shares and the change.
func StackChart(w io.Writer, p *profile.Profile, o Options) error {
	if p.Timeline == nil {
		return errors.New("a stack chart needs every sample's time: the recording kept no timeline (record --format raw keeps one)")
	}
	from, to := o.From, o.To
	if to <= from {
		to = max(p.Duration, from+time.Millisecond)
		for _, s := range p.Timeline {
			end, _ := p.SampleEnd(s.Time, 0, false)
			to = max(to, end)
		}
	}
	scale := (fgWidth - 2*fgPad) / float64(to-from) // pixels per nanosecond
	shortest := time.Duration(0)
	if mostSamples(p) > int(fgWidth-2*fgPad) {
		shortest = time.Duration(scMinWidth / scale)
	}
	tracks := p.Chart(o.Lines, shortest)
	heights, height := trackHeights(tracks)
	var diff *scDiff
	if o.Baseline != nil {
		diff = &scDiff{before: TotalShares(o.Baseline.Functions(), o.Baseline.Samples), after: TotalShares(p.Functions(), p.Samples)}
	}
	bw := &errWriter{w: w}
	scHead(bw, p, o, from, to, height, tracks)
	y := scTop
	for k, tr := range tracks {
		scTrack(bw, p, tr, o.Lines, diff, y, from, scale)
		y += heights[k]
	}
	bw.printf("</g>\n<script type=\"text/ecmascript\"><![CDATA[\n%s\n]]></script>\n</svg>\n", strings.TrimSpace(stackChartJS))
	return bw.err
}

// mostSamples is the number of samples of p's busiest thread.
func mostSamples(p *profile.Profile) int {
	type key struct{ pid, tid int }
	counts := map[key]int{}
	most := 0
	for _, s := range p.Timeline {
		k := key{s.PID, s.TID}
		counts[k]++
		most = max(most, counts[k])
	}
	return most
}

// trackHeights returns each track's height, as deep as its boxes go, and
// the chart's.
func trackHeights(tracks []profile.Track) ([]float64, float64) {
	heights := make([]float64, len(tracks))
	total := scTop + fgBottom
	for k, tr := range tracks {
		depth := 0
		for _, b := range tr.Boxes {
			depth = max(depth, b.Depth)
		}
		heights[k] = scTrackHdr + float64(depth+1)*fgFrameH + scGap
		total += heights[k]
	}
	return heights, total
}

// scHead writes the chart's heading: title, figures and time axis.
func scHead(bw *errWriter, p *profile.Profile, o Options, from, to time.Duration, height float64, tracks []profile.Track) {
	title := o.Title
	if title == "" {
		title = "rbscope stack chart"
	}
	small := 0
	for _, tr := range tracks {
		small += tr.Small
	}
	bw.printf(`<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg" onload="init(evt)">
<style type="text/css">
text { font-family: Verdana, sans-serif; font-size: %.0fpx; fill: #000; }
#title { font-size: 17px; text-anchor: middle; }
text.axis { font-size: 10px; fill: #555; }
text.thread { font-weight: bold; }
g.f:hover rect { stroke: #000; stroke-width: 0.5; cursor: pointer; }
g.f.on rect { stroke: #000; stroke-width: 1.5; }
#range rect { fill: rgba(26, 95, 180, 0.18); stroke: #1a5fb4; stroke-width: 1; pointer-events: none; }
#range text { font-size: 11px; fill: #1a5fb4; font-weight: bold; pointer-events: none; }
</style>
`, fgWidth, height, fgWidth, height, fgFontSize)
	against := ""
	if o.Baseline != nil {
		against = fmt.Sprintf("; coloured by the change of each function's share of the samples against a recording of %d (red: more, blue: less)", o.Baseline.Samples)
	}
	bw.printf(`<rect x="0" y="0" width="%.0f" height="%.0f" fill="#f8f8f8"/>
<text id="title" x="%.0f" y="24">%s</text>
<text id="subtitle" x="%.0f" y="42" style="text-anchor: middle; font-size: 11px; fill: #555">%d samples, threads: %d, from %.3f to %.3f s at %g Hz; %d boxes narrower than %g px left out (narrow the time to see them)%s</text>
<text id="details" x="%.0f" y="%.0f"> </text>
`, fgWidth, height, fgWidth/2, html.EscapeString(title), fgWidth/2, len(p.Timeline), len(tracks), from.Seconds(), to.Seconds(), p.Rate, small, scMinWidth,
		html.EscapeString(against), fgPad, height-10)
	// Ten ticks of the axis, with as many decimals as tell them apart.
	span := (to - from).Seconds()
	digits := max(3, int(math.Ceil(-math.Log10(span/10)))+1)
	for k := 0; k <= 10; k++ {
		x := fgPad + float64(k)*(fgWidth-2*fgPad)/10
		anchor := "middle"
		if k == 0 {
			anchor = "start"
		} else if k == 10 {
			anchor = "end"
		}
		bw.printf(`<text class="axis" x="%.1f" y="%.0f" style="text-anchor: %s">%s s</text><line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/>`+"\n",
			x, scAxisY, anchor, strconv.FormatFloat(from.Seconds()+span*float64(k)/10, 'f', digits, 64), x, scAxisY+3, x, height-fgBottom)
	}
	// The frames' time and the pixels it spans, for a range dragged
	// across the chart.
	bw.printf(`<g id="frames" data-from="%g" data-to="%g" data-x0="%g" data-x1="%g" data-y0="%g" data-y1="%g">`+"\n",
		from.Seconds(), to.Seconds(), fgPad, fgWidth-fgPad, scAxisY+3, height-fgBottom)
}

// scDiff is what a stack chart compared with another recording colours
// its boxes by: each function's share of the samples of the recording
// before (o.Baseline) and of the one drawn.
type scDiff struct{ before, after map[string]float64 }

// box returns the fill of a box of function fn, the attributes that give
// its shares and what its title adds: both shares and the change.
func (d *scDiff) box(fn string) (fill, attrs, title string) {
	before, after := d.before[fn], d.after[fn]
	change := after - before
	return ChangeColor(change), fmt.Sprintf(` data-before="%s" data-after="%s" data-change="%s"`, fmtFloat(before), fmtFloat(after), fmtFloat(change)),
		fmt.Sprintf("; in %.2f%% of the samples, %.2f%% before: %+.2f points", after, before, change)
}

// fmtFloat writes v in as few digits as read back to it.
func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// scTrack writes one thread's track at y: its heading and its boxes,
// coloured by diff when the chart is compared with another recording.
func scTrack(bw *errWriter, p *profile.Profile, tr profile.Track, lines bool, diff *scDiff, y float64, from time.Duration, scale float64) {
	bw.printf(`<g class="track" data-pid="%d" data-tid="%d" data-samples="%d" data-small="%d"><text class="thread" x="%.0f" y="%.0f">%s (tid %d, %d samples)</text>`+"\n",
		tr.PID, tr.TID, len(tr.Samples), tr.Small, fgPad, y+scTrackHdr-5, html.EscapeString(tr.Thread), tr.TID, len(tr.Samples))
	for _, b := range tr.Boxes {
		f := p.Frames[b.Frame]
		x, w := fgPad+float64(b.Start-from)*scale, float64(b.End-b.Start)*scale
		by := y + scTrackHdr + float64(b.Depth)*fgFrameH
		fn := f.Name(false)
		fill, attrs, change := color(fn, f.Kind), "", ""
		if diff != nil {
			fill, attrs, change = diff.box(fn)
		}
		bw.printf(`<g class="f" data-i="%d" data-n="%d" data-d="%d" data-fn="%s" data-from="%.6f" data-to="%.6f"%s><title>%s (%s, %d samples, %.3f–%.3f s%s)</title><rect x="%.2f" y="%.0f" width="%.2f" height="%.0f" fill="%s" rx="2" ry="2"/><text x="%.2f" y="%.1f">%s</text></g>`+"\n",
			b.First, b.Count, b.Depth, html.EscapeString(fn), micros(b.Start), micros(b.End), attrs,
			html.EscapeString(boxName(f, b, lines)), duration(b.End-b.Start), b.Count, b.Start.Seconds(), b.End.Seconds(), html.EscapeString(change),
			x, by, w, fgFrameH-1, fill, x+3, by+fgFrameH-4.5, html.EscapeString(fitText(f.Label, w)))
	}
	bw.printf("</g>\n")
}

// micros is d in seconds, cut to the microsecond: a box's bounds, which
// a time window from the first to the second keeps the box's samples and
// no other (its first sample is at its start, the next after it at its
// end or later).
func micros(d time.Duration) float64 { return d.Truncate(time.Microsecond).Seconds() }

// boxName is a box's frame with its file and the lines its samples were
// at: "label (path:12)", or "label (path:12-15)" for several.
func boxName(f profile.Frame, b profile.Box, lines bool) string {
	if f.Kind != profile.KindRuby || b.MinLine <= 0 {
		return f.Name(false)
	}
	at := strconv.Itoa(b.MinLine)
	if !lines && b.MaxLine != b.MinLine {
		at += "-" + strconv.Itoa(b.MaxLine)
	}
	return f.Label + " (" + f.Path + ":" + at + ")"
}

// duration writes d as people read a box's: ms below a second.
func duration(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + " s"
}

// stackChartJS makes the chart answer the pointer: the hovered box's
// title on the details line; a click selects a box and, in a frame of the
// same origin (rbscope ui's page), posts its function and time to the
// page. Dragging across the chart (4 pixels or more, else it is a click)
// draws the range of time with its length and, framed, posts the range
// to the page on release; Esc drops a drag under way, or, framed, asks
// the page to clear its range.
const stackChartJS = `
var details, selected = null, drag = null, swallow = false;
function init(evt) {
  details = document.getElementById("details");
  Array.prototype.slice.call(document.querySelectorAll("g.f")).forEach(function (g) {
    var title = g.querySelector("title").textContent;
    g.addEventListener("mouseover", function () { details.textContent = title; });
    g.addEventListener("mouseout", function () { details.textContent = selected ? selected.querySelector("title").textContent : " "; });
    g.addEventListener("click", function () { if (!swallow) select(g, title); });
  });
  var svg = document.documentElement, frames = document.getElementById("frames");
  var num = function (a) { return parseFloat(frames.getAttribute(a)); };
  var x0 = num("data-x0"), x1 = num("data-x1"), y0 = num("data-y0"), y1 = num("data-y1"), t0 = num("data-from"), t1 = num("data-to");
  var at = function (e) { var m = svg.getScreenCTM(); return (e.clientX - m.e) / m.a; };
  var clamp = function (x) { return Math.max(x0, Math.min(x1, x)); };
  var time = function (x) { return t0 + (x - x0) / (x1 - x0) * (t1 - t0); };
  var length = function (s) { return s < 1 ? (s * 1000).toFixed(1) + " ms" : s.toFixed(3) + " s"; };
  var ns = "http://www.w3.org/2000/svg";
  svg.addEventListener("mousedown", function (e) {
    var x = at(e);
    if (e.button !== 0 || x < x0 || x > x1) return;
    e.preventDefault();
    drag = { cx: e.clientX, x: x, moved: false, g: null, a: 0, b: 0 };
  });
  window.addEventListener("mousemove", function (e) {
    if (!drag || (!drag.moved && Math.abs(e.clientX - drag.cx) < 4)) return;
    drag.moved = true;
    var x = at(e);
    drag.a = clamp(Math.min(drag.x, x));
    drag.b = clamp(Math.max(drag.x, x));
    if (!drag.g) {
      var old = document.getElementById("range");
      if (old) old.parentNode.removeChild(old);
      drag.g = document.createElementNS(ns, "g");
      drag.g.setAttribute("id", "range");
      drag.g.appendChild(document.createElementNS(ns, "rect"));
      drag.g.appendChild(document.createElementNS(ns, "text"));
      svg.appendChild(drag.g);
    }
    var r = drag.g.firstChild, t = drag.g.lastChild, from = time(drag.a), to = time(drag.b);
    r.setAttribute("x", drag.a); r.setAttribute("y", y0); r.setAttribute("width", drag.b - drag.a); r.setAttribute("height", y1 - y0);
    t.setAttribute("x", drag.a + 3); t.setAttribute("y", y0 + 11);
    t.textContent = from.toFixed(3) + "\u2013" + to.toFixed(3) + " s: " + length(to - from);
    drag.g.setAttribute("data-from", from); drag.g.setAttribute("data-to", to);
  });
  window.addEventListener("mouseup", function () {
    var d = drag;
    drag = null;
    if (!d || !d.moved) return;
    swallow = true; // the click that follows the release is the drag's
    setTimeout(function () { swallow = false; }, 0);
    if (d.b > d.a && window.parent !== window) {
      window.parent.postMessage({ rbscope: "stackchart", range: true, from: time(d.a), to: time(d.b) }, location.origin);
    }
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    if (drag) {
      if (drag.g) drag.g.parentNode.removeChild(drag.g);
      drag = null;
    } else if (window.parent !== window) {
      window.parent.postMessage({ rbscope: "stackchart", escape: true }, location.origin);
    }
  });
}
function select(g, title) {
  if (selected) selected.classList.remove("on");
  selected = g;
  g.classList.add("on");
  details.textContent = title;
  if (window.parent !== window) {
    window.parent.postMessage({ rbscope: "stackchart", fn: g.getAttribute("data-fn"), title: title,
      from: parseFloat(g.getAttribute("data-from")), to: parseFloat(g.getAttribute("data-to")) }, location.origin);
  }
}
`
