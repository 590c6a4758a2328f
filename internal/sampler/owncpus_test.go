package sampler

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOwnCPUsKeepOff: keepOff takes a CPU from every thread of this
// process, leaves the set whole when no CPU would be left, and restore
// gives the CPU back.
func TestOwnCPUsKeepOff(t *testing.T) {
	var base unix.CPUSet
	if err := unix.SchedGetaffinity(0, &base); err != nil {
		t.Fatal(err)
	}
	if base.Count() < 2 {
		t.Skip("this test may use one CPU only")
	}
	first, all := -1, []int{}
	for c := 0; c < 1024; c++ {
		if base.IsSet(c) {
			all = append(all, c)
			if first < 0 {
				first = c
			}
		}
	}
	o := &ownCPUs{}
	defer o.restore()
	check := func(what string, want func(unix.CPUSet) bool) {
		t.Helper()
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			var set unix.CPUSet
			if unix.SchedGetaffinity(tid, &set) == nil && !want(set) {
				t.Errorf("%s: thread %d may run on %d CPUs (first %v)", what, tid, set.Count(), set.IsSet(first))
			}
		}
	}
	o.keepOff([]int{first})
	check("kept off one CPU", func(s unix.CPUSet) bool { return !s.IsSet(first) && s.Count() == base.Count()-1 })
	o.keepOff(all)
	check("kept off every CPU", func(s unix.CPUSet) bool { return s == base })
	o.keepOff([]int{first})
	o.restore()
	check("restored", func(s unix.CPUSet) bool { return s == base })
}
