package main

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/teststat"
	"github.com/rbscope/rbscope/internal/wire"
)

// skipIfEBPFRefused skips the test when stderr, what an rbscope command
// that ended said, is the BPF sampler's refusal (not root, no CAP_BPF, a
// kernel without BPF, a container's PID namespace): what the user sees
// then is TestRecordEBPFNotAllowed's. what names the command.
func skipIfEBPFRefused(t *testing.T, what, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "not allowed here") || strings.Contains(stderr, "cannot run here") {
		t.Skipf("%s cannot run here (root with CAP_BPF and CAP_PERFMON in the host's PID namespace needed): %s", what, strings.TrimSpace(stderr))
	}
}

// ebpfOrSkip runs record --ebpf with args and returns its output, skipping
// the test where the kernel or rbscope's place refuses the BPF sampler
// (not root, no CAP_BPF, a kernel without BPF, a container's PID
// namespace): what the user sees then is TestRecordEBPFNotAllowed's.
func ebpfOrSkip(t *testing.T, args ...string) (string, string) {
	t.Helper()
	args = append([]string{"record", "--ebpf"}, args...)
	out, stderr, code := rbscope(t, args...)
	if code == 1 {
		skipIfEBPFRefused(t, "record --ebpf", stderr)
	}
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	return out, stderr
}

// TestRecordEBPFKnownSplit is TestRecordKnownSplit with the BPF sampler
// (record --ebpf): each chain's share of the samples against the share
// of CPU time the program measured each chain get with its own thread
// CPU clock over the same window, within the same tolerance (3 points, or
// the sampled share's error, teststat.Share, where the samples are too
// few for 3 points to be told from chance). It runs beside two CPU spinners,
// with the workload free to move between CPUs and sharing one CPU with a
// further spinning process, so that it waits for the CPU about half the
// time: the BPF program runs on the CPU's clock only while the thread is
// on the CPU, so a wait must not show. Windows of 3 seconds at 1000 Hz
// until there are 1,500 samples in the chains (up to 4).
func TestRecordEBPFKnownSplit(t *testing.T) {
	rubies := testruby.Rubies(t)
	checks := len(rubies) * 2 * splitChains
	for _, rb := range rubies {
		t.Run(rb.Name, func(t *testing.T) {
			testruby.Spinners(t, 2)
			for _, shared := range []bool{false, true} {
				checkKnownSplit(t, rb, shared, "--ebpf", checks, func(pid int) string {
					out, _ := ebpfOrSkip(t, "-p", fmt.Sprint(pid), "--rate", "1000", "--duration", "3s", "-f", "collapsed", "-o", "-")
					return out
				})
			}
		})
	}
}

// TestRecordEBPFFormats writes every format from the BPF sampler, with
// --threads, and parses each back: the same writers as record's. The
// stacks stand under their thread's root frame, and the raw recording
// keeps its timeline.
func TestRecordEBPFFormats(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p, _ := startSplit(t, rb, nil, "30")
	dir := t.TempDir()
	for _, format := range output.Names() {
		t.Run(format, func(t *testing.T) {
			path := filepath.Join(dir, "out."+format)
			_, stderr := ebpfOrSkip(t, "-p", fmt.Sprint(p.PID()), "--threads", "--duration", "1", "--rate", "200", "-f", format, "-o", path)
			if !strings.Contains(stderr, "wrote "+path) {
				t.Errorf("stderr %q does not say where the output went", stderr)
			}
			t.Log(strings.TrimSpace(stderr))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checkFormat(t, format, b)
			if format == "collapsed" && !strings.HasPrefix(string(b), "thread main;") {
				t.Errorf("collapsed stacks not under the thread's root frame:\n%.500s", b)
			}
		})
	}
	// The raw recording renders again, and its samples are on the
	// timeline, each at the time the kernel took it (not at the drain's,
	// ten a second), within the recording, of the target's main thread.
	raw := filepath.Join(dir, "out.raw")
	out, stderr, code := rbscope(t, "report", "-i", raw, "-f", "summary", "-o", "-")
	if code != 0 {
		t.Fatalf("report of the raw recording: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "Object#chain_a") {
		t.Errorf("report of the raw recording lacks the chains:\n%s", out)
	}
	f, err := os.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(zr)
	var h wire.RawHeader
	if err := dec.Decode(&h); err != nil {
		t.Fatal(err)
	}
	times := map[int64]bool{}
	samples, outside := 0, 0
	for {
		var line []any
		if err := dec.Decode(&line); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch line[0] {
		case wire.RawThread:
			if int(line[1].(float64)) != p.PID() || line[3] != "main" {
				t.Errorf("thread %v, want pid %d's main", line, p.PID())
			}
		case wire.RawSample:
			ns := int64(line[1].(float64))
			samples++
			times[ns] = true
			if ns < 0 || ns > h.DurationNs {
				outside++
			}
		}
	}
	t.Logf("raw: %d samples on the timeline at %d distinct times in %v", samples, len(times), time.Duration(h.DurationNs))
	if !h.Timeline || samples != h.Samples || samples == 0 {
		t.Errorf("raw: %d samples on the timeline of %d (timeline %v)", samples, h.Samples, h.Timeline)
	}
	if outside > 0 || len(times) < samples/2 {
		t.Errorf("raw: %d samples outside the recording's %v, %d distinct times for %d samples", outside, time.Duration(h.DurationNs), len(times), samples)
	}
}

// TestRecordEBPFRefused: an option the BPF sampler cannot honour is
// refused with one line naming it and what to do, exit status 2, before
// anything is attached to.
func TestRecordEBPFRefused(t *testing.T) {
	pid := fmt.Sprint(os.Getpid())
	for _, tc := range []struct {
		flag, want string
	}{
		{"--gvl", "--gvl cannot be used with --ebpf"},
		{"--native", "--native cannot be used with --ebpf"},
		{"--subprocesses", "--subprocesses cannot be used with --ebpf"},
		{"--nonblocking", "--nonblocking has no meaning with --ebpf"},
		{"--realtime", "--realtime has no meaning with --ebpf"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			_, stderr, code := rbscope(t, "record", "--ebpf", "-p", pid, tc.flag, "-o", "-")
			if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "drop "+tc.flag) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("exit %d stderr %q; want exit 2 and one line with %q and what to drop", code, stderr, tc.want)
			}
		})
	}
	// What it can honour, or has nothing to do with, is accepted.
	if _, stderr, code := rbscope(t, "record", "--ebpf", "--realtime=false", "-p", "0"); code != 2 || strings.Contains(stderr, "--ebpf") {
		t.Errorf("--realtime=false with --ebpf: exit %d stderr %q; want only the missing target refused", code, stderr)
	}
}

// TestRecordEBPFNotAllowed: where the kernel refuses the BPF sampler
// (here: rbscope run as nobody, without CAP_BPF), record --ebpf says so in
// one line, with what to do, and exits 1; the command it launched is
// stopped.
func TestRecordEBPFNotAllowed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run as root to run rbscope as another user")
	}
	rb := testruby.Rubies(t)[0]
	if err := os.Chmod(filepath.Dir(rbscopeBin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rbscopeBin, "record", "--ebpf", "-o", "-", "--", rb.Bin, "-e", "sleep 30")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	_, stderr, code := runCommand(t, cmd)
	if strings.Contains(stderr, "permission denied") {
		t.Skipf("rbscope as nobody cannot read its own child here: %s", stderr)
	}
	if code != 1 || !strings.Contains(stderr, "not allowed here") || !strings.Contains(stderr, "CAP_BPF") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("exit %d stderr %q; want exit 1 and one line saying BPF is not allowed and what to do", code, stderr)
	}
}

// TestRecordEBPFForkedChild records a forked child (split.rb's with
// FORK=1, as a server's worker is): on some Rubies (3.1 here) its main
// thread keeps its parent's TID in Ruby's books, and the BPF program,
// which finds a thread by the kernel's TID, must know it by the child's
// PID, or the child's samples are all lost (0 samples on 3.1 before).
func TestRecordEBPFForkedChild(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	_, rep := startSplit(t, rb, []string{"FORK=1"}, "30")
	defer syscall.Kill(rep.Child, syscall.SIGKILL)
	out, _ := ebpfOrSkip(t, "-p", fmt.Sprint(rep.Child), "--threads", "--rate", "200", "--duration", "2s", "-f", "collapsed", "-o", "-")
	shares, total := chainShares(t, out)
	t.Logf("%d samples in chains: a=%.1f%% b=%.1f%% c=%.1f%%", total, shares["chain_a"], shares["chain_b"], shares["chain_c"])
	if total == 0 || !strings.HasPrefix(out, "thread main;") {
		t.Errorf("no sample of the child's main thread:\n%.500s", out)
	}
}

// TestRecordEBPFIdle: record --ebpf --idle and top --ebpf --idle count
// the time a thread spends off a CPU. testdata/sleep_half.rb computes
// about half its wall time and sleeps the other half, by its own clock;
// a recording of 3 seconds and more at 100 Hz has at least 300 samples of
// its one thread, nap's share of them the share of its wall time the
// program slept over the recording (within the sampled share's error,
// teststat.Share, at least 5 points), and top's table, fed by the same sampler, shows nap.
func TestRecordEBPFIdle(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	prog, read := startSleepHalf(t, rb, "ebpfidle")
	// The program's account is read once record samples (it holds its
	// perf events) and again before it stops, so that both cover the same
	// window: record's start, seconds on a busy machine, saw the program
	// starved otherwise than during the recording (nap 19% of the
	// samples where the program slept 33% of a longer window).
	rec := testruby.DieWithTest(exec.Command(rbscopeBin, "record", "--ebpf", "--idle", "-p", fmt.Sprint(prog.Process.Pid), "--rate", "100", "--duration", "60s", "-f", "collapsed", "-o", "-"))
	recOut, recErr := &lockedBuffer{}, &lockedBuffer{}
	rec.Stdout, rec.Stderr = recOut, recErr
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- rec.Wait() }()
	sampling := func(link string) bool { return link == "anon_inode:[perf_event]" }
	for deadline := time.Now().Add(60 * time.Second); !holdsFile(rec.Process.Pid, sampling); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			skipIfEBPFRefused(t, "record --ebpf", recErr.String())
			t.Fatalf("record --ebpf exited before sampling: %s", recErr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("record --ebpf did not start sampling within 60 s")
		}
	}
	sampled := time.Now()
	before := read()
	time.Sleep(3 * time.Second)
	after := read()
	rec.Process.Signal(syscall.SIGINT)
	elapsed := time.Since(sampled).Seconds()
	if err := <-exited; err != nil {
		t.Fatalf("record --ebpf: %v: %s", err, recErr.String())
	}
	out := recOut.String()
	var total, nap, compute int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		i := strings.LastIndexByte(line, ' ')
		var n int
		if _, err := fmt.Sscan(line[i+1:], &n); err != nil {
			t.Fatalf("collapsed line %q: %v", line, err)
		}
		total += n
		switch {
		case strings.Contains(line, "Object#nap"):
			nap += n
		case strings.Contains(line, "Object#compute"):
			compute += n
		}
	}
	wantNap := 100 * (after.Nap - before.Nap) / (after.Nap - before.Nap + after.Compute - before.Compute)
	n := float64(nap + compute)
	gotNap := 100 * float64(nap) / n
	tol := max(5, 100*teststat.Share(wantNap/100, n, 1))
	t.Logf("%d samples in %.2f s at 100 Hz; nap %.1f%% of %d in nap or compute, the program slept %.1f%% of its wall time", total, elapsed, gotNap, nap+compute, wantNap)
	if want := 100 * elapsed; math.Abs(float64(total)-want) > 0.2*want {
		t.Errorf("%d samples of one thread for %.2f s at 100 Hz: the wall profile's unit is the period", total, elapsed)
	}
	if math.Abs(gotNap-wantNap) > tol {
		t.Errorf("nap has %.1f%% of the samples, the program slept %.1f%% of its wall time (±%.1f)", gotNap, wantNap, tol)
	}
	// top --ebpf --idle, its plain table (the output is not a terminal),
	// until it shows both (loading the BPF programs takes seconds on a
	// busy machine: a fixed wait saw no table at all there).
	cmd := testruby.DieWithTest(exec.Command(rbscopeBin, "top", "--ebpf", "--idle", "-p", fmt.Sprint(prog.Process.Pid)))
	topOut, topErr := &lockedBuffer{}, &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = topOut, topErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	shows := func() bool {
		return strings.Contains(topOut.String(), "Object#nap") && strings.Contains(topOut.String(), "Object#compute")
	}
	for deadline := time.Now().Add(60 * time.Second); !shows() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if !shows() {
		t.Errorf("top --ebpf --idle shows no nap and compute:\n%s\nstderr: %s", topOut.String(), topErr.String())
	}
}
