// Package teststat gives the statistical tests their tolerances, from
// their sample counts, and logs what the host did over a test's window.
//
// A test that fails by chance costs a whole landing, so every statistical
// test fails by chance at most once in 10,000 runs (FalseFailures) when
// what it measures is right: a test making several checks splits that
// rate among them (Bonferroni's bound, which holds whatever the checks'
// dependence), and each check's tolerance is the normal quantile of its
// share times the standard deviation its sample counts give. A test adds
// to it only the allowances it can name (a window's edges, a clock's
// tick), each said where it is added. It never retries: a miss is logged
// with the host's steal and load over the window (Window), so that one
// can be read against them.
package teststat

import (
	"math"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/procfs"
)

// FalseFailures is the most often a statistical test may fail by chance:
// once in 10,000 runs.
const FalseFailures = 1e-4

// Z is the two-sided normal quantile that checks checks of a test
// together fail by chance at most FalseFailures of their runs: 3.89 for
// one check, 4.56 for ten, 5.03 for a hundred.
func Z(checks int) float64 {
	alpha := FalseFailures / float64(max(checks, 1))
	return math.Sqrt2 * math.Erfinv(1-alpha)
}

// Share is the tolerance of a share p (0 to 1) measured on n samples, as
// a share: Z(checks) standard deviations of a binomial share. A p of 0 or
// 1 is taken as one sample's share, so that the tolerance is never 0.
func Share(p, n float64, checks int) float64 {
	n = max(n, 1)
	p = min(max(p, 1/n), 1-1/n)
	return Z(checks) * math.Sqrt(p*(1-p)/n)
}

// Count is the tolerance of a count of samples whose expected value is
// mean, taken at random moments (a clock's samples of a thread's time on
// a CPU): Z(checks) standard deviations of a Poisson count, at least one
// sample's.
func Count(mean float64, checks int) float64 {
	return Z(checks) * math.Sqrt(max(mean, 1))
}

// Window is a test's measuring window on the host: the CPU time it gave
// to work, left idle and had stolen by the hypervisor, from Watch to Log.
type Window struct {
	t     testing.TB
	from  procfs.HostCPUTimes
	err   error
	start time.Time
}

// Watch starts a window.
func Watch(t testing.TB) *Window {
	w := &Window{t: t, start: time.Now()}
	w.from, w.err = procfs.HostCPU()
	return w
}

// Host is what the host did over a window.
type Host struct {
	Wall time.Duration
	// Steal is the CPU time the hypervisor took, summed over the CPUs;
	// Busy the share of the CPUs' time given to work (this test's
	// included).
	Steal time.Duration
	Busy  float64
}

// Log logs the host's steal and load since Watch, and returns them (the
// zero Host where /proc/stat cannot be read).
func (w *Window) Log() Host {
	w.t.Helper()
	h := Host{Wall: time.Since(w.start)}
	to, err := procfs.HostCPU()
	if w.err != nil || err != nil {
		w.t.Logf("the host's CPU times cannot be read: %v", errorsOr(w.err, err))
		return h
	}
	h.Steal = to.Steal - w.from.Steal
	busy, idle := to.Busy-w.from.Busy, to.Idle-w.from.Idle
	if all := busy + idle + h.Steal; all > 0 {
		h.Busy = float64(busy) / float64(all)
	}
	w.t.Logf("the host over %v: the hypervisor stole %v of its %d CPUs' time, %.0f%% of it was busy", h.Wall.Round(time.Millisecond), h.Steal, to.CPUs, 100*h.Busy)
	return h
}

func errorsOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
