package ebpfsample

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/teststat"
)

// hookOrSkip loads the switch hook, skipping the test where BPF is not
// allowed or the kernel has no BTF.
func hookOrSkip(t *testing.T) *switchHook {
	t.Helper()
	return hookOrSkipFor(t, func(k kernelOffsets) kernelOffsets { return k })
}

// hookOrSkipFor is hookOrSkip with the kernel's offsets changed by kern
// (as on another kernel).
func hookOrSkipFor(t *testing.T, kern func(kernelOffsets) kernelOffsets) *switchHook {
	t.Helper()
	k, err := readKernelOffsets()
	var h *switchHook
	if err == nil {
		h, err = newSwitchHookFor(kern(k))
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS) || errors.Is(err, ErrNoBTF) {
		t.Skipf("no BPF program on sched_switch here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	return h
}

// wallShares is what testdata/wall_shares.rb measured of itself over its
// window (Start to End on CLOCK_MONOTONIC, in seconds): each method's wall
// and CPU seconds, its longest call and the most CPU time of a call.
type wallShares struct {
	Start   float64            `json:"start"`
	End     float64            `json:"end"`
	Seconds float64            `json:"seconds"`
	Wall    map[string]float64 `json:"wall"`
	CPU     map[string]float64 `json:"cpu"`
	Longest map[string]float64 `json:"longest"`
	CPUCall map[string]float64 `json:"cpu_call"`
}

// methodCounts sums the samples of p whose stack holds each method of
// wallShares (a frame whose label ends in its name).
func methodCounts(p *profile.Profile) map[string]int {
	out := map[string]int{}
	for _, st := range p.Stacks {
		seen := map[string]bool{}
		for _, id := range st.Frames {
			for _, m := range []string{"sleeper_a", "waiter_b", "burn_c", "rest_d"} {
				if l := p.Frames[id].Label; !seen[m] && (l == m || strings.HasSuffix(l, "#"+m)) {
					seen[m] = true
					out[m] += st.Count
				}
			}
		}
	}
	return out
}

// monoNow is CLOCK_MONOTONIC now, in seconds: the clock of the program's
// window.
func monoNow(t *testing.T) float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return float64(ts.Nano()) / 1e9
}

// wallSharesReport is what testdata/wall_shares.rb reports first.
type wallSharesReport struct {
	PID int `json:"pid"`
}

// startWallShares starts testdata/wall_shares.rb (measuring 3 s once
// told to) on rb and opens the BPF sampler on it with hook's switch
// samples at rate, not started, and empty profiles for it.
func startWallShares(t *testing.T, rb testruby.Ruby, hook *switchHook, rate int) (*testruby.Process, wallSharesReport, *Sampler, profiles) {
	t.Helper()
	p := testruby.Start(t, rb, "wall_shares.rb", nil, "3")
	var rep wallSharesReport
	p.WaitReport(t, &rep, 30*time.Second)
	vm := attachVM(t, rep.PID)
	s := openOrSkip(t, rep.PID, vm, Options{Frequency: rate, switches: hook})
	r := float64(rate)
	return p, rep, s, profiles{cpu: profile.NewProfile(r), wall: profile.NewProfile(r), clock: newWallClock(r)}
}

// TestWallShares records testdata/wall_shares.rb with the BPF sampler's
// CPU and wall-clock profiles and checks each method's samples against
// the time the program measured in it over the same window: in the wall
// profile its wall time (asleep in sleeper_a and rest_d, blocked on a
// pipe in waiter_b, on a CPU or waiting for one in burn_c), in the CPU
// profile its CPU time, each times the rate, within four standard
// deviations of the clock's sampling of the time on a CPU (the time off a
// CPU is measured, not sampled) and the gaps between the program's
// window (which it measures exactly, the calls running at its edges
// counted in part) and the profiles' (the clock times of their first
// and last settling, read by both on CLOCK_MONOTONIC). Every stack
// of the CPU profile is in the wall profile at least as often: its clock
// samples are the same. It does not assume an idle machine: burn_c's wall
// time holds the time it waited for a CPU, as the program's clock does.
func TestWallShares(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			checkWallShares(t, rb, hookOrSkip(t), wallChecks*len(testruby.Rubies(t)))
		})
	}
}

// wallChecks is how many counts checkWallShares checks: four methods' in
// the wall and the CPU profiles.
const wallChecks = 8

// checkWallShares is TestWallShares on one Ruby, with the switch program
// of hook; the test makes checks statistical checks in all, this Ruby's
// wallChecks among them (teststat.Z).
func checkWallShares(t *testing.T, rb testruby.Ruby, hook *switchHook, checks int) {
	const rate = 200
	p, rep, s, ps := startWallShares(t, rb, hook, rate)
	newProfile := func() *profile.Profile { return profile.NewProfile(rate) }
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	// Samples before the window: the threads' stacks at their
	// last switch, then a clean start.
	time.Sleep(200 * time.Millisecond)
	if _, err := drainInto(s, ps, rep.PID); err != nil {
		t.Fatal(err)
	}
	if err := ps.clock.settle(s, ps.wall, rep.PID); err != nil {
		t.Fatal(err)
	}
	ps.cpu, ps.wall = newProfile(), newProfile()
	// The profiles hold what happened from here (the samples
	// drained, every thread's time off a CPU settled) on.
	profFrom := monoNow(t)
	host := teststat.Watch(t)
	if err := os.WriteFile(p.Report+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var got wallShares
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := drainInto(s, ps, rep.PID); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p.Report + ".done")
		if err == nil {
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no measurement from the program; output:\n%s", p.Output())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := drainInto(s, ps, rep.PID); err != nil {
		t.Fatal(err)
	}
	if err := ps.clock.settle(s, ps.wall, rep.PID); err != nil {
		t.Fatal(err)
	}
	profTo := monoNow(t) // to here
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	c, _ := s.Counters()
	sc, _ := s.SwitchCounters()
	t.Logf("program: %+v", got)
	t.Logf("clock: %+v; switches: %+v", c, sc)
	// For a failure's reading: a VM's steal moves the clock's samples (a
	// CPU's clock fires late, on the thread current when the vCPU
	// resumes).
	host.Log()
	// The profiles cover the program's window and the gaps
	// before it (the program seeing the go file) and after it
	// (the test seeing its report): at most one thread a
	// method, so at most the gaps' time in samples each.
	gaps := (got.Start - profFrom) + (profTo - got.End)
	if gaps < 0 {
		t.Fatalf("the program's window %.3f to %.3f is not within the profiles' %.3f to %.3f", got.Start, got.End, profFrom, profTo)
	}
	wall, cpu := methodCounts(ps.wall), methodCounts(ps.cpu)
	check := func(kind, m string, n int, want, onCPU, edge float64) {
		// The clock's samples on a CPU are a sample (a Poisson
		// count: teststat.Count); the time off a CPU is measured
		// (to a whole sample, and the kernel's count of a running
		// thread's CPU time lags by a scheduler tick at the end:
		// 2 samples). The gaps between the windows hold up to
		// their time in samples; for the CPU time, the program's
		// sums at the window's edges are off by a call's CPU time
		// at most.
		tol := teststat.Count(onCPU, checks) + (gaps+2*edge+0.01)*rate + 2
		t.Logf("%s %-9s %5d samples, want %7.1f ± %.1f", kind, m, n, want, tol)
		if math.Abs(float64(n)-want) > tol {
			t.Errorf("%s profile: %s has %d samples, the program measured %.3f s there (%.1f samples at %d Hz; tolerance %.1f)", kind, m, n, want/rate, want, rate, tol)
		}
	}
	for _, m := range []string{"sleeper_a", "waiter_b", "burn_c", "rest_d"} {
		if got.Wall[m] < 0.1 {
			t.Fatalf("the program spent %.3f s in %s: too little to test", got.Wall[m], m)
		}
		onCPU := got.CPU[m] * rate
		check("wall", m, wall[m], got.Wall[m]*rate, onCPU, 0)
		check("cpu", m, cpu[m], onCPU, onCPU, got.CPUCall[m])
	}
	// The clock's samples are in both profiles.
	for si, st := range ps.cpu.Stacks {
		frames := ps.cpu.StackFrames(si)
		w := ps.wall.Add(frames, 0)
		if n := ps.wall.Stacks[w].Count; n < st.Count {
			t.Errorf("a stack of %d CPU samples has %d wall samples: %v", st.Count, n, frames)
		}
	}
	if sc.Same == 0 {
		t.Errorf("no switch sample found the thread's stack unchanged: every switch walked it again (%+v)", sc)
	}
	// Most spans' time off a CPU leaves out the run's wall time (from
	// the kernel's run start, or the dispatcher's arrivals), not its CPU
	// time only: else a VM's steal during burn_c's runs goes to rest_d,
	// where burn_c's thread last switched. (99% of them here; the rest
	// are threads' first spans and spans whose switch was not seen.)
	if sc.RunWall*4 < 3*(sc.Runs-sc.NoThread) {
		t.Errorf("%d of %d switches of the Ruby threads read their run's wall time (%+v; from the kernel's run start: %v)", sc.RunWall, sc.Runs-sc.NoThread, sc, hook.kern.runKnown())
	}
}

// TestWallWithoutRunStart is TestWallShares, on one Ruby, with the switch
// program of a kernel that keeps no run's start (kernelOffsets without
// it): the dispatcher notes when each thread comes to a CPU, and the time
// off a CPU leaves out the run's wall time from that, not its CPU time
// only (which would count a VM's steal off a CPU: seen as 1.5 times the
// sleep of rest_d on a host stolen from).
func TestWallWithoutRunStart(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	hook := hookOrSkipFor(t, kernelOffsets.withoutRunStart)
	if hook.kern.runKnown() || !hook.kern.arrivals() {
		t.Fatalf("the hook of a kernel without the run's start: %+v", hook.kern)
	}
	checkWallShares(t, rb, hook, wallChecks)
}
