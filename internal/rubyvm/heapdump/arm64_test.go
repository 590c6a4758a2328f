package heapdump_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm/heapdump"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// TestArm64HeapDump dumps testdata/heap_dump.rb's heap on Debian's arm64
// Ruby under qemu-aarch64-static and compares with the program's own
// ObjectSpace.dump_all, object by object for everything reachable from
// $dump_root: live through the emulator (whose registers are not the
// program's, so no machine-context root), then from the aarch64 core
// qemu writes when the program is killed with SIGABRT (with the machine
// context, from the guest's registers and stacks).
func TestArm64HeapDump(t *testing.T) {
	rb := testruby.Arm64(t)
	rubyDump := filepath.Join(t.TempDir(), "ruby-dump.json")
	var rep dumpReport
	core, _ := testruby.EmulatedCore(t, rb, "heap_dump.rb", &rep, func(pid int, report string) {
		vm, _ := testvm.AttachAsleep(t, pid, true) // until the main thread sleeps: the heap is as dumped
		t.Run("live", func(t *testing.T) {
			var live dumpReport
			if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &live) != nil {
				t.Fatalf("report: %v", err)
			}
			var out bytes.Buffer
			st, _, err := heapdump.WriteSnapshot(vm, vm.T.(*target.Live), &out, heapdump.Options{MachineContext: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("live: %d objects, %d roots, %d skipped", st.Objects, st.Roots, st.Skipped)
			checkDump(t, &out, st, &live, rubyDump, false)
		})
		if err := syscall.Kill(pid, syscall.SIGABRT); err != nil {
			t.Fatal(err)
		}
	}, rubyDump)
	t.Run("core", func(t *testing.T) {
		_, vm := testvm.OpenArm64Core(t, rb.Sysroot, core)
		vm.PrepareHeapDump()
		var out bytes.Buffer
		st, err := heapdump.Write(vm, &out, heapdump.Options{MachineContext: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("core: %d objects, %d roots, %d skipped", st.Objects, st.Roots, st.Skipped)
		checkDump(t, &out, st, &rep, rubyDump, true)
	})
}
