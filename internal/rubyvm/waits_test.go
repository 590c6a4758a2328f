package rubyvm_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestLocksShiftedLayout: a lock field moved by 8 bytes either way (a
// layout that does not fit) never names a wrong owner, a Mutex held that
// is not, or another queue length: each wait and hold it names is what
// the right layout names (testdata/locks.rb, whose threads block in known
// ways), or it names nothing.
func TestLocksShiftedLayout(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "locks.rb", nil)
			var rep struct {
				PID int `json:"pid"`
			}
			p.WaitReport(t, &rep, 60*time.Second)
			_, vm := testvm.Attach(t, p.PID())
			right := vm.Layout
			read := func() ([]rubyvm.Thread, []rubyvm.Locks) {
				t.Helper()
				var ths []rubyvm.Thread
				var locks []rubyvm.Locks
				err := testvm.Paused(t, vm, func() error {
					var err error
					if ths, err = vm.Threads(); err != nil {
						return err
					}
					locks, err = vm.ReadLocks(ths)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return ths, locks
			}
			// The threads block in their waits soon after the report (a
			// busy machine runs them late): read until they do.
			var ths []rubyvm.Thread
			var want []rubyvm.Locks
			named := 0
			for deadline := time.Now().Add(20 * time.Second); named < 6 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				ths, want = read()
				named = 0
				for _, l := range want {
					if l.Wait != nil && l.Wait.OwnerKnown && l.Wait.Owner != 0 {
						named++
					}
				}
			}
			if named < 6 {
				t.Fatalf("the right layout names %d owners, want 6 or more: %+v", named, want)
			}
			fields := []string{"ThreadLockingMutex", "ThreadKeepingMutexes", "MutexFiber", "MutexThread", "MutexECSerial", "MutexNext", "FiberThreadPtr", "QueueQue", "QueueNumWaiting"}
			for _, field := range fields {
				for _, delta := range []int64{-8, 8} {
					shifted := *right
					f := reflect.ValueOf(&shifted).Elem().FieldByName(field)
					if f.Int() < 0 || f.Int()+delta < 0 {
						continue
					}
					f.SetInt(f.Int() + delta)
					vm.Layout = &shifted
					gotThs, got := read()
					vm.Layout = right
					if len(gotThs) != len(ths) {
						t.Fatalf("%s%+d: %d threads, want %d", field, delta, len(gotThs), len(ths))
					}
					for i, l := range got {
						what := fmt.Sprintf("%s%+d: thread %q", field, delta, ths[i].Name)
						if w := l.Wait; w != nil {
							r := want[i].Wait
							switch {
							case r == nil:
								t.Errorf("%s: waits on %+v, the right layout names nothing", what, *w)
							case w.Object != r.Object:
								t.Errorf("%s: waits on %+v, want %+v", what, w.Object, r.Object)
							case w.OwnerKnown && (w.Owner != r.Owner || !r.OwnerKnown):
								t.Errorf("%s: owner %#x, want %#x", what, w.Owner, r.Owner)
							case w.Queue != nil && (r.Queue == nil || *w.Queue != *r.Queue):
								t.Errorf("%s: queue %+v, want %+v", what, *w.Queue, r.Queue)
							}
						}
						for _, h := range l.Held {
							if !slices.ContainsFunc(want[i].Held, func(r rubyvm.HeldMutex) bool { return r.Mutex.Data == h.Mutex.Data }) {
								t.Errorf("%s: holds %+v, the right layout names %+v", what, h, want[i].Held)
							}
						}
					}
				}
			}
		})
	}
}
