package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/heap/heaptest"
	"github.com/rbscope/rbscope/internal/testruby"
)

// profiledReport is what testdata/apps/profiled.rb reports.
type profiledReport struct {
	PID       int            `json:"pid"`
	Phase     string         `json:"phase"`
	CPU       float64        `json:"cpu"`
	Runs      int            `json:"runs"`
	Samples   int            `json:"samples"`
	GCSamples int            `json:"gc_samples"`
	Frames    map[string]int `json:"frames"`
	Kept      string         `json:"kept"`
	Dump      string         `json:"dump"`
}

// collapsedShares reads a collapsed profile: the samples outside garbage
// collection, those in it, and for each label the samples outside it
// whose stack holds the label (once however often).
func collapsedShares(collapsed string) (total, gc int, with map[string]int) {
	with = map[string]int{}
	eachCollapsed(collapsed, func(stack string, n int) {
		if strings.Contains(stack, ";(garbage collection)") {
			gc += n
			return
		}
		total += n
		seen := map[string]bool{}
		for _, f := range strings.Split(stack, ";") {
			label, _, _ := strings.Cut(f, " (")
			if !seen[label] {
				seen[label] = true
				with[label] += n
			}
		}
	})
	return total, gc, with
}

// TestRealCLIs runs CPU-bound command-line programs from Debian's
// packages, which nobody here wrote, on Debian's Ruby (testdata/apps/
// profiled.rb): Jekyll building a 300-post blog (Markdown, Rouge's
// highlighting, Liquid), and RDoc documenting Ruby's net/ and uri/
// libraries. It holds rbscope to what each program and an in-process
// profiler say of the same run: record, from outside, gives each of the
// program's busiest functions the share of samples that stackprof
// (Debian's ruby-stackprof, inside the process) gives it, and garbage
// collection the share stackprof counted; stack finds the program where
// it waits; heap dump, once the runs are done and their result held,
// writes no object partially and reaches what the program's own dump_all
// reaches.
func TestRealCLIs(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root to trace the program")
	}
	needCommand(t, "ruby")
	if out, err := exec.Command("ruby", "-e", `require "jekyll"; require "stackprof"; require "rdoc"`).CombinedOutput(); err != nil {
		testruby.Missing(t, "Debian's jekyll and ruby-stackprof are not installed (make deps installs them): %s", out)
	}
	for _, program := range []string{"jekyll", "rdoc"} {
		t.Run(program, func(t *testing.T) { profiledAgainstStackprof(t, program) })
	}
}

func profiledAgainstStackprof(t *testing.T, program string) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	cmd := exec.Command("ruby", testruby.Testdata("apps/profiled.rb"), program, dir, report, "4")
	log := startGroup(t, cmd)
	wait := func(phase string) profiledReport {
		t.Helper()
		for deadline := time.Now().Add(300 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var r profiledReport
			if b, err := os.ReadFile(report); err == nil && json.Unmarshal(b, &r) == nil && r.Phase == phase {
				return r
			}
			if time.Now().After(deadline) || processZombie(cmd.Process.Pid) {
				t.Fatalf("setup: %s did not reach %q; output:\n%s", program, phase, log.String())
			}
		}
	}
	wait("ready")
	pid := strconv.Itoa(cmd.Process.Pid)

	// record from before the builds begin to after they end (the program
	// is idle on either side: no CPU sample there), at 250 Hz: about
	// 1,500 samples, so that a share's sampling error is near 1%.
	rec := exec.Command(rbscopeBin, "record", "-p", pid, "--rate", "250", "-f", "collapsed", "-o", "-")
	var out, errOut strings.Builder
	rec.Stdout, rec.Stderr = &out, &errOut
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	// The builds start once record samples (it holds the target's
	// thread clock or switch ring, opened at its first tick, or the main
	// thread's stat file): a fixed half second was not always enough on
	// a loaded machine, and record missed the first build's start, 13% of
	// stackprof's samples (all outside Site#render).
	sampling := func(link string) bool {
		return link == "anon_inode:[perf_event]" || link == "/proc/"+pid+"/task/"+pid+"/stat"
	}
	for deadline := time.Now().Add(60 * time.Second); !holdsFile(rec.Process.Pid, sampling); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("record did not start sampling within 60 s")
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	prof := wait("profiled")
	rec.Process.Signal(syscall.SIGINT)
	if err := rec.Wait(); err != nil {
		t.Fatalf("record: %v: %s", err, errOut.String())
	}
	total, gc, with := collapsedShares(out.String())
	theirTotal := prof.Samples - prof.GCSamples
	t.Logf("%d runs (%s) in %.1f s of CPU; stackprof %d samples (%d in GC), rbscope %d (%d in GC); %s",
		prof.Runs, prof.Kept, prof.CPU, prof.Samples, prof.GCSamples, total+gc, gc, strings.TrimSpace(errOut.String()))
	if total < 500 || theirTotal < 500 {
		t.Fatalf("too few samples to compare: rbscope %d, stackprof %d", total, theirTotal)
	}
	// The program's busiest functions, by stackprof's count: each in 10% to 90%
	// of its samples (a label stackprof counts twice in one sample, over
	// two frames of the same name, is left out; so are its garbage
	// collection's frames, compared below).
	var labels []string
	for l, n := range prof.Frames {
		if s := float64(n) / float64(theirTotal); s >= 0.10 && s <= 0.90 && !strings.HasPrefix(l, "(") {
			labels = append(labels, l)
		}
	}
	sort.Slice(labels, func(i, j int) bool { return prof.Frames[labels[i]] > prof.Frames[labels[j]] })
	if len(labels) < 10 {
		t.Fatalf("stackprof names %d functions in 10-90%% of its samples: %v", len(labels), prof.Frames)
	}
	for _, l := range labels {
		theirs := float64(prof.Frames[l]) / float64(theirTotal)
		mine := float64(with[l]) / float64(total)
		t.Logf("%5.1f%% (stackprof %5.1f%%) %s", 100*mine, 100*theirs, l)
		if mine < theirs-0.07 || mine > theirs+0.07 {
			t.Errorf("%s in %.1f%% of rbscope's samples, in %.1f%% of stackprof's", l, 100*mine, 100*theirs)
		}
	}
	gcMine, gcTheirs := float64(gc)/float64(total+gc), float64(prof.GCSamples)/float64(prof.Samples)
	t.Logf("garbage collection: %.1f%% of rbscope's samples, %.1f%% of stackprof's", 100*gcMine, 100*gcTheirs)
	if gcMine < gcTheirs-0.05 || gcMine > gcTheirs+0.05 {
		t.Errorf("garbage collection in %.1f%% of rbscope's samples, in %.1f%% of stackprof's", 100*gcMine, 100*gcTheirs)
	}

	// The program waits for DIR/dump: stack finds it there.
	stackOut, stderr, code := rbscope(t, "stack", "-p", pid)
	if code != 0 || !strings.Contains(stackOut, "Kernel#sleep") || !strings.Contains(stackOut, "profiled.rb:") {
		t.Errorf("stack: exit %d, %s\n%s", code, stderr, stackOut)
	}

	if err := os.WriteFile(filepath.Join(dir, "dump"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dumped := wait("dumped")
	mine := filepath.Join(dir, "rbscope.json")
	_, stderr, code = rbscope(t, "heap", "dump", "-p", pid, "-o", mine)
	if code != 0 {
		t.Fatalf("heap dump: exit %d: %s", code, stderr)
	}
	t.Log(strings.TrimSpace(stderr))
	if strings.Contains(stderr, "partial") || strings.Contains(stderr, "budget") {
		t.Errorf("a benign program's dump is not whole: %s", stderr)
	}
	g, err := heap.LoadFile(mine)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := heap.LoadFile(dumped.Dump)
	if err != nil {
		t.Fatal(err)
	}
	reach := heaptest.Compare(g, theirs)
	t.Logf("%v", reach)
	if reach.Share() < heaptest.Share {
		t.Errorf("reached %.2f%% of what dump_all reaches, want >= %.0f%%", 100*reach.Share(), 100*heaptest.Share)
	}
}
