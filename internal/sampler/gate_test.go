package sampler_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/teststat"
)

// gateMix is what testdata/gate_mix.rb says of itself: the CPU seconds its
// Ruby bursts and its C bursts (without the GVL) have had so far.
type gateMix struct {
	PID  int     `json:"pid"`
	Ruby float64 `json:"ruby"`
	C    float64 `json:"c"`
}

// TestPerProcessGateKeepsShares: the agent's sampler (PerProcess), which
// reads a process only at ticks when one of its threads is on a CPU
// (Sampler.gate), gives the same shares as the sampler without that gate, and
// both the shares the program measured with its own thread CPU clocks, on
// threads that switch between Ruby code, C code without the GVL and sleep
// every few milliseconds. Its samples also count the program's CPU time:
// at least half of what the program measured in the bursts, times the
// rate (the measurement spans the recordings' start and end too), where
// a gate that took a thread preempted by rbscope's own waking thread for
// one asleep gave 46% beside two CPU spinners. Both samplers run as the
// agent's does, at real-time priority where allowed.
func TestPerProcessGateKeepsShares(t *testing.T) {
	// The C bursts are zlib's, which a Ruby built without zlib (the musl
	// builds here) lacks: the first Ruby that has it.
	var rb testruby.Ruby
	for _, r := range testruby.Rubies(t) {
		if exec.Command(r.Bin, "-rzlib", "-e", "").Run() == nil {
			rb = r
			break
		}
	}
	if rb.Bin == "" {
		testruby.Missing(t, "no Ruby with zlib")
	}
	p := testruby.Start(t, rb, "gate_mix.rb", nil, "60")
	var first gateMix
	p.WaitReport(t, &first, 30*time.Second)
	read := func() gateMix {
		var m gateMix
		for i := 0; ; i++ {
			b, err := os.ReadFile(p.Report)
			if err == nil && json.Unmarshal(b, &m) == nil {
				return m
			}
			if i > 100 {
				t.Fatalf("reading %s: %v", p.Report, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, gated := range []bool{true, false} {
		// At most 4 recordings, until each kind has 300 samples: a busy
		// machine may keep the threads off a CPU for much of the time.
		var ruby, c int
		var truth gateMix
		for try := 0; try < 4 && (ruby < 300 || c < 300); try++ {
			before := read()
			prof := record(t, p.PID(), gated)
			after := read()
			truth.Ruby += after.Ruby - before.Ruby
			truth.C += after.C - before.C
			r, cc := kindSamples(prof)
			ruby, c = ruby+r, c+cc
		}
		if ruby+c < 100 {
			t.Fatalf("gated %v: only %d samples in the bursts", gated, ruby+c)
		}
		got := 100 * float64(ruby) / float64(ruby+c)
		want := 100 * truth.Ruby / (truth.Ruby + truth.C)
		// The samples' share's own error (teststat.Share, for the two
		// gates checked), and 3 points beside.
		bound := 3 + 100*teststat.Share(want/100, float64(ruby+c), 2)
		t.Logf("gated %v: %d samples in Ruby bursts, %d in C bursts: %.1f%% Ruby; the program measured %.1f%% of %.2f s CPU (bound %.1f points)",
			gated, ruby, c, got, want, truth.Ruby+truth.C, bound)
		if math.Abs(got-want) > bound {
			t.Errorf("gated %v: Ruby bursts have %.1f%% of the samples, %.1f%% of the program's CPU time", gated, got, want)
		}
		perCPUSecond := float64(ruby+c) / (truth.Ruby + truth.C)
		t.Logf("gated %v: %.0f samples per second of the program's CPU, at %d Hz", gated, perCPUSecond, rate)
		if perCPUSecond < rate/2 {
			t.Errorf("gated %v: %.0f samples per second of the program's CPU time at %d Hz: the sampler missed more than half the moments a thread ran", gated, perCPUSecond, rate)
		}
	}
}

// rate is the gate test's samples per second.
const rate = 500

// record samples pid for 2 s at rate, --nonblocking, through the
// agent's sampler of a set of processes (PerProcess, gated) or the
// recorder's.
func record(t *testing.T, pid int, gated bool) *profile.Profile {
	t.Helper()
	opts := sampler.Options{Rate: rate, Duration: 2 * time.Second, Nonblocking: true, Realtime: true}
	if !gated {
		s, err := sampler.New(pid, opts)
		if err != nil {
			t.Fatal(err)
		}
		return s.Run(context.Background())
	}
	var got *profile.Profile
	opts.PerProcess, opts.Duration, opts.FlushEvery = true, 0, time.Hour
	opts.FlushProcess = func(_ int, cpu, _ *profile.Profile, _ bool) {
		if got == nil {
			got = cpu
		} else {
			got.Merge(cpu)
		}
	}
	s, err := sampler.NewSet(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.Run(ctx)
	if got == nil {
		t.Fatal("the set's sampler handed over no profile")
	}
	return got
}

// kindSamples counts the samples in the Ruby bursts (ruby_work) and in the
// C bursts (c_work) of gate_mix.rb.
func kindSamples(p *profile.Profile) (ruby, c int) {
	for _, st := range p.Stacks {
		for _, id := range st.Frames {
			l := p.Frames[id].Label
			if strings.HasSuffix(l, "ruby_work") {
				ruby += st.Count
				break
			}
			if strings.HasSuffix(l, "c_work") {
				c += st.Count
				break
			}
		}
	}
	return ruby, c
}
