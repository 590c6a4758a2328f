package sampler

import (
	"os"
	"runtime"
	"sync"

	"github.com/rbscope/rbscope/internal/procfs"
	"golang.org/x/sys/unix"
)

// ownCPUs keeps rbscope's own threads off the CPUs its target runs on,
// where other CPUs are left for rbscope.
//
// On a busy machine every CPU is taken. rbscope, waking up to sample,
// takes one, and when that is the target's, the scheduler decides which
// thread gets it back once rbscope sleeps again, by how long each has run
// in its current turn. The target's turns begin where the kernel last
// preempted it, mostly at system calls, which a program makes at the
// borders of its phases (a program that reads its own CPU clock between
// phases): so whether the target is on its CPU when rbscope looks came to
// depend on where it is in the program. Beside two CPU spinners at 100 Hz
// (bench/contention.sh) a 50% phase got 42 to 46% of the samples, on
// average over 4 runs, in the paused mode; kept off the target's CPU,
// rbscope was within 2.5 points on average. Where rbscope runs changes
// nothing in the target: it only stops taking the target's CPU to look.
type ownCPUs struct {
	mu sync.Mutex
	// base is the affinity rbscope had before keepOff first changed it;
	// cur the one its threads have now.
	base, cur unix.CPUSet
	known     bool
}

// own is rbscope's own threads' affinity (one per process, as the
// affinity set is).
var own ownCPUs

// keepOff moves every thread of rbscope to the CPUs of its own set that
// are none of cpus; with none left, back to its whole set. Threads rbscope
// starts later inherit the set from the thread that starts them.
func (o *ownCPUs) keepOff(cpus []int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.known {
		if unix.SchedGetaffinity(0, &o.base) != nil {
			return
		}
		o.cur, o.known = o.base, true
		// Go follows the affinity set with its count of processors,
		// unless the count was set: fixed here, moving off a CPU leaves
		// it as it is, so that the real-time sampler, which sleeps
		// keeping its processor (napOnThread), still leaves one to the
		// rest of rbscope.
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	}
	want := o.base
	for _, c := range cpus {
		want.Clear(c)
	}
	if want.Count() == 0 {
		want = o.base
	}
	if want == o.cur {
		return
	}
	tids, err := procfs.Tasks(os.Getpid())
	if err != nil {
		return
	}
	for _, tid := range tids {
		_ = unix.SchedSetaffinity(tid, &want) // a thread ending meanwhile
	}
	o.cur = want
}

// restore gives rbscope's threads back the CPUs they had.
func (o *ownCPUs) restore() { o.keepOff(nil) }
