package ui

import (
	"fmt"
	"html"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/output/rawtest"
	"github.com/rbscope/rbscope/internal/profile"
)

// TestStackChart: the stack chart of the committed demo recording (two
// threads of a real Ruby), read back box by box, is the recording's
// samples in time order, thread by thread: as it is, focused on fib, and
// over the first half of its samples' time.
func TestStackChart(t *testing.T) {
	raw, _ := demoRecording(t)
	ts := newTestServer(t, Options{Files: []string{raw}})
	checkStackChart(t, ts, 0, raw, "Object#fib (testdata/demo.rb)")
}

var (
	chartTrackRe = regexp.MustCompile(`^<g class="track" data-pid="(\d+)" data-tid="(\d+)" data-samples="(\d+)" data-small="(\d+)">`)
	chartBoxRe   = regexp.MustCompile(`^<g class="f" data-i="(\d+)" data-n="(\d+)" data-d="(\d+)" data-fn="([^"]*)"`)
)

// chartSamples fetches the stack chart of the recording f through the
// transforms tr and reads its boxes back into samples: per thread id,
// each sample's functions, root first, in the order the boxes are drawn
// left to right. It fails the test if the chart left boxes out.
func chartSamples(t *testing.T, ts *testServer, f int, tr string) map[int][][]string {
	t.Helper()
	rec := ts.request(t, "/api/profile/stackchart.svg?f="+strconv.Itoa(f)+"&t="+url.QueryEscape(tr))
	svg := rec.Body.String()
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "image/svg+xml" {
		t.Fatalf("stack chart of %d (%q): %d %s", f, tr, rec.Code, svg)
	}
	out := map[int][][]string{}
	tid := -1
	for _, line := range strings.Split(svg, "\n") {
		if m := chartTrackRe.FindStringSubmatch(line); m != nil {
			tid, _ = strconv.Atoi(m[2])
			n, _ := strconv.Atoi(m[3])
			if m[4] != "0" {
				t.Fatalf("stack chart of %d (%q): %s boxes of thread %d left out", f, tr, m[4], tid)
			}
			out[tid] = make([][]string, n)
		} else if m := chartBoxRe.FindStringSubmatch(line); m != nil {
			first, _ := strconv.Atoi(m[1])
			n, _ := strconv.Atoi(m[2])
			depth, _ := strconv.Atoi(m[3])
			samples := out[tid]
			if tid < 0 || first+n > len(samples) {
				t.Fatalf("stack chart of %d (%q): box %q outside its track's samples", f, tr, line)
			}
			for k := first; k < first+n; k++ {
				for len(samples[k]) <= depth {
					samples[k] = append(samples[k], "")
				}
				samples[k][depth] = html.UnescapeString(m[4])
			}
		}
	}
	return out
}

// checkStackChart checks the stack chart of the page's recording f, the
// raw recording path, against the recording itself: as it is, focused on
// the function focus (the samples through it, from it down) and over the
// time of its first half of samples, each thread's boxes read left to right are the
// thread's samples in time order.
func checkStackChart(t *testing.T, ts *testServer, f int, path, focus string) {
	t.Helper()
	all := func(_ profile.Sample, fns []string) []string { return fns }
	recorded := rawtest.Samples(t, path, all)
	// half: the time by which about half the samples were taken (a busy
	// machine may have taken most of them late).
	var times []time.Duration
	rawtest.Samples(t, path, func(s profile.Sample, fns []string) []string { times = append(times, s.Time); return nil })
	slices.Sort(times)
	half := times[len(times)/2].Truncate(time.Millisecond)
	for _, tc := range []struct {
		ts   string
		keep func(profile.Sample, []string) []string
	}{
		{"", all},
		{"focus:" + focus, func(_ profile.Sample, fns []string) []string {
			if k := slices.Index(fns, focus); k >= 0 {
				return fns[k:]
			}
			return nil
		}},
		{"time:0-" + strconv.FormatFloat(half.Seconds(), 'f', 3, 64), func(s profile.Sample, fns []string) []string {
			if s.Time < half {
				return fns
			}
			return nil
		}},
	} {
		want := recorded
		if tc.ts != "" {
			want = rawtest.Samples(t, path, tc.keep)
		}
		got := chartSamples(t, ts, f, tc.ts)
		samples := 0
		for _, ss := range want {
			samples += len(ss)
		}
		if samples == 0 || len(got) != len(want) {
			t.Errorf("stack chart of %s (%q): %d tracks, the recording %d threads (%d samples)", path, tc.ts, len(got), len(want), samples)
		}
		for tid, ss := range want {
			if !slices.EqualFunc(got[tid], ss, slices.Equal[[]string]) {
				t.Errorf("stack chart of %s (%q), thread %d: the boxes give %d samples, the recording %d; first difference at %s",
					path, tc.ts, tid, len(got[tid]), len(ss), firstDiff(stackLines(ss), stackLines(got[tid])))
			}
		}
	}
}

// stackLines writes samples as lines of their functions, for firstDiff.
func stackLines(samples [][]string) string {
	var b strings.Builder
	for _, fns := range samples {
		b.WriteString(strings.Join(fns, ";") + "\n")
	}
	return b.String()
}

// firstDiff shows the first line where two texts differ.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  recorded: %q\n  chart:    %q", i+1, wl, gl)
		}
	}
	return "(equal lines, different ends)"
}
