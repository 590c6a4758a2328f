package sampler_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/sampler"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// churnStacks are the deepest stacks testdata/churn_stacks.rb has, root
// first, with labels normalized across Ruby versions (normalize); every
// moment's stack is a prefix of one of them. A sampled stack that is not
// mixes two moments: a torn read.
var churnStacks = []string{
	"<main>;churn;loop;block in churn;times;block in churn;mid_a;leaf_a",
	"<main>;churn;loop;block in churn;times;block in churn;mid_b;Array#map;block in mid_b;leaf_b",
	"<main>;churn;loop;block in churn;times;block in churn;mid_b;Array#first",
	"<main>;churn;loop;block in churn;times;Kernel#block_given?",
	"<main>;churn;loop;block in churn;Process.clock_gettime",
}

// normalize maps labels that differ between Ruby versions to one form:
// owners dropped (rbscope labels frames as Ruby 3.4 does: Object#churn,
// block in Object#churn), Kernel#loop and Integer#times as Ruby methods
// (written in Ruby from 3.3 on, the latter calling block_given?), and
// block levels not counted (3.3 counts them). C methods keep their owner.
func normalize(label string) string {
	switch label {
	case "Kernel#loop":
		return "loop"
	case "Integer#times":
		return "times"
	}
	if m := qualified.FindStringSubmatch(label); m != nil {
		if m[1] != "" {
			return "block in " + m[2]
		}
		return m[2]
	}
	return label
}

// qualified matches a Ruby frame's label: an optional block prefix, and a
// method of Object (the test program's own methods).
var qualified = regexp.MustCompile(`^(block (?:\(\d+ levels\) )?in )?(?:Object#)?([a-z_<][^#.]*)$`)

// tornStacks returns the stacks of p that no moment of churn_stacks.rb has,
// and how many samples they hold.
// validPrefix tells whether stack (normalized labels joined by ";") is a
// stack the churn program really has, or the outer part of one.
func validPrefix(stack string) bool {
	for _, c := range churnStacks {
		if c == stack || strings.HasPrefix(c, stack+";") {
			return true
		}
	}
	return false
}

func tornStacks(p *profile.Profile) ([]string, int) {
	var torn []string
	n := 0
	for _, st := range p.Stacks {
		var labels []string
		for _, id := range st.Frames {
			// The GC's frames sit on whichever frame allocated.
			if f := p.Frames[id]; f.Kind != profile.KindGC {
				labels = append(labels, normalize(f.Label))
			}
		}
		stack := strings.Join(labels, ";")
		if !validPrefix(stack) {
			torn = append(torn, stack)
			n += st.Count
		}
	}
	return torn, n
}

// TestPausedSamplesAreNeverTorn records a program whose stack changes
// every microsecond or so at 1000 Hz in the default mode, which stops the
// running threads for each read: no sample may mix two moments. The
// program runs once as it is, mostly on a CPU of its own, and once sharing
// one CPU with a spinning thread, so that it is often waiting for the CPU
// when a tick comes (then, where perf counters are allowed, some ticks must
// have left it out as not on a CPU). The same recordings with Nonblocking,
// which takes what it reads, show what such mixes look like (logged, not
// checked).
func TestPausedSamplesAreNeverTorn(t *testing.T) {
	clocks := false
	if l, err := target.Attach(unix.Getpid()); err == nil {
		if c, err := l.CPUClock(unix.Gettid()); err == nil {
			clocks = true
			c.Close()
		}
		l.Close()
	}
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "churn_stacks.rb", nil, "30")
			var rep struct {
				PID int `json:"pid"`
			}
			p.WaitReport(t, &rep, 30*time.Second)
			for _, shared := range []bool{false, true} {
				if shared {
					stop := testruby.ShareCPU(t, p.PID())
					defer stop()
				}
				for _, nonblocking := range []bool{false, true} {
					// On a busy machine most ticks may find the thread
					// waiting for a CPU, and the sampler itself may wait
					// for one: record again until enough ticks found the
					// thread runnable and some were read (at most ten
					// recordings), rather than assume a CPU to spare.
					var torn []string
					n, samples, waiting, errs := 0, 0, 0, 0
					for try := 0; try < 10 && (samples+waiting < 200 || samples < 30); try++ {
						// Real-time, as record's sampler is: on a busy
						// machine one of the normal class wakes at the
						// scheduler's ticks, when the thread sharing its CPU
						// also gets it back, and may then never find it
						// waiting.
						s, err := sampler.New(p.PID(), sampler.Options{Rate: 1000, Duration: 1500 * time.Millisecond, Nonblocking: nonblocking, Realtime: true})
						if err != nil {
							t.Fatal(err)
						}
						prof := s.Run(context.Background())
						tr, tn := tornStacks(prof)
						torn, n = append(torn, tr...), n+tn
						samples, waiting, errs = samples+prof.Samples, waiting+prof.Waiting, errs+prof.Errors
					}
					t.Logf("shared CPU %v, nonblocking %v: %d samples (%d left out waiting for a CPU), %d unreadable, %d torn in %d stacks",
						shared, nonblocking, samples, waiting, errs, n, len(torn))
					if samples+waiting < 200 || samples < 30 {
						t.Fatalf("nonblocking %v: only %d samples (%d ticks waiting) in ten recordings", nonblocking, samples, waiting)
					}
					if nonblocking {
						continue
					}
					// Ruby 2.7 points ec->cfp at a new frame before it fills
					// it in (3.0 fills it first): a stop in between shows the
					// slot's previous occupant as the innermost frame. Such
					// samples may be torn at their leaf alone, and rarely.
					leafOnly := 0
					for _, st := range torn {
						if i := strings.LastIndexByte(st, ';'); testruby.Older(rb, 3, 0) && i > 0 && validPrefix(st[:i]) {
							leafOnly++
							continue
						}
						t.Errorf("torn sample: %s", st)
					}
					if leafOnly > 0 && n*100 > samples {
						t.Errorf("%d of %d samples torn at their leaf (Ruby 2.7's frame push), over 1%%", n, samples)
					}
					if shared && clocks && waiting == 0 {
						t.Errorf("sharing a CPU with a spinner, no tick found the thread waiting for it")
					}
				}
			}
		})
	}
}

// TestFrameKindsMatchRubyVM: the profile model names Ruby's frame kinds
// with the VM reader's strings, which the sampler copies as they are.
func TestFrameKindsMatchRubyVM(t *testing.T) {
	if string(profile.KindRuby) != string(rubyvm.KindRuby) || string(profile.KindCFunc) != string(rubyvm.KindCFunc) {
		t.Errorf("profile kinds %q/%q, rubyvm's %q/%q", profile.KindRuby, profile.KindCFunc, rubyvm.KindRuby, rubyvm.KindCFunc)
	}
}
