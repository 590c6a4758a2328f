package rubyvm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestSharedBuild: two processes of one Ruby opened with one BuildCache
// share one Build, each VM finds its own process's addresses (its load
// bias), and both read the stacks each program reports of itself; the
// Build leaves the cache with the last VM.
func TestSharedBuild(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			cache := rubyvm.NewBuildCache()
			var procs [2]*testruby.Process
			var reps [2]selfReport
			for i := range procs {
				procs[i] = testruby.Start(t, rb, "stack_threads.rb", nil, fmt.Sprint(deepFrames))
			}
			var vms [2]*rubyvm.VM
			for i, p := range procs {
				p.WaitReport(t, &reps[i], 30*time.Second)
				tg, err := target.Attach(p.PID())
				if err != nil {
					t.Fatal(err)
				}
				defer tg.Close()
				if vms[i], err = rubyvm.OpenWith(tg, rubyvm.Options{Builds: cache}); err != nil {
					t.Fatal(err)
				}
			}
			if vms[0].Build() != vms[1].Build() || cache.Len() != 1 {
				t.Fatalf("two processes of %s: %d Builds in the cache, shared %v", rb.Name, cache.Len(), vms[0].Build() == vms[1].Build())
			}
			for i, vm := range vms {
				for _, sym := range []string{"ruby_version", "rb_id2str", "ruby_vm_at_exit"} {
					got, _, err1 := vm.Symbol(sym)
					want, _, err2 := vm.Image.Symbol(sym)
					if err1 != nil || err2 != nil || got != want {
						t.Errorf("process %d: %s at %#x (%v) through the Build, %#x (%v) in its own image", i, sym, got, err1, want, err2)
					}
				}
				if vm.VMPtrAddr() == 0 {
					t.Errorf("process %d: ruby_current_vm_ptr not found", i)
				}
				threads := testvm.ReadAsleep(t, vm, true)
				checkStacks(t, rb, &reps[i], vm, threads, false)
			}
			vms[0].Close()
			if cache.Len() != 1 {
				t.Errorf("a Build in use left the cache")
			}
			vms[1].Close()
			if cache.Len() != 0 {
				t.Errorf("the Build outlived its last VM: %d in the cache", cache.Len())
			}
		})
	}
}
