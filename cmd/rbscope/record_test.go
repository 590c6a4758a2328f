package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/teststat"
)

type splitReport struct {
	PID   int `json:"pid"`
	Child int `json:"child"`
}

// startSplit starts testdata/split.rb (the 50/30/20 workload) for seconds,
// with env added, and waits for its report.
func startSplit(t *testing.T, rb testruby.Ruby, env []string, seconds string) (*testruby.Process, splitReport) {
	t.Helper()
	p := testruby.Start(t, rb, "split.rb", env, seconds)
	var rep splitReport
	p.WaitReport(t, &rep, 30*time.Second)
	return p, rep
}

// checkNotStopped fails the test if pid is left stopped (by rbscope's
// ptrace or a SIGSTOP).
func checkNotStopped(t *testing.T, pid int) {
	t.Helper()
	if st := processState(t, pid); st == "t" || st == "T" {
		t.Errorf("target left stopped (state %s)", st)
	}
}

// chainShares parses collapsed stacks and returns each chain's share of
// the samples that are in any of the three chains, in percent.
func chainShares(t *testing.T, collapsed string) (map[string]float64, int) {
	t.Helper()
	counts := map[string]int{}
	total := 0
	sc := bufio.NewScanner(strings.NewReader(collapsed))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.Atoi(line[i+1:])
		if err != nil {
			t.Fatalf("bad collapsed line %q", line)
		}
		for _, c := range []string{"chain_a", "chain_b", "chain_c"} {
			if strings.Contains(line[:i], c+" (") {
				counts[c] += n
				total += n
			}
		}
	}
	shares := map[string]float64{}
	for c, n := range counts {
		shares[c] = 100 * float64(n) / float64(max(total, 1))
	}
	return shares, total
}

// splitCPU asks the split workload (SIGUSR1) for the CPU time each chain
// has had so far, by its own thread CPU clock, and waits for the answer.
func splitCPU(t *testing.T, p *testruby.Process, seq int) map[string]float64 {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ans struct {
			Seq int                `json:"seq"`
			CPU map[string]float64 `json:"cpu"`
		}
		if b, err := os.ReadFile(p.Report + ".cpu"); err == nil && json.Unmarshal(b, &ans) == nil && ans.Seq >= seq {
			return ans.CPU
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workload did not say how much CPU its chains had (answer %d)", seq)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRecordKnownSplit records the split workload and checks each chain's
// share of the samples against the share of CPU time the program measured
// each chain get, with its own thread CPU clock, over the same window: a
// busy machine changes both alike, a profiler's bias does not. Every
// recording runs beside two CPU spinners, as a production host is busy;
// each mode runs once with the workload free to move between CPUs, and
// once sharing one CPU with a further spinning process, so that it waits
// for the CPU about half the time (a thread waiting for a CPU stands where
// the kernel preempted it, mostly at system calls, and a profiler that
// counts it there is off by several points). Every chain must be within 3
// points, or its sampled share's error (teststat.Share) where the samples
// are too few for 3 points to be told from chance: at 1000 Hz, recorded
// for 6 seconds at a time until there are 1,500 samples (up to 4 times),
// that is 3 to about 6 points on the eleven Rubies of the matrix (a false
// failure in 10,000 runs of the whole test). The paused mode was
// 2 to 11 points off here while rbscope took the target's CPU to look
// (see the sampler's ownCPUs).
func TestRecordKnownSplit(t *testing.T) {
	rubies := testruby.Rubies(t)
	checks := len(rubies) * 2 * 2 * splitChains
	for _, rb := range rubies {
		t.Run(rb.Name, func(t *testing.T) {
			testruby.Spinners(t, 2)
			for _, shared := range []bool{false, true} {
				for _, mode := range [][]string{nil, {"--nonblocking"}} {
					// Windows of 6 seconds until there are samples enough for
					// the sampling error to stay near 3 points: on a machine
					// busier still, the workload gets little CPU in one.
					checkKnownSplit(t, rb, shared, fmt.Sprint(mode), checks, func(pid int) string {
						args := append([]string{"record", "-p", fmt.Sprint(pid), "--rate", "1000", "--duration", "6s", "-f", "collapsed", "-o", "-"}, mode...)
						out, stderr, code := rbscope(t, args...)
						if code != 0 {
							t.Fatalf("%v: exit %d: %s", args, code, stderr)
						}
						return out
					})
				}
			}
		})
	}
}

// splitChains is how many chains testdata/split.rb runs, and
// checkKnownSplit checks a share of.
const splitChains = 3

// checkKnownSplit records testdata/split.rb (sharing one CPU with a
// spinner when shared) with record, a window at a time, until there are
// 1,500 samples in its chains (at most 4 windows), and checks each chain's
// share of the samples against the share of CPU time the program measured
// it get over the same windows: within 3 points (the sampler's bias this
// test allows), or the sampled share's own error where the samples are too
// few for 3 points to be told from chance (teststat.Share, for the checks
// the test makes in all, one per chain and call). what names the
// recording in the messages.
func checkKnownSplit(t *testing.T, rb testruby.Ruby, shared bool, what string, checks int, record func(pid int) string) {
	t.Helper()
	p, _ := startSplit(t, rb, nil, "60")
	unshare := func() {}
	if shared {
		unshare = testruby.ShareCPU(t, p.PID())
	}
	before := splitCPU(t, p, 1)
	counts, total := map[string]float64{}, 0
	var after map[string]float64
	for w := 0; w < 4 && total < 1500; w++ {
		out := record(p.PID())
		after = splitCPU(t, p, w+2)
		shares, n := chainShares(t, out)
		for c, sh := range shares {
			counts[c] += sh * float64(n) / 100
		}
		total += n
		if strings.Contains(out, "??") {
			t.Errorf("%s: unreadable frames in the profile:\n%.2000s", what, out)
		}
	}
	unshare()
	cpu, sum := map[string]float64{}, 0.0
	shares := map[string]float64{}
	for _, c := range []string{"chain_a", "chain_b", "chain_c"} { // splitChains
		cpu[c] = after[c] - before[c]
		sum += cpu[c]
		shares[c] = 100 * counts[c] / float64(max(total, 1))
	}
	t.Logf("%s, CPU shared %v: %d samples in chains: a=%.1f%% b=%.1f%% c=%.1f%%; the program measured a=%.1f%% b=%.1f%% c=%.1f%% of %.2fs CPU", what, shared, total,
		shares["chain_a"], shares["chain_b"], shares["chain_c"], 100*cpu["chain_a"]/sum, 100*cpu["chain_b"]/sum, 100*cpu["chain_c"]/sum, sum)
	if total < 150 || sum <= 0 {
		t.Fatalf("%s: only %d samples in the chains (%.2fs of their CPU)", what, total, sum)
	}
	for c := range cpu {
		want := 100 * cpu[c] / sum
		tol := math.Max(3, 100*teststat.Share(want/100, float64(total), checks))
		if d := shares[c] - want; math.Abs(d) > tol {
			t.Errorf("%s, CPU shared %v: %s has %.1f%% of samples, the program measured %.1f%% of its CPU (±%.1f)", what, shared, c, shares[c], want, tol)
		}
	}
	checkNotStopped(t, p.PID())
	_ = p.Cmd.Process.Kill() // a spinning workload left running would load the next run's
}

// TestRecordVariants records the split workload with YJIT on and with M:N
// threads, on the shared builds that have them: every chain is sampled,
// under its Ruby 3.4 label, and no sample is unreadable. (The shares are
// TestRecordKnownSplit's; here what is checked is that the stacks read
// right under the variant.)
func TestRecordVariants(t *testing.T) {
	ran := 0
	for _, rb := range testruby.Rubies(t) {
		if !strings.HasSuffix(rb.Name, "-shared") {
			continue
		}
		for _, va := range testruby.Variants(t, rb)[1:] {
			ran++
			t.Run(rb.Name+"/"+va.Name, func(t *testing.T) {
				p, _ := startSplit(t, rb, va.Env, "60")
				// Windows of 2 s until there are 60 samples in the chains
				// (at most 5): a busy machine may give the program little
				// CPU in one.
				var out, stderr string
				var shares map[string]float64
				var total int
				for try := 0; try < 5 && total < 60; try++ {
					o, e, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--rate", "200", "--duration", "2s", "-f", "collapsed", "-o", "-")
					if code != 0 {
						t.Fatalf("exit %d: %s", code, e)
					}
					out += strings.TrimSuffix(o, "\n") + "\n"
					stderr = e
					shares, total = chainShares(t, out)
				}
				t.Logf("%d samples in chains: a=%.1f%% b=%.1f%% c=%.1f%%; %s", total, shares["chain_a"], shares["chain_b"], shares["chain_c"], strings.TrimSpace(stderr))
				for _, c := range []string{"chain_a", "chain_b", "chain_c"} {
					if shares[c] == 0 || !strings.Contains(out, "Object#"+c+" (") {
						t.Errorf("no samples of Object#%s:\n%s", c, out)
					}
				}
				if strings.Contains(out, "??") {
					t.Errorf("unreadable frames in the profile:\n%s", out)
				}
				checkNotStopped(t, p.PID())
			})
		}
	}
	if ran == 0 {
		testruby.Missing(t, "no shared build with YJIT or M:N threads")
	}
}

// TestRecordFormats writes every format and parses each back.
func TestRecordFormats(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "30")
	dir := t.TempDir()
	for _, format := range output.Names() {
		t.Run(format, func(t *testing.T) {
			path := filepath.Join(dir, "out."+format)
			_, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--duration", "1", "--rate", "200", "-f", format, "-o", path)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !strings.Contains(stderr, "wrote "+path) {
				t.Errorf("stderr %q does not say where the output went", stderr)
			}
			t.Log(strings.TrimSpace(stderr)) // samples, and ticks left out
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkFormat(t, format, b)
		})
	}
}

func checkFormat(t *testing.T, format string, b []byte) {
	t.Helper()
	switch format {
	case "flamegraph":
		dec := xml.NewDecoder(strings.NewReader(string(b)))
		rects := 0
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("SVG is not well-formed XML: %v", err)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
				rects++
			}
		}
		if rects < 5 || !strings.Contains(string(b), "chain_a (") || !strings.Contains(string(b), "<script") {
			t.Errorf("flame graph has %d rects, chain_a: %v", rects, strings.Contains(string(b), "chain_a ("))
		}
	case "speedscope":
		var doc struct {
			Schema string `json:"$schema"`
			Shared struct {
				Frames []struct{ Name, File string } `json:"frames"`
			} `json:"shared"`
			Profiles []struct {
				Type    string    `json:"type"`
				Samples [][]int   `json:"samples"`
				Weights []float64 `json:"weights"`
			} `json:"profiles"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Schema != "https://www.speedscope.app/file-format-schema.json" || len(doc.Profiles) != 1 || doc.Profiles[0].Type != "sampled" {
			t.Fatalf("not a speedscope file: %.200s", b)
		}
		pr := doc.Profiles[0]
		if len(pr.Samples) == 0 || len(pr.Samples) != len(pr.Weights) {
			t.Fatalf("%d samples, %d weights", len(pr.Samples), len(pr.Weights))
		}
		for _, s := range pr.Samples {
			for _, f := range s {
				if f < 0 || f >= len(doc.Shared.Frames) {
					t.Fatalf("sample refers to frame %d of %d", f, len(doc.Shared.Frames))
				}
			}
		}
	case "pprof":
		prof, err := profile.ParseData(b)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, fn := range prof.Function {
			if fn.Name == "Object#chain_b" && strings.HasSuffix(fn.Filename, "split.rb") {
				found = true
			}
		}
		if !found || len(prof.Sample) == 0 {
			t.Errorf("pprof has %d samples, chain_b found: %v", len(prof.Sample), found)
		}
	case "collapsed":
		shares, total := chainShares(t, string(b))
		if total == 0 || shares["chain_a"] == 0 {
			t.Errorf("collapsed output has no chain samples:\n%.300s", b)
		}
	case "summary":
		if !strings.Contains(string(b), "self%") || !strings.Contains(string(b), "burn (") {
			t.Errorf("summary lacks its table:\n%s", b)
		}
	case "summary-by-line":
		if !regexp.MustCompile(`split\.rb:\d+  \(Object#burn\)`).Match(b) {
			t.Errorf("summary by line has no line of burn:\n%s", b)
		}
	case "callgrind":
		ca, err := exec.LookPath("callgrind_annotate")
		if err != nil {
			testruby.Missing(t, "callgrind_annotate not installed (Debian package valgrind)")
		}
		path := filepath.Join(t.TempDir(), "callgrind.out")
		os.WriteFile(path, b, 0o600)
		out, err := exec.Command(ca, "--inclusive=yes", "--auto=no", path).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PROGRAM TOTALS") || !regexp.MustCompile(`split\.rb:Object#chain_a`).Match(out) {
			t.Errorf("callgrind_annotate: %v\n%s", err, out)
		}
	case "raw":
		p, _, err := output.ReadRaw(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if p.Samples == 0 || len(p.Timeline) != p.Samples {
			t.Fatalf("raw: %d samples, %d in the timeline", p.Samples, len(p.Timeline))
		}
		for i, s := range p.Timeline {
			if s.TID <= 0 || s.Thread == "" || s.Time < 0 || s.Time > p.Duration+time.Second || i > 0 && s.Time < p.Timeline[i-1].Time {
				t.Fatalf("raw sample %d: %+v (recording of %v)", i, s, p.Duration)
			}
		}
	case "firefox":
		// internal/output's TestFirefoxStructure checks the tables; here,
		// that a live recording makes a track of the main thread with the
		// workload's methods.
		var doc struct {
			Meta struct {
				Version int `json:"preprocessedProfileVersion"`
			} `json:"meta"`
			Threads []struct {
				Name    string `json:"name"`
				Samples struct {
					Time   []float64 `json:"time"`
					Length int       `json:"length"`
				} `json:"samples"`
				StringArray []string `json:"stringArray"`
			} `json:"threads"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		ok := false
		for _, th := range doc.Threads {
			if th.Name == "main" && th.Samples.Length > 0 && len(th.Samples.Time) == th.Samples.Length && slices.Contains(th.StringArray, "Object#chain_a") {
				ok = true
			}
		}
		if doc.Meta.Version != output.FirefoxProfileVersion || !ok {
			t.Errorf("firefox profile without a main track running chain_a: %.500s", b)
		}
	default:
		t.Errorf("format %s is not checked", format)
	}
}

// TestRecordLaunch runs a command under rbscope: its output and exit status
// pass through, and the profile is written when it exits.
func TestRecordLaunch(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	dir := t.TempDir()
	out := filepath.Join(dir, "p.txt")
	// Three seconds of the program's own CPU time, however long a busy
	// machine makes them last: at record's 100 Hz, 50 samples leave room
	// for a slow start.
	cmd := exec.Command(rbscopeBin, "record", "-f", "collapsed", "-o", out, "--", rb.Bin, testruby.Testdata("split.rb"), filepath.Join(dir, "rep.json"))
	cmd.Env = append(os.Environ(), "EXIT_CODE=7", "CPU_SECONDS=3")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 7 {
		t.Fatalf("exit %v, want the command's 7; stderr %s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "split workload running") {
		t.Errorf("the command's output did not pass through: %q", stdout.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, total := chainShares(t, string(b)); total < 50 {
		t.Errorf("launch mode collected %d chain samples", total)
	}
}

// TestRecordSubprocesses sees a forked child under its own root frame.
func TestRecordSubprocesses(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, rep := startSplit(t, rb, []string{"FORK=1"}, "30")
	defer syscall.Kill(rep.Child, syscall.SIGKILL)
	out, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "--subprocesses", "--duration", "2s", "-f", "collapsed", "-o", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Each root frame names the process and its title (its command line).
	parent, child := "pid "+fmt.Sprint(rep.PID)+" (", "pid "+fmt.Sprint(rep.Child)+" ("
	if !strings.Contains(out, parent) || !strings.Contains(out, child) {
		t.Errorf("want root frames %q and %q in:\n%.500s", parent, child, out)
	}
}

// TestRecordTargetExits: a target that exits mid-recording still gets a
// complete, valid output file.
func TestRecordTargetExits(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	// Three seconds: attaching takes a second or more on a busy machine,
	// and the program must still be there to be attached to.
	p, _ := startSplit(t, rb, nil, "3")
	path := filepath.Join(t.TempDir(), "p.pb.gz")
	_, stderr, code := rbscope(t, "record", "-p", fmt.Sprint(p.PID()), "-f", "pprof", "-o", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkFormat(t, "pprof", b)
}

// TestRecordInterrupted: SIGINT to rbscope ends the recording, writes the
// output and leaves the target running, not stopped.
func TestRecordInterrupted(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "60")
	path := filepath.Join(t.TempDir(), "p.svg")
	cmd := exec.Command(rbscopeBin, "record", "-p", fmt.Sprint(p.PID()), "--rate", "1000", "-o", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupted once the program has had 0.5 s of CPU by its own
	// clocks (at most 30 s): a busy machine may give it little.
	start := splitCPU(t, p, 1)
	for seq, deadline := 2, time.Now().Add(30*time.Second); time.Now().Before(deadline); seq++ {
		time.Sleep(200 * time.Millisecond)
		now, used := splitCPU(t, p, seq), 0.0
		for c, v := range now {
			used += v - start[c]
		}
		if used >= 0.5 {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rbscope after SIGINT: %v: %s", err, stderr.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkFormat(t, "flamegraph", b)
	for i := 0; i < 5 && !t.Failed(); i++ {
		checkNotStopped(t, p.PID())
		time.Sleep(20 * time.Millisecond)
	}
	if matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(matches) > 0 {
		t.Errorf("temporary files left behind: %v", matches)
	}
}

func TestRecordBadInput(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "30")
	pid := fmt.Sprint(p.PID())
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"rate zero", []string{"record", "-p", pid, "--rate", "0"}, 2, "--rate 0 is out of range"},
		{"rate negative", []string{"record", "-p", pid, "--rate", "-5"}, 2, "out of range"},
		{"rate huge", []string{"record", "-p", pid, "--rate", "100000"}, 2, "out of range"},
		{"bad format", []string{"record", "-p", pid, "-f", "png"}, 2, "--format \"png\" is not one of"},
		{"pid and command", []string{"record", "-p", pid, "--", "ruby"}, 2, "either --pid PID or -- COMMAND"},
		{"neither", []string{"record"}, 2, "either --pid PID or -- COMMAND"},
		{"unwritable", []string{"record", "-p", pid, "-o", "/nonexistent/dir/p.svg"}, 1, "cannot write /nonexistent/dir/p.svg"},
		{"command not found", []string{"record", "--", "no-such-command-xyz"}, 1, "command not found"},
		{"not ruby", []string{"record", "--duration", "1s", "--", "sleep", "30"}, 1, "not a Ruby process (it runs sleep)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, stderr, code := rbscope(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("exit %d stderr %q; want exit %d and one line with %q", code, stderr, tc.code, tc.want)
			}
			if tc.name == "unwritable" && time.Since(start) > 2*time.Second {
				t.Errorf("unwritable output was noticed only after %v", time.Since(start))
			}
		})
	}
}

// TestRecordRealtimeSampler: as root, record runs its sampling thread and,
// in the paused mode, the tracer thread that stops the target at real-time
// priority (SCHED_FIFO), and no other; none with --realtime=false. (What
// real time buys is TestRecordKnownSplit's: the shares beside spinners.)
func TestRecordRealtimeSampler(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("real-time scheduling needs root here")
	}
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "60")
	for _, tc := range []struct {
		flag string
		want int
	}{{"--realtime=true", 2}, {"--nonblocking", 1}, {"--realtime=false", 0}} {
		cmd := exec.Command(rbscopeBin, "record", "-p", fmt.Sprint(p.PID()), "--rate", "200", "--duration", "2s", "-f", "collapsed", "-o", "-", tc.flag)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Looked at until rbscope exits: on a busy machine attaching can
		// take most of a second or more before the sampler starts.
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		most := 0
		var err error
	look:
		for {
			most = max(most, fifoThreads(cmd.Process.Pid))
			select {
			case err = <-exited:
				break look
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err != nil {
			t.Fatalf("%s: %v: %s", tc.flag, err, stderr.String())
		}
		if most != tc.want {
			t.Errorf("%s: %d threads of rbscope at SCHED_FIFO at most, want %d", tc.flag, most, tc.want)
		}
	}
}

// fifoThreads counts the threads of pid whose scheduling policy (field 41
// of their stat) is SCHED_FIFO.
func fifoThreads(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if f := strings.Fields(string(b[i+1:])); i > 0 && len(f) > 38 && f[38] == "1" {
			n++
		}
	}
	return n
}

// TestRecordStopsAtExec: a target that runs another program in its place
// (a server's hot restart: exec, the same PID) ends the recording there,
// with either sampler, saying so in one line; the profile holds none of the
// new program's frames. Before, the recording went on to its end reading
// the new program's memory at the old program's addresses.
func TestRecordStopsAtExec(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	for _, sampler := range []string{"user-space", "ebpf"} {
		t.Run(sampler, func(t *testing.T) {
			work := startHotRestart(t, rb)
			args := []string{"record", "-p", strconv.Itoa(work.Process.Pid), "--duration", "120s", "-f", "collapsed", "-o", "-"}
			if sampler == "ebpf" {
				args = append(args, "--ebpf")
			}
			stderr := &lockedBuffer{}
			var stdout strings.Builder // read once record has ended
			rec, done := startRbscope(t, &stdout, stderr, args...)
			// Once rbscope samples (it holds the main thread's stat file,
			// which the user-space sampler opens at its first sample, or
			// the perf events of the BPF sampler), the target execs.
			pid := work.Process.Pid
			sampling := func(link string) bool {
				return link == fmt.Sprintf("/proc/%d/task/%d/stat", pid, pid) || link == "anon_inode:[perf_event]"
			}
			for deadline := time.Now().Add(60 * time.Second); !holdsFile(rec.Process.Pid, sampling); time.Sleep(20 * time.Millisecond) {
				checkRuns(t, "record", done, stderr)
				if time.Now().After(deadline) {
					t.Fatalf("record did not attach within 60 s: %s", stderr.String())
				}
			}
			if err := work.Process.Signal(syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
				if code := rec.ProcessState.ExitCode(); code != 0 {
					t.Fatalf("record: exit %d: %s", code, stderr.String())
				}
			case <-time.After(100 * time.Second):
				t.Fatalf("record did not stop within 100 s of the exec: %s", stderr.String())
			}
			t.Log(strings.TrimSpace(stderr.String()))
			if !strings.Contains(stderr.String(), "ran another program (exec)") {
				t.Errorf("record does not say the target exec'd: %s", stderr.String())
			}
			if strings.Contains(stdout.String(), "work_after") {
				t.Errorf("the profile holds the new program's frames:\n%s", stdout.String())
			}
		})
	}
}

// startHotRestart starts testdata/hot_restart.rb on rb, which execs rb
// again, and waits until it runs; it is killed when the test ends.
func startHotRestart(t *testing.T, rb testruby.Ruby) *exec.Cmd {
	t.Helper()
	work := testruby.DieWithTest(exec.Command(rb.Bin, testruby.Testdata("hot_restart.rb"), rb.Bin))
	out, err := work.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := work.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { work.Process.Kill(); work.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("hot_restart.rb did not start: %v", err)
	}
	return work
}

// holdsFile reports whether process pid has a file descriptor open whose
// link (/proc/PID/fd/N) is one that match accepts.
func holdsFile(pid int, match func(link string) bool) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && match(l) {
			return true
		}
	}
	return false
}
