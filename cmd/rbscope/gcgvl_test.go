package main

import (
	"bufio"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/teststat"
)

// collapsedLines parses collapsed stacks into (frames, count) pairs.
func collapsedLines(t *testing.T, collapsed string) (stacks [][]string, counts []int) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(collapsed))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("not a collapsed line: %q", line)
		}
		n, err := strconv.Atoi(line[i+1:])
		if err != nil {
			t.Fatalf("not a collapsed line: %q", line)
		}
		stacks = append(stacks, strings.Split(line[:i], ";"))
		counts = append(counts, n)
	}
	return stacks, counts
}

// TestRecordGCShare records testdata/gc_split.rb, which spends a share of
// its CPU time in GC.start that it measures itself with its thread CPU
// clock: the share of samples ending in (garbage collection) must match
// it (5 points, or the sampled share's error, teststat.Share), every such
// sample must sit on the Ruby stack that called GC.start, with the phase
// under it if any, and marking must be seen on every Ruby, sweeping on one
// at least.
func TestRecordGCShare(t *testing.T) {
	sweeping := false
	rubies := testruby.Rubies(t)
	for _, rb := range rubies {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "gc_split.rb", nil, "60")
			var rep struct{ PID int }
			p.WaitReport(t, &rep, 60*time.Second)
			// Windows of 4 seconds until there are 150 samples (at most 4):
			// a busy machine may give the program little CPU in one.
			before := splitCPU(t, p, 1)
			var after map[string]float64
			var stacks [][]string
			var counts []int
			for w := 0; w < 4 && sum(counts) < 150; w++ {
				out, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--rate", "200", "--duration", "4s", "-f", "collapsed", "-o", "-")
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				after = splitCPU(t, p, w+2)
				st, c := collapsedLines(t, out)
				stacks, counts = append(stacks, st...), append(counts, c...)
			}
			gcCPU, workCPU := after["gc"]-before["gc"], after["work"]-before["work"]
			total, inGC, phases := 0, 0, map[string]int{}
			for i, st := range stacks {
				total += counts[i]
				at := -1
				for j, f := range st {
					if f == profile.LabelGC {
						at = j
					}
				}
				if at < 0 {
					continue
				}
				inGC += counts[i]
				if at == 0 || !strings.Contains(st[at-1], "GC.start") {
					t.Errorf("GC sample not on the stack of GC.start: %s", strings.Join(st, ";"))
				}
				phase := "(none)"
				if at+1 < len(st) {
					phase = st[at+1]
				}
				phases[phase] += counts[i]
				// A step caught between gc_enter and its phase's start
				// (or compacting) has no phase frame.
				if at+2 < len(st) || (phase != profile.LabelMarking && phase != profile.LabelSweeping && phase != "(none)") {
					t.Errorf("GC sample ends %v, want %s, %s or nothing under it", st[at:], profile.LabelMarking, profile.LabelSweeping)
				}
			}
			if total < 150 || gcCPU+workCPU <= 0 {
				t.Fatalf("only %d samples (%.2fs of the program's CPU)", total, gcCPU+workCPU)
			}
			got := 100 * float64(inGC) / float64(total)
			want := 100 * gcCPU / (gcCPU + workCPU)
			tol := math.Max(5, 100*teststat.Share(want/100, float64(total), len(rubies)))
			t.Logf("%d samples, %.1f%% in GC %v; the program measured %.1f%% of %.2fs CPU in GC.start", total, got, phases, want, gcCPU+workCPU)
			if math.Abs(got-want) > tol {
				t.Errorf("%.1f%% of samples in GC, the program measured %.1f%% of its CPU in GC.start (±%.1f)", got, want, tol)
			}
			if phases[profile.LabelMarking] == 0 {
				t.Errorf("no sample while marking")
			}
			sweeping = sweeping || phases[profile.LabelSweeping] > 0
		})
	}
	if !sweeping && !t.Failed() {
		t.Errorf("no sample while sweeping on any Ruby")
	}
}

// TestRecordGVLWait records testdata/gvl_spin.rb, whose two threads only
// run Ruby code, so one of them always waits for the GVL the other holds.
// With --idle, every tick samples both, and about half of their samples
// (one of two threads at any moment, whatever else the machine does) end
// in (waiting for GVL). With --gvl the waiting thread is sampled too while
// the main thread, asleep in join, is not.
func TestRecordGVLWait(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "gvl_spin.rb", nil, "30")
			var rep struct{ PID int }
			p.WaitReport(t, &rep, 30*time.Second)
			for _, mode := range []string{"--idle", "--gvl"} {
				// Windows of 2 s until the spinners have 100 samples (at
				// most 4): with --gvl a spinner is sampled only while it
				// runs or waits for the GVL, and a busy machine keeps both
				// off a CPU for much of a window (27 samples in one, seen
				// beside other test runs).
				var out string
				for try := 0; try < 4; try++ {
					o, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--rate", "200", "--duration", "2s", "--threads", mode, "-f", "collapsed", "-o", "-")
					if code != 0 {
						t.Fatalf("%s: exit %d: %s", mode, code, stderr)
					}
					out += strings.TrimSuffix(o, "\n") + "\n"
					if a, _ := samplesWith(out, "thread spin-a;"); a >= 50 {
						if b, _ := samplesWith(out, "thread spin-b;"); a+b >= 100 {
							break
						}
					}
				}
				stacks, counts := collapsedLines(t, out)
				spin, waiting, mainSamples := 0, map[string]int{}, 0
				for i, st := range stacks {
					thread, leaf := st[0], st[len(st)-1]
					switch thread {
					case "thread spin-a", "thread spin-b":
						spin += counts[i]
						if leaf == profile.LabelGVLWait {
							waiting[thread] += counts[i]
						}
					case "thread main":
						mainSamples += counts[i]
						// Before join, the main thread takes the GVL back
						// after its report's File.rename, behind the
						// spinners, which on a busy machine is seen.
						if stack := strings.Join(st, ";"); leaf == profile.LabelGVLWait && strings.Contains(stack, "Thread#join") {
							t.Errorf("%s: the main thread, asleep in join, waits for the GVL: %s", mode, stack)
						}
					}
				}
				share := 100 * float64(waiting["thread spin-a"]+waiting["thread spin-b"]) / float64(max(spin, 1))
				t.Logf("%s: %d spinner samples, %.1f%% waiting for the GVL %v; %d of the main thread", mode, spin, share, waiting, mainSamples)
				if spin < 100 {
					t.Fatalf("%s: only %d samples of the spinning threads", mode, spin)
				}
				if waiting["thread spin-a"] == 0 || waiting["thread spin-b"] == 0 {
					t.Errorf("%s: a spinning thread never waited for the GVL: %v", mode, waiting)
				}
				switch mode {
				case "--idle":
					if share < 40 || share > 60 {
						t.Errorf("--idle: %.1f%% of the spinners' samples wait for the GVL, want about half", share)
					}
					if mainSamples == 0 {
						t.Errorf("--idle: no sample of the main thread")
					}
				case "--gvl":
					if mainSamples != 0 {
						t.Errorf("--gvl: %d samples of the main thread, asleep in join", mainSamples)
					}
				}
			}
		})
	}
}

// sum adds up counts.
func sum(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
