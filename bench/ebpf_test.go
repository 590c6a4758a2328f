package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/ebpfsample"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestEBPFFloor measures the BPF sampler prototype (internal/ebpfsample)
// beside the user-space sampler (internal/sampler, nonblocking, the
// agent's mode) on the same process, in phases that take turns (user
// space, BPF, user space, BPF, ...) so that both see the same machine:
// samples taken, CPU cost per sample, and how well their stacks agree.
// Workloads: testdata/bench_deep.rb spinning 50 frames deep, and
// testdata/split.rb, whose chains' CPU split the program measures itself.
// It runs only when asked (bench/ebpf.sh sets RBSCOPE_BENCH_EBPF=1):
//
//	RBSCOPE_BENCH_EBPF=1 RBSCOPE_RUBY_FILTER='ruby-3.4-shared$' go test ./bench -run TestEBPFFloor -v
//
// Environment: EBPF_ROUNDS (3) pairs of phases, EBPF_PHASE (3s) a phase,
// EBPF_RATE (100) samples a second of each sampler.
func TestEBPFFloor(t *testing.T) {
	if os.Getenv("RBSCOPE_BENCH_EBPF") == "" {
		t.Skip("set RBSCOPE_BENCH_EBPF=1 to run (bench/ebpf.sh)")
	}
	cfg := floorConfig{rounds: 3, phase: 3 * time.Second, rate: 100}
	if v := os.Getenv("EBPF_ROUNDS"); v != "" {
		fmt.Sscan(v, &cfg.rounds)
	}
	if v := os.Getenv("EBPF_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		cfg.phase = d
	}
	if v := os.Getenv("EBPF_RATE"); v != "" {
		fmt.Sscan(v, &cfg.rate)
	}
	stats, err := ebpfsample.EnableStats()
	if err != nil {
		t.Skipf("BPF run-time stats not allowed here (root needed): %v", err)
	}
	defer stats.Close()
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			t.Run("bench_deep", func(t *testing.T) {
				p := testruby.Start(t, rb, "bench_deep.rb", nil, "50", "spin")
				var rep struct {
					PID     int    `json:"pid"`
					Version string `json:"version"`
				}
				p.WaitReport(t, &rep, 30*time.Second)
				r := runFloor(t, cfg, rep.PID, nil)
				r.print(fmt.Sprintf("%s (Ruby %s), bench_deep.rb 50 frames spinning", rb.Name, rep.Version))
				r.printAgreement()
			})
			t.Run("churn", func(t *testing.T) {
				p := testruby.Start(t, rb, "churn_stacks.rb", nil, "3600")
				var rep struct {
					PID int `json:"pid"`
				}
				p.WaitReport(t, &rep, 30*time.Second)
				r := runFloor(t, cfg, rep.PID, nil)
				r.print(fmt.Sprintf("%s, churn_stacks.rb", rb.Name))
				r.printAgreement()
				r.printTorn()
			})
			t.Run("split", func(t *testing.T) {
				p := testruby.Start(t, rb, "split.rb", nil, "3600")
				var rep struct {
					PID int `json:"pid"`
				}
				p.WaitReport(t, &rep, 30*time.Second)
				sp := &splitProbe{pid: rep.PID, path: p.Report + ".cpu"}
				r := runFloor(t, cfg, rep.PID, sp)
				r.print(fmt.Sprintf("%s, split.rb", rb.Name))
				r.printAgreement()
				r.printSplit()
			})
		})
	}
}

type floorConfig struct {
	rounds int
	phase  time.Duration
	rate   int
}

// side is what one sampler did over its phases.
type side struct {
	samples int
	ticks   int           // user space: the sampler's ticks (a tick finding the thread off CPU takes no sample)
	cpu     time.Duration // this process's CPU time (user + system) in the phases
	thread  time.Duration // the sampling thread's CPU time in the phases
	drain   time.Duration // the thread's CPU time draining and symbolizing (BPF only)
	// aggregate is the thread's CPU time adding the samples to a profile
	// (BPF only; the user-space sampler's is part of its loop)
	aggregate time.Duration
	refresh   time.Duration // the thread's CPU time listing threads (BPF only)
	stacks    map[string]int
	leaves    map[string]int
	chains    map[string]int           // split.rb: samples under each chain
	truth     map[string]time.Duration // split.rb: the chains' CPU time as the program measured it
	// churn_stacks.rb: samples in leaf_a or leaf_b, and those whose
	// callers are not the leaf's (a stack read as it changed)
	leaves2, torn int
	gcOrGVL       int // samples with a GC or GVL leaf
}

func newSide() *side {
	return &side{stacks: map[string]int{}, leaves: map[string]int{}, chains: map[string]int{}, truth: map[string]time.Duration{}}
}

// floorResult holds both samplers' figures of one workload.
type floorResult struct {
	user, bpf   side
	kernelRuns  uint64
	kernelTime  time.Duration
	filteredRun time.Duration // a run on another process's thread
	counters    ebpfsample.Counters
	threads     int
	phases      int
	phase       time.Duration
}

// runFloor runs cfg.rounds pairs of phases on pid, a phase of the
// user-space sampler then one of the BPF sampler.
func runFloor(t *testing.T, cfg floorConfig, pid int, sp *splitProbe) *floorResult {
	// The user-space sampler's loop and the BPF sampler's drain run on
	// this goroutine, locked to its thread, whose CPU time is then theirs.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	live, err := target.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	vm, err := rubyvm.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	bs, err := ebpfsample.New(pid, vm, ebpfsample.Options{Frequency: cfg.rate})
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		t.Skipf("BPF programs or perf events not allowed here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	res := &floorResult{user: *newSide(), bpf: *newSide(), phases: cfg.rounds, phase: cfg.phase}
	// The program runs at every perf event of every CPU and returns at
	// once for another process: what such a run costs, measured with the
	// target stopped, is taken off the runs that sampled it.
	res.filteredRun = filteredRunCost(t, bs, pid)
	st0, err := bs.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// The BPF samples go to a profile as the user-space sampler's do.
	bpfProf := profile.NewProfile(float64(cfg.rate))
	for round := 0; round < cfg.rounds; round++ {
		// User space: a sampler of its own each phase, attached before
		// the phase starts (attaching is not a sample's cost).
		us, err := sampler.New(pid, sampler.Options{Rate: float64(cfg.rate), Duration: cfg.phase, Nonblocking: true})
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		sp.start(t)
		c0, th0 := cpuTime(), threadCPU()
		prof := us.Run(context.Background())
		res.user.cpu += cpuTime() - c0
		res.user.thread += threadCPU() - th0
		sp.end(t, &res.user)
		res.user.addProfile(prof)
		res.user.ticks += prof.Ticks

		// BPF: its perf events on for the phase, the ring buffer drained
		// ten times a second and the clocks' periods drawn again every
		// ten samples (Sampler.Clocked, as record --ebpf does), the thread list
		// refreshed once.
		runtime.GC()
		sp.start(t)
		c0, th0 = cpuTime(), threadCPU()
		if err := bs.Start(); err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(cfg.phase)
		lastRefresh := time.Now()
		for time.Now().Before(end) {
			time.Sleep(100 * time.Millisecond)
			if time.Since(lastRefresh) >= time.Second {
				r0 := threadCPU()
				n, err := bs.RefreshThreads()
				if err != nil {
					t.Fatal(err)
				}
				res.bpf.refresh += threadCPU() - r0
				res.threads = n
				lastRefresh = time.Now()
			}
			n := res.bpf.drainInto(t, bs, bpfProf)
			if err := bs.Clocked(n); err != nil {
				t.Fatal(err)
			}
		}
		if err := bs.Stop(); err != nil {
			t.Fatal(err)
		}
		res.bpf.drainInto(t, bs, bpfProf)
		res.bpf.cpu += cpuTime() - c0
		res.bpf.thread += threadCPU() - th0
		sp.end(t, &res.bpf)
	}
	res.bpf.addProfile(bpfProf)
	st1, err := bs.Stats()
	if err != nil {
		t.Fatal(err)
	}
	res.kernelRuns = st1.RunCount - st0.RunCount
	res.kernelTime = st1.Runtime - st0.Runtime
	if res.counters, err = bs.Counters(); err != nil {
		t.Fatal(err)
	}
	return res
}

// filteredRunCost runs the BPF sampler for a second with the target
// stopped and returns the mean cost of a run (all on other processes).
func filteredRunCost(t *testing.T, bs *ebpfsample.Sampler, pid int) time.Duration {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	time.Sleep(50 * time.Millisecond)
	c0, err := bs.Counters()
	if err != nil {
		t.Fatal(err)
	}
	st0, err := bs.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := bs.Stop(); err != nil {
		t.Fatal(err)
	}
	st1, err := bs.Stats()
	if err != nil {
		t.Fatal(err)
	}
	c1, err := bs.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c1.Runs != c0.Runs {
		t.Fatalf("the program sampled the stopped target %d times", c1.Runs-c0.Runs)
	}
	runs := st1.RunCount - st0.RunCount
	if runs == 0 {
		t.Fatal("no run of the program in a second")
	}
	return (st1.Runtime - st0.Runtime) / time.Duration(runs)
}

// threadCPU is the calling thread's CPU time so far.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// drainInto drains the BPF sampler's ring buffer and adds the samples to
// prof as record --ebpf does (ebpfsample.ProfileFrames); the two steps'
// CPU time are kept apart. It returns the samples drained.
func (s *side) drainInto(t *testing.T, bs *ebpfsample.Sampler, prof *profile.Profile) int {
	t0 := threadCPU()
	var stacks [][]profile.Frame
	var tids []int
	n, err := bs.Drain(func(smp *ebpfsample.Sample) {
		if len(smp.Frames) == 0 {
			return
		}
		stacks = append(stacks, ebpfsample.ProfileFrames(smp, ""))
		tids = append(tids, smp.TID)
	})
	t1 := threadCPU()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, frames := range stacks {
		prof.AddSample(frames, now, 0, tids[i], "")
	}
	s.drain += t1 - t0
	s.aggregate += threadCPU() - t1
	return n
}

// addProfile counts a profile's stacks by their Ruby frames: the leaves
// for the GC's phase or a wait for the GVL are left out of the stacks
// compared and counted apart (the BPF prototype reads the GC's phase, not
// the GVL).
func (s *side) addProfile(p *profile.Profile) {
	s.samples += p.Samples
	for _, st := range p.Stacks {
		key := make([]string, 0, len(st.Frames))
		vm := false
		for _, id := range st.Frames {
			f := p.Frames[id]
			if f.Kind == profile.KindGC || f.Kind == profile.KindGVL {
				vm = true
				continue
			}
			key = append(key, frameName(f.Label, f.Line))
		}
		if vm {
			s.gcOrGVL += st.Count
		}
		for i := 0; i < st.Count; i++ {
			s.add(key)
		}
	}
}

func frameName(label string, line int) string { return fmt.Sprintf("%s:%d", label, line) }

// add counts one stack, root first.
func (s *side) add(key []string) {
	s.stacks[strings.Join(key, ";")]++
	if len(key) > 0 {
		s.leaves[key[len(key)-1]]++
	}
	s.checkChurn(key)
	for _, c := range []string{"chain_a", "chain_b", "chain_c"} {
		for _, f := range key {
			if strings.Contains(f, "#"+c+":") {
				s.chains[c]++
				break
			}
		}
	}
}

// checkChurn counts a stack of churn_stacks.rb (root first, "label:line")
// whose leaf is leaf_a or leaf_b, and whether its callers are the leaf's:
// mid_a for leaf_a; the block in mid_b, Array#map and mid_b for leaf_b.
func (s *side) checkChurn(key []string) {
	label := func(i int) string {
		if i < 0 || i >= len(key) {
			return ""
		}
		l, _, _ := strings.Cut(key[i], ":")
		return l
	}
	for i := range key {
		switch l := label(i); {
		case strings.HasSuffix(l, "#leaf_a"):
			s.leaves2++
			if !strings.HasSuffix(label(i-1), "#mid_a") {
				s.torn++
			}
		case strings.HasSuffix(l, "#leaf_b"):
			s.leaves2++
			if p := label(i - 1); !strings.HasPrefix(p, "block in ") || !strings.HasSuffix(p, "#mid_b") ||
				label(i-2) != "Array#map" || !strings.HasSuffix(label(i-3), "#mid_b") {
				s.torn++
			}
		}
	}
}

func (r *floorResult) printTorn() {
	fmt.Fprintf(os.Stdout, "churn_stacks.rb, samples in leaf_a or leaf_b under the wrong callers (torn): user %d of %d, BPF %d of %d\n",
		r.user.torn, r.user.leaves2, r.bpf.torn, r.bpf.leaves2)
}

// overlap is the agreement of two distributions: the sum over keys of the
// smaller of the two shares (1 when they are the same).
func overlap(a, b map[string]int) float64 {
	na, nb := 0, 0
	for _, v := range a {
		na += v
	}
	for _, v := range b {
		nb += v
	}
	if na == 0 || nb == 0 {
		return 0
	}
	sum := 0.0
	for k, v := range a {
		sum += math.Min(float64(v)/float64(na), float64(b[k])/float64(nb))
	}
	return sum
}

func pct(n, total int) float64 { return 100 * float64(n) / math.Max(1, float64(total)) }

func perSample(d time.Duration, n int) string {
	if n == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f µs", float64(d.Nanoseconds())/1e3/float64(n))
}

func (r *floorResult) print(title string) {
	w := os.Stdout
	fmt.Fprintf(w, "\n== %s: %d phases of %v each per sampler, taking turns\n", title, r.phases, r.phase)
	fmt.Fprintf(w, "user-space sampler (nonblocking): %d samples in %d ticks (%s of its thread's CPU a tick); its thread's CPU %v (%s a sample); process CPU %v (%s a sample)\n",
		r.user.samples, r.user.ticks, perSample(r.user.thread, r.user.ticks), r.user.thread.Round(time.Microsecond), perSample(r.user.thread, r.user.samples),
		r.user.cpu.Round(time.Microsecond), perSample(r.user.cpu, r.user.samples))
	c := r.counters
	fmt.Fprintf(w, "BPF sampler: %d samples drained (program: %d runs on the target, %d sent, %d not a listed thread, %d ec faults, %d bad bounds, %d frame read faults, %d ring full, %d truncated; %d Ruby threads listed)\n",
		r.bpf.samples, c.Runs, c.Emitted, c.NoThread, c.ECFault, c.BadBounds, c.FramesRead, c.RingFull, c.Truncated, r.threads)
	fmt.Fprintf(w, "  kernel: %d runs on all CPUs (every process), %v in all: %s a run, %s a sample sent (all runs' time)\n",
		r.kernelRuns, r.kernelTime, perSample(r.kernelTime, int(r.kernelRuns)), perSample(r.kernelTime, r.bpf.samples))
	others := time.Duration(r.kernelRuns-c.Emitted) * r.filteredRun
	sampling := max(r.kernelTime-others, 0)
	fmt.Fprintf(w, "  kernel, runs that sampled: %s a sample (a run on another process: %.0f ns, measured with the target stopped)\n",
		perSample(sampling, r.bpf.samples), float64(r.filteredRun.Nanoseconds()))
	fmt.Fprintf(w, "  user side: drain and symbolize %s a sample, add to a profile %s, list threads (1/s) %s; its thread's CPU %v (%s a sample); process CPU %v (%s a sample)\n",
		perSample(r.bpf.drain, r.bpf.samples), perSample(r.bpf.aggregate, r.bpf.samples), perSample(r.bpf.refresh, r.bpf.samples),
		r.bpf.thread.Round(time.Microsecond), perSample(r.bpf.thread, r.bpf.samples),
		r.bpf.cpu.Round(time.Microsecond), perSample(r.bpf.cpu, r.bpf.samples))
	fmt.Fprintf(w, "cost a sample, BPF (kernel runs that sampled + sampling thread) %s against user space's (sampling thread) %s; with each process's whole CPU: %s against %s\n",
		perSample(sampling+r.bpf.thread, r.bpf.samples), perSample(r.user.thread, r.user.samples),
		perSample(sampling+r.bpf.cpu, r.bpf.samples), perSample(r.user.cpu, r.user.samples))
}

func (r *floorResult) printAgreement() {
	w := os.Stdout
	fmt.Fprintf(w, "agreement of the Ruby frames (distribution overlap, 1 = same): full stacks (labels and lines) %.3f, leaf frame %.3f; distinct stacks: user %d, BPF %d; samples with a GC or GVL leaf (left out of the stacks compared): user %d (%.1f%%), BPF %d (%.1f%%)\n",
		overlap(r.user.stacks, r.bpf.stacks), overlap(r.user.leaves, r.bpf.leaves), len(r.user.stacks), len(r.bpf.stacks),
		r.user.gcOrGVL, pct(r.user.gcOrGVL, r.user.samples), r.bpf.gcOrGVL, pct(r.bpf.gcOrGVL, r.bpf.samples))
	for _, s := range []struct {
		name string
		m    map[string]int
	}{{"user", r.user.leaves}, {"BPF", r.bpf.leaves}} {
		fmt.Fprintf(w, "  %s leaves: %s\n", s.name, topShares(s.m, 4))
	}
}

// topShares lists the n commonest keys with their shares.
func topShares(m map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	total := 0
	for k, v := range m {
		all = append(all, kv{k, v})
		total += v
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	var parts []string
	for i, e := range all {
		if i == n {
			parts = append(parts, fmt.Sprintf("(%d more)", len(all)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f%%", e.k, 100*float64(e.v)/float64(total)))
	}
	return strings.Join(parts, ", ")
}

func (r *floorResult) printSplit() {
	w := os.Stdout
	for _, s := range []struct {
		name string
		sd   *side
	}{{"user", &r.user}, {"BPF", &r.bpf}} {
		var n int
		var cpu time.Duration
		for _, c := range []string{"chain_a", "chain_b", "chain_c"} {
			n += s.sd.chains[c]
			cpu += s.sd.truth[c]
		}
		var parts []string
		worst := 0.0
		for _, c := range []string{"chain_a", "chain_b", "chain_c"} {
			got := float64(s.sd.chains[c]) / math.Max(1, float64(n))
			want := float64(s.sd.truth[c]) / math.Max(1, float64(cpu))
			worst = math.Max(worst, math.Abs(got-want))
			parts = append(parts, fmt.Sprintf("%s %.1f%% (program: %.1f%%)", c, 100*got, 100*want))
		}
		fmt.Fprintf(w, "split.rb chains, %s sampler: %s; largest error %.1f points\n", s.name, strings.Join(parts, ", "), 100*worst)
	}
}

// splitProbe asks split.rb for the CPU time its chains had so far (it
// writes it at the end of a round after SIGUSR1), at each phase's start and
// end; nil for other workloads.
type splitProbe struct {
	pid  int
	path string
	seq  int
	at   map[string]float64
}

type splitAnswer struct {
	Seq int                `json:"seq"`
	CPU map[string]float64 `json:"cpu"`
}

func (sp *splitProbe) ask(t *testing.T) map[string]float64 {
	sp.seq++
	if err := syscall.Kill(sp.pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(sp.path); err == nil {
			var a splitAnswer
			if json.Unmarshal(b, &a) == nil && a.Seq == sp.seq {
				return a.CPU
			}
		} else if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("split.rb did not answer signal %d", sp.seq)
	return nil
}

func (sp *splitProbe) start(t *testing.T) {
	if sp != nil {
		sp.at = sp.ask(t)
	}
}

func (sp *splitProbe) end(t *testing.T, s *side) {
	if sp == nil {
		return
	}
	now := sp.ask(t)
	for k, v := range now {
		s.truth[k] += time.Duration((v - sp.at[k]) * 1e9)
	}
}
