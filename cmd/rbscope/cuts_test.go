package main

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/output/rawtest"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/testruby"
)

// cutsReport is what testdata/cuts.rb says of itself: its threads' TIDs.
type cutsReport struct {
	PID  int            `json:"pid"`
	TIDs map[string]int `json:"tids"`
}

// holds reports whether stack si of p has a frame labelled label.
func holds(p *profile.Profile, si int, label string) bool {
	return slices.ContainsFunc(p.StackFrames(si), func(f profile.Frame) bool { return f.Label == label })
}

// TestCuts: record, report and top cut testdata/cuts.rb's samples by
// thread (name or TID) and endpoint, on every Ruby: the samples kept are
// exactly those of the thread the program names or of the fake Rails
// action ctxlabels recognises; report --by and --callers tell its threads,
// endpoints and callers apart; a cut that matches nothing is a usage
// error naming what there was; top --duration ends on its own.
func TestCuts(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "cuts.rb", nil, "120")
			var rep cutsReport
			p.WaitReport(t, &rep, 30*time.Second)
			pid := strconv.Itoa(p.PID())
			dir := t.TempDir()
			raw := filepath.Join(dir, "all.raw.gz")
			if _, errOut, code := rbscope(t, "record", "-p", pid, "-d", "4", "-r", "200", "-f", "raw", "-o", raw); code != 0 {
				t.Fatalf("record: exit %d: %s", code, errOut)
			}
			all := rawtest.Read(t, raw)
			// The raw recording keeps the labels: a stack is labelled
			// with an action exactly when the action's frame is in it.
			for si, st := range all.Stacks {
				for _, action := range []string{"ItemsController#index", "ItemsController#show"} {
					if holds(all, si, action) != (st.Label(profile.LabelEndpoint) == action) {
						t.Errorf("stack %v: endpoint %q", all.StackFrames(si), st.Label(profile.LabelEndpoint))
					}
				}
			}
			cutRecording(t, raw, rep)
			cutLive(t, pid, dir, rep)
			topDuration(t, pid)
		})
	}
}

// cutRecording checks report's cuts, --by and --callers on the raw
// recording raw of cuts.rb.
func cutRecording(t *testing.T, raw string, rep cutsReport) {
	t.Helper()
	all := rawtest.Read(t, raw)
	byThread := map[int]int{}
	for _, s := range all.Timeline {
		byThread[s.TID]++
	}
	for _, spec := range []string{"cruncher", strconv.Itoa(rep.TIDs["cruncher"]), "cr.*er"} {
		out := filepath.Join(filepath.Dir(raw), "cut.raw.gz")
		if _, errOut, code := rbscope(t, "report", "-i", raw, "--thread", spec, "-f", "raw", "-o", out); code != 0 {
			t.Fatalf("report --thread %s: exit %d: %s", spec, code, errOut)
		}
		cut := rawtest.Read(t, out)
		if cut.Samples != byThread[rep.TIDs["cruncher"]] || cut.Samples == 0 {
			t.Errorf("report --thread %s: %d samples, the recording has %d of cruncher", spec, cut.Samples, byThread[rep.TIDs["cruncher"]])
		}
		for _, s := range cut.Timeline {
			if s.TID != rep.TIDs["cruncher"] || !holds(cut, s.Stack, "Object#crunch") {
				t.Fatalf("report --thread %s: a sample of tid %d, %v", spec, s.TID, cut.StackFrames(s.Stack))
			}
		}
	}
	collapsed, errOut, code := rbscope(t, "report", "-i", raw, "--endpoint", "ItemsController#show", "-f", "collapsed", "-o", "-")
	if code != 0 || collapsed == "" {
		t.Fatalf("report --endpoint: exit %d: %s", code, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(collapsed), "\n") {
		if !strings.Contains(line, "ItemsController#show") {
			t.Errorf("report --endpoint ItemsController#show: %s", line)
		}
	}
	table, errOut, code := rbscope(t, "report", "-i", raw, "--by", "thread")
	if code != 0 {
		t.Fatalf("report --by thread: exit %d: %s", code, errOut)
	}
	for name, tid := range rep.TIDs {
		if byThread[tid] > 0 && !regexpLine(table, `^`+name+` \(tid `+strconv.Itoa(tid)+`\) +`+strconv.Itoa(byThread[tid])+` `) {
			t.Errorf("report --by thread: no row of %s with its %d samples:\n%s", name, byThread[tid], table)
		}
	}
	table, errOut, code = rbscope(t, "report", "-i", raw, "--by", "endpoint")
	if code != 0 || !regexpLine(table, `^ItemsController#index +\d+ .*Object#spin`) || !regexpLine(table, `^\(no endpoint\) +\d+ `) {
		t.Errorf("report --by endpoint: exit %d: %s\n%s", code, errOut, table)
	}
	sw, errOut, code := rbscope(t, "report", "-i", raw, "--callers", "Object#spin", "--lines")
	if code != 0 {
		t.Fatalf("report --callers: exit %d: %s", code, errOut)
	}
	for _, want := range []string{`^ +\d+ +[\d.]+%  block in ItemsController#index \(.*cuts.rb:\d+\)$`, `^ +\d+ +[\d.]+%  block in Object#crunch \(.*cuts.rb:\d+\)$`, `^ +\d+ +[\d.]+%  line \d+$`} {
		if !regexpLine(sw, want) {
			t.Errorf("report --callers Object#spin --lines: no line %s:\n%s", want, sw)
		}
	}
	for _, bad := range [][]string{
		{"--by", "foo"}, {"--thread", "nobody"}, {"--endpoint", "Nope#x"}, {"--callers", "Nope#x"},
	} {
		_, errOut, code := rbscope(t, append([]string{"report", "-i", raw, "-o", "-"}, bad...)...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || len(lines) != 1 || bad[0] == "--thread" && !strings.Contains(errOut, `"cruncher"`) || bad[0] == "--endpoint" && !strings.Contains(errOut, "ItemsController#index") {
			t.Errorf("report %v: exit %d, %q; want one line naming what there is, exit 2", bad, code, errOut)
		}
	}
}

// cutLive checks record's cuts on the live cuts.rb (pid).
func cutLive(t *testing.T, pid, dir string, rep cutsReport) {
	t.Helper()
	out := filepath.Join(dir, "live.raw.gz")
	for _, tc := range []struct {
		args  []string
		check func(p *profile.Profile, s profile.Sample) bool
	}{
		{[]string{"--thread", "cruncher"}, func(p *profile.Profile, s profile.Sample) bool {
			return s.TID == rep.TIDs["cruncher"] && holds(p, s.Stack, "Object#crunch")
		}},
		{[]string{"--thread", strconv.Itoa(rep.TIDs["napper"]), "--idle"}, func(p *profile.Profile, s profile.Sample) bool {
			return s.TID == rep.TIDs["napper"] && holds(p, s.Stack, "Object#nap")
		}},
		{[]string{"--endpoint", "ItemsController#index"}, func(p *profile.Profile, s profile.Sample) bool {
			return s.TID == rep.TIDs["main"] && holds(p, s.Stack, "ItemsController#index") && p.Stacks[s.Stack].Label(profile.LabelEndpoint) == "ItemsController#index"
		}},
	} {
		if _, errOut, code := rbscope(t, append([]string{"record", "-p", pid, "-d", "2", "-r", "200", "-f", "raw", "-o", out}, tc.args...)...); code != 0 {
			t.Fatalf("record %v: exit %d: %s", tc.args, code, errOut)
		}
		p := rawtest.Read(t, out)
		if p.Samples == 0 {
			t.Errorf("record %v: no sample", tc.args)
		}
		for _, s := range p.Timeline {
			if !tc.check(p, s) {
				t.Fatalf("record %v: a sample of tid %d, %v", tc.args, s.TID, p.StackFrames(s.Stack))
			}
		}
	}
	// A --thread naming none of the process's threads fails at once, not
	// after the recording's 60 seconds.
	start := time.Now()
	_, errOut, code := rbscope(t, "record", "-p", pid, "-d", "60", "--thread", "nobody", "-f", "summary", "-o", "-")
	if time.Since(start) > 30*time.Second {
		t.Errorf("record --thread nobody -d 60 took %v", time.Since(start))
	}
	if code != 2 || !strings.Contains(errOut, `"cruncher" (tid `+strconv.Itoa(rep.TIDs["cruncher"])+`)`) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("record --thread nobody: exit %d, %q; want one line naming the threads, exit 2", code, errOut)
	}
}

// topDuration runs top --duration on pid, cut to one thread: it ends on
// its own, and its header says the cut and counts threads, not ticks.
func topDuration(t *testing.T, pid string) {
	t.Helper()
	for _, tc := range []struct {
		args []string
		head string
	}{
		{[]string{"--thread", "cruncher"}, `, thread "cruncher": \d+ samples, [\d.]+ threads a tick on a CPU, `},
		{[]string{"--idle"}, `: \d+ samples, [\d.]+ threads a tick \(--idle: running or not\), `},
	} {
		start := time.Now()
		out, errOut, code := rbscope(t, append([]string{"top", "-p", pid, "--duration", "3"}, tc.args...)...)
		if code != 0 || time.Since(start) > 30*time.Second {
			t.Fatalf("top --duration 3 %v: exit %d after %v: %s", tc.args, code, time.Since(start), errOut)
		}
		if !regexpLine(out, `^rbscope top: pid \d+, last \d+s`+tc.head) {
			t.Errorf("top %v: no header %s:\n%s", tc.args, tc.head, out)
		}
	}
}
