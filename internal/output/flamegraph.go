package output

import (
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/profile"
)

// Flame graph geometry, in SVG pixels.
const (
	fgWidth    = 1200.0
	fgPad      = 10.0
	fgFrameH   = 16.0
	fgFontSize = 12.0
	fgTop      = 60.0 // room for the title and controls
	fgBottom   = 30.0 // room for the details line
	fgMinWidth = 0.1  // narrower frames are left out, as flamegraph.pl does
)

// fgNode is a node of the merged call tree.
type fgNode struct {
	frame    int
	count    int
	children map[int]*fgNode
	order    []int
}

func (n *fgNode) child(frame int) *fgNode {
	if c, ok := n.children[frame]; ok {
		return c
	}
	if n.children == nil {
		n.children = map[int]*fgNode{}
	}
	c := &fgNode{frame: frame}
	n.children[frame] = c
	n.order = append(n.order, frame)
	return c
}

type fgRect struct {
	x, w  float64 // in samples
	depth int
	name  string
	fn    string // the function, Frame.Name(false): what a focus names
	kind  profile.Kind
	count int
	// change is the change of the frame's share against the baseline, in
	// points (Options.Baseline).
	change float64
}

// Flamegraph writes a self-contained interactive SVG flame graph: click a
// frame to zoom into it, "Search" to highlight frames matching a regular
// expression, hover for sample counts.
func Flamegraph(w io.Writer, p *profile.Profile, o Options) error {
	root := &fgNode{frame: -1}
	for _, st := range p.Stacks {
		root.count += st.Count
		n := root
		for _, id := range st.Frames {
			n = n.child(id)
			n.count += st.Count
		}
	}
	total := root.count
	scale := 0.0
	if total > 0 {
		scale = (fgWidth - 2*fgPad) / float64(total)
	}
	var rects []fgRect
	maxDepth := 0
	var base map[string]float64
	if o.Baseline != nil {
		base = o.Baseline.PrefixShares(o.Lines)
	}
	var walk func(n *fgNode, x float64, depth int, path string)
	walk = func(n *fgNode, x float64, depth int, path string) {
		// Children sorted by name, as flamegraph.pl does, so that equal
		// stacks line up across runs.
		kids := append([]int(nil), n.order...)
		sort.Slice(kids, func(i, j int) bool {
			return p.Frames[kids[i]].Name(o.Lines) < p.Frames[kids[j]].Name(o.Lines)
		})
		for _, id := range kids {
			c := n.children[id]
			if float64(c.count)*scale >= fgMinWidth {
				f := p.Frames[id]
				name := f.Name(o.Lines)
				r := fgRect{x: x, w: float64(c.count), depth: depth, name: name, fn: f.Name(false), kind: f.Kind, count: c.count}
				cpath := profile.PrefixKey(path, name)
				if base != nil {
					r.change = 100*float64(c.count)/float64(total) - base[cpath]
				}
				rects = append(rects, r)
				maxDepth = max(maxDepth, depth)
				walk(c, x, depth+1, cpath)
			}
			x += float64(c.count)
		}
	}
	walk(root, 0, 0, "")

	height := fgTop + float64(maxDepth+1)*fgFrameH + fgBottom
	title := o.Title
	if title == "" {
		title = "rbscope flame graph"
	}
	bw := &errWriter{w: w}
	bw.printf(`<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="init(evt)">
<style type="text/css">
text { font-family: Verdana, sans-serif; font-size: %.0fpx; fill: #000; }
#title { font-size: 17px; text-anchor: middle; }
.ctl { cursor: pointer; }
g.f:hover rect { stroke: #000; stroke-width: 0.5; cursor: pointer; }
</style>
`, fgWidth, height, fgWidth, height, fgFontSize)
	bw.printf(`<rect x="0" y="0" width="%.0f" height="%.0f" fill="#f8f8f8"/>
<text id="title" x="%.0f" y="24">%s</text>
<text id="subtitle" x="%.0f" y="42" style="text-anchor: middle; font-size: 11px; fill: #555">%d samples, %.1f s at %g Hz, %d unreadable</text>
<text id="reset" class="ctl" x="%.0f" y="24" style="opacity: 0">Reset Zoom</text>
<text id="search" class="ctl" x="%.0f" y="24" style="text-anchor: end">Search</text>
<text id="matched" x="%.0f" y="%.0f" style="text-anchor: end"></text>
<text id="details" x="%.0f" y="%.0f"> </text>
`, fgWidth, height, fgWidth/2, html.EscapeString(title), fgWidth/2, p.Samples, p.Duration.Seconds(), p.Rate, p.Errors,
		fgPad, fgWidth-fgPad, fgWidth-fgPad, height-10, fgPad, height-10)
	bw.printf(`<g id="frames" data-total="%d" data-scale="%g" data-start="%d" data-icicle="%t">`+"\n", total, scale, startDepth(p, root), o.Icicle)
	for _, r := range rects {
		y := height - fgBottom - float64(r.depth+1)*fgFrameH
		if o.Icicle {
			y = fgTop + float64(r.depth)*fgFrameH
		}
		name := html.EscapeString(r.name)
		fill, change := color(r.name, r.kind), ""
		if base != nil {
			fill, change = ChangeColor(r.change), fmt.Sprintf(", %+.2f points", r.change)
		}
		bw.printf(`<g class="f" data-x="%g" data-w="%g" data-fn="%s" data-d="%d"><title>%s (%d samples, %.2f%%%s)</title><rect x="%.2f" y="%.0f" width="%.2f" height="%.0f" fill="%s" rx="2" ry="2"/><text x="%.2f" y="%.1f">%s</text></g>`+"\n",
			r.x, r.w, html.EscapeString(r.fn), r.depth, name, r.count, Pct(r.count, total), change,
			fgPad+r.x*scale, y, r.w*scale, fgFrameH-1, fill, fgPad+r.x*scale+3, y+fgFrameH-4.5,
			html.EscapeString(fitText(r.name, r.w*scale)))
	}
	bw.printf("</g>\n<script type=\"text/ecmascript\"><![CDATA[\n%s\n]]></script>\n</svg>\n", strings.TrimSpace(flamegraphJS))
	return bw.err
}

// startDepth is the depth a flame graph opens at, scrolled so that its
// frames show (depth 0, the roots, needs no scroll): where the request's
// own frames begin, the outermost frame of an endpoint's action or route
// (the frame ctxlabels names it by: its label, or for a Sinatra route its
// method), below which a Rails stack holds a hundred frames of Puma, Rack
// and middleware that every request shares; without endpoints, the depth
// where the stacks first part (the trunk every sample shares ends).
func startDepth(p *profile.Profile, root *fgNode) int {
	start := -1
	for _, st := range p.Stacks {
		e := st.Label(profile.LabelEndpoint)
		if e == "" {
			continue
		}
		for k, id := range st.Frames {
			if f := p.Frames[id]; f.Label == e || f.Method == e {
				if start < 0 || k < start {
					start = k
				}
				break
			}
		}
	}
	if start >= 0 {
		return start
	}
	depth := 0
	for n := root; len(n.children) == 1; depth++ {
		n = n.children[n.order[0]]
	}
	return max(depth-1, 0)
}

// fgCharWidth is the average width of a character at fgFontSize.
const fgCharWidth = 7.2

// fitText shortens a frame name to what fits in width pixels, as the
// script does again after a zoom (so the graph reads without scripts too).
func fitText(name string, width float64) string {
	fit := int((width - 6) / fgCharWidth)
	switch {
	case fit < 3:
		return ""
	case len(name) <= fit:
		return name
	}
	return name[:fit-2] + ".."
}

// color picks a warm color for Ruby frames, a yellow-green for C methods and
// grey-blue for the synthetic process and thread roots, stable per name.
func color(name string, kind profile.Kind) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	a, b, c := int(v%55), int((v>>8)%80), int((v>>16)%55)
	switch kind {
	case profile.KindCFunc:
		return fmt.Sprintf("rgb(%d,%d,%d)", 180+a, 190+c/2, 60+b/2)
	case profile.KindRuby:
		return fmt.Sprintf("rgb(%d,%d,%d)", 200+a, 90+b, 40+c/2)
	default:
		return fmt.Sprintf("rgb(%d,%d,%d)", 140+a/2, 160+a/2, 190+c)
	}
}

// ChangeColor colours a frame of a differential flame graph by the change
// of its share, in points: red for more, blue for less, white for none,
// full at 5 points. The ui's comparisons (call tree, sandwich) colour
// their rows with it too.
func ChangeColor(change float64) string {
	v := int(min(math.Abs(change)/5, 1) * 200)
	if change > 0 {
		return fmt.Sprintf("rgb(255,%d,%d)", 255-v, 255-v)
	}
	return fmt.Sprintf("rgb(%d,%d,255)", 255-v, 255-v)
}

// TotalShares returns the share of a recording's samples each of its
// functions is in, in percent, by the name the function table gives it
// (Frame.Name(false)): funcs is its function table (profile.Profile's
// Functions) and samples its samples. The time-ordered views compare a
// recording with another by these, function for function: a box of
// the stack chart or a stretch of the timeline stands for its function,
// wherever in a stack it is.
func TotalShares(funcs []profile.FunctionStat, samples int) map[string]float64 {
	out := make(map[string]float64, len(funcs))
	for _, s := range funcs {
		out[s.Frame.Name(false)] = Pct(s.Total, samples)
	}
	return out
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// flamegraphJS makes the SVG interactive. Frames carry their position in
// samples (data-x, data-w) and depth (data-d); zooming recomputes x and
// width from those, so no state beyond the DOM is kept.
const flamegraphJS = `
var svg, frames, details, reset, searchBtn, matchedText, total, pad = 10, width = 1200, charW = 7.2; // charW: fgCharWidth
function init(evt) {
  svg = document.documentElement;
  frames = Array.prototype.slice.call(document.querySelectorAll("g.f"));
  details = document.getElementById("details");
  reset = document.getElementById("reset");
  searchBtn = document.getElementById("search");
  matchedText = document.getElementById("matched");
  total = parseFloat(document.getElementById("frames").getAttribute("data-total"));
  frames.forEach(function (g) {
    g.addEventListener("click", function () { zoom(g); });
    g.addEventListener("mouseover", function () { details.textContent = g.querySelector("title").textContent; });
    g.addEventListener("mouseout", function () { details.textContent = " "; });
  });
  reset.addEventListener("click", unzoom);
  searchBtn.addEventListener("click", search);
  layout(0, total, -1);
  // Open where the frames read: at the depth startDepth chose (the
  // request's own frames, or where the stacks first part), not on the
  // tips of deep stacks.
  var fs = document.getElementById("frames"), start = parseFloat(fs.getAttribute("data-start")) || 0;
  if (start > 0) {
    var row = null;
    frames.some(function (g) { if (num(g, "data-d") === start) { row = g.querySelector("rect"); return true; } return false; });
    if (row) {
      var y = parseFloat(row.getAttribute("y")), h = window.innerHeight || 600;
      window.scrollTo(0, fs.getAttribute("data-icicle") === "true" ? y - 40 : y + 40 - h + h / 3);
    }
  }
}
function num(g, a) { return parseFloat(g.getAttribute(a)); }
function layout(x0, w0, d0) {
  var scale = (width - 2 * pad) / w0;
  frames.forEach(function (g) {
    var x = num(g, "data-x"), w = num(g, "data-w"), d = num(g, "data-d");
    var inside = x >= x0 && x + w <= x0 + w0 + 1e-9;
    var ancestor = d < d0 && x <= x0 && x + w >= x0 + w0 - 1e-9;
    if (!(inside || ancestor || d0 < 0)) { g.style.display = "none"; return; }
    g.style.display = "";
    var nx = ancestor ? 0 : (x - x0) * scale, nw = ancestor ? width - 2 * pad : w * scale;
    var r = g.querySelector("rect"), t = g.querySelector("text");
    r.setAttribute("x", pad + nx); r.setAttribute("width", nw);
    r.style.opacity = ancestor ? 0.6 : 1;
    t.setAttribute("x", pad + nx + 3);
    var name = g.querySelector("title").textContent.replace(/ \(\d+ samples?, [\d.]+%\)$/, "");
    var fit = Math.floor((nw - 6) / charW);
    t.textContent = fit < 3 ? "" : (name.length <= fit ? name : name.substring(0, fit - 2) + "..");
  });
}
function zoom(g) {
  layout(num(g, "data-x"), num(g, "data-w"), num(g, "data-d"));
  reset.style.opacity = 1;
  // In rbscope ui's page, which offers to start from the frame (a focus
  // kept in the page's URL) and remember it.
  if (window.parent !== window) {
    window.parent.postMessage({ rbscope: "flame", fn: g.getAttribute("data-fn"), title: g.querySelector("title").textContent }, location.origin);
  }
}
function unzoom() { layout(0, total, -1); reset.style.opacity = 0; }
function search() {
  var term = prompt("Search frames (regular expression):", "");
  frames.forEach(function (g) {
    var r = g.querySelector("rect");
    if (!r.hasAttribute("data-fill")) r.setAttribute("data-fill", r.getAttribute("fill"));
    r.setAttribute("fill", r.getAttribute("data-fill"));
  });
  if (!term) { matchedText.textContent = ""; searchBtn.textContent = "Search"; return; }
  var re = new RegExp(term), spans = [];
  frames.forEach(function (g) {
    var name = g.querySelector("title").textContent;
    if (re.test(name)) {
      var r = g.querySelector("rect");
      r.setAttribute("fill", "rgb(230,0,230)");
      spans.push([num(g, "data-x"), num(g, "data-w")]);
    }
  });
  spans.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
  var covered = 0, end = -1;
  spans.forEach(function (s) {
    if (s[0] >= end) { covered += s[1]; end = s[0] + s[1]; }
    else if (s[0] + s[1] > end) { covered += s[0] + s[1] - end; end = s[0] + s[1]; }
  });
  matchedText.textContent = "Matched: " + (100 * covered / total).toFixed(1) + "%";
  searchBtn.textContent = "Search: " + term;
}
`
