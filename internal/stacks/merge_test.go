package stacks

import (
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/unwind"
)

// A thread of Ruby 3.4 asleep in Kernel#sleep, called from Object#a in a
// block that Kernel#loop yields to, from <main>, as rbscope stack --native
// read it: the Ruby frames (innermost first, the exec loop's boundaries
// marked) and the native ones.
var (
	recordedRuby = []rubyvm.Frame{
		{Kind: rubyvm.KindCFunc, Label: "Kernel#sleep"},
		{Kind: rubyvm.KindRuby, Label: "Object#a", Path: "t.rb", Line: 2},
		{Kind: rubyvm.KindRuby, Label: "block in <main>", Path: "t.rb", Line: 5, ExecEnds: true},
		{Kind: rubyvm.KindCFunc, Label: "Kernel#loop"},
		{Kind: rubyvm.KindRuby, Label: "<main>", Path: "t.rb", Line: 5, ExecEnds: true},
	}
	recordedNative = names("pthread_cond_timedwait", "native_sleep", "rb_f_sleep", "vm_call_cfunc_with_frame_",
		"vm_exec_core", "rb_vm_exec", "rb_yield", "rb_f_loop", "vm_call_cfunc_with_frame_", "vm_exec_core",
		"rb_vm_exec", "rb_ec_exec_node", "ruby_run_node", "main")
)

func names(fs ...string) []unwind.Frame {
	out := make([]unwind.Frame, len(fs))
	for i, f := range fs {
		out[i] = unwind.Frame{Function: f, Object: "libruby.so.3.4"}
	}
	return out
}

func order(fs []Frame) string {
	var b []string
	for _, f := range fs {
		b = append(b, f.Name())
	}
	return strings.Join(b, " | ")
}

// TestMergeRecorded: each C method's frame goes just inside the VM's call
// of its function, each run of Ruby frames just inside the exec loop that
// runs it, as a debugger shows the interpreter running them.
func TestMergeRecorded(t *testing.T) {
	m := Merge(recordedRuby, recordedNative)
	want := "pthread_cond_timedwait | native_sleep | rb_f_sleep | Kernel#sleep | vm_call_cfunc_with_frame_ | vm_exec_core | " +
		"Object#a | block in <main> | rb_vm_exec | rb_yield | rb_f_loop | Kernel#loop | vm_call_cfunc_with_frame_ | vm_exec_core | " +
		"<main> | rb_vm_exec | rb_ec_exec_node | ruby_run_node | main"
	if got := order(m.Frames); got != want || !m.Aligned {
		t.Errorf("merged (aligned %v):\n got %s\nwant %s", m.Aligned, got, want)
	}
}

// TestMergeUnaligned: native frames that end before the outer exec loop
// (an unwind stopped by code without CFI) keep every Ruby frame: those
// without an exec loop follow the native frames, and the merge says so.
func TestMergeUnaligned(t *testing.T) {
	m := Merge(recordedRuby, recordedNative[:7]) // up to rb_yield
	want := "pthread_cond_timedwait | native_sleep | rb_f_sleep | Kernel#sleep | vm_call_cfunc_with_frame_ | vm_exec_core | " +
		"Object#a | block in <main> | rb_vm_exec | rb_yield | Kernel#loop | <main>"
	if got := order(m.Frames); got != want || m.Aligned {
		t.Errorf("merged (aligned %v):\n got %s\nwant %s", m.Aligned, got, want)
	}
	// No native frame at all (a thread whose registers could not be read).
	if m := Merge(recordedRuby, nil); order(m.Frames) != "Kernel#sleep | Object#a | block in <main> | Kernel#loop | <main>" || m.Aligned {
		t.Errorf("Ruby frames alone: %s (aligned %v)", order(m.Frames), m.Aligned)
	}
}

// TestLargest: the largest native frame by the stack it holds, the
// innermost of equals; none for a thread without native frames.
func TestLargest(t *testing.T) {
	fs := NativeFrames(names("a", "b", "c"))
	fs[0].Native.Size, fs[1].Native.Size, fs[2].Native.Size = 16, 4096, 4096
	th := Thread{Frames: append(RubyFrames(recordedRuby[:1]), fs...)}
	if big, ok := th.Largest(); !ok || big.Native.Function != "b" {
		t.Errorf("largest %v (%v), want b", big, ok)
	}
	if _, ok := (Thread{Frames: RubyFrames(recordedRuby)}).Largest(); ok {
		t.Error("a thread of Ruby frames alone has a largest native frame")
	}
}
