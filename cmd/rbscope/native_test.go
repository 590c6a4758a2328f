package main

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/libc"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/wire"
)

// gdbFrame is one frame as gdb unwinds it (testdata/native/gdb_frames.py).
type gdbFrame struct {
	pc, cfa uint64 // cfa 0: gdb gave none
	name    string
}

// gdbStacks attaches gdb to pid and returns every thread's real frames.
func gdbStacks(t *testing.T, pid int) map[int][]gdbFrame {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	maps, err := procfs.ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	return gdbFrames(t, append([]string{"-p", strconv.Itoa(pid)}, gdbProgramArgs(t, exe, maps)...)...)
}

// gdbProgramArgs returns the gdb arguments that load the program a
// dynamic linker run as a command loaded, when exe, the process's
// executable, is that linker (ruby-3.4.11-debian's bin/ruby execs its
// sysroot's ld.so with ruby3.4): gdb takes the executable for the
// program, and the link map's entry of the program names no file, so gdb
// would unwind through the program's code without its call frame
// information. The program is the mapped executable (ET_EXEC, or ET_DYN
// flagged PIE) that is not exe, loaded at the address its first segment
// is mapped at, the next segment right after it (Ruby's crash report maps
// its executable whole once more, to read its symbols); maps are the
// process's (or the core's) mappings.
func gdbProgramArgs(t *testing.T, exe string, maps []procfs.Mapping) []string {
	t.Helper()
	if !strings.HasPrefix(filepath.Base(exe), "ld-") {
		return nil
	}
	for i, m := range maps {
		if m.Offset != 0 || m.Path == exe || !strings.HasPrefix(m.Path, "/") ||
			i+1 == len(maps) || maps[i+1].Path != m.Path || maps[i+1].Start != m.End {
			continue
		}
		f, err := elf.Open(m.Path)
		if err != nil {
			continue
		}
		flags, _ := f.DynValue(elf.DT_FLAGS_1)
		pie := f.Type == elf.ET_DYN && len(flags) > 0 && elf.DynFlag1(flags[0])&elf.DF_1_PIE != 0
		var first uint64
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD {
				first = p.Vaddr &^ (p.Align - 1)
				break
			}
		}
		f.Close()
		if f.Type == elf.ET_EXEC || pie {
			return []string{"-ex", fmt.Sprintf("add-symbol-file %s -o %#x", m.Path, m.Start-first)}
		}
	}
	t.Fatalf("%s runs no program gdb can be given: no executable among its mappings", exe)
	return nil
}

// gdbFrames runs gdb on what args name (-p PID, or an executable and a
// core) and returns every thread's real frames.
func gdbFrames(t *testing.T, args ...string) map[int][]gdbFrame {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		testruby.Missing(t, "gdb is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "gdb", append(append([]string{"-batch", "-nx"}, args...), "-x", testruby.Testdata("native/gdb_frames.py"))...).Output()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	stacks := map[int][]gdbFrame{}
	tid := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "THREAD":
			tid, _ = strconv.Atoi(f[1])
		case len(f) == 4 && f[0] == "FRAME" && tid > 0:
			pc, _ := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
			cfa, _ := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 64)
			stacks[tid] = append(stacks[tid], gdbFrame{pc, cfa, f[3]})
		}
	}
	if len(stacks) == 0 {
		t.Fatalf("setup: gdb listed no thread:\n%s", out)
	}
	return stacks
}

// startNativeStack starts testdata/native_stack.rb on rb (calling the C
// library lib, unless it is "") and reads it with stack --native --json
// and the flags extra.
func startNativeStack(t *testing.T, rb testruby.Ruby, lib string, extra ...string) (*testruby.Process, wire.NativeStack) {
	t.Helper()
	p := testruby.Start(t, rb, "native_stack.rb", nil, lib)
	var rep struct{ PID int }
	p.WaitReport(t, &rep, 60*time.Second)
	// The report is written just before the main thread calls level1: on
	// a busy machine it may not sleep yet. Read until it does.
	var d wire.NativeStack
	for i := 0; ; i++ {
		out, errOut, code := rbscope(t, append([]string{"stack", "--native", "--json", "-p", strconv.Itoa(p.PID())}, extra...)...)
		if code != 0 {
			t.Fatalf("stack --native %v: exit %d: %s", extra, code, errOut)
		}
		d = wire.NativeStack{}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		if mainAsleepInLevel3(d) || i == 100 {
			return p, d
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mainAsleepInLevel3 tells whether the main thread of native_stack.rb has
// reached its sleep in level3.
func mainAsleepInLevel3(d wire.NativeStack) bool {
	for _, th := range d.Threads {
		if !th.Main || th.Status != "sleep" {
			continue
		}
		for _, f := range th.Frames {
			if f.Label == "Object#level3" || f.Label == "level3" {
				return true
			}
		}
	}
	return false
}

// buildBigFrame builds testdata/native/bigframe.c without frame pointers,
// for glibc with gcc and, when musl is set, for musl with musl-gcc.
func buildBigFrame(t *testing.T, musl bool) string {
	t.Helper()
	cc := "gcc"
	if musl {
		cc = "musl-gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		testruby.Missing(t, "%s is not installed (make deps installs it)", cc)
	}
	lib := filepath.Join(t.TempDir(), "libbigframe.so")
	if out, err := exec.Command(cc, "-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-o", lib, testruby.Testdata("native/bigframe.c")).CombinedOutput(); err != nil {
		t.Fatalf("setup: %s: %v\n%s", cc, err, out)
	}
	return lib
}

// TestStackNativeMatchesGDB: every native frame rbscope unwinds (pc and
// CFA, hence its size) is the one gdb unwinds, thread by thread, on every
// Ruby of the matrix: Ruby waiting in sleep and Queue#pop, and (3.0 and
// later) Ruby calling a C library built without frame pointers that holds
// a 300 KB frame and calls back into Ruby. The Ruby frames sit just inside
// the exec-loop frame that runs them. On musl, whose C library has no
// call frame information for its C functions (and gdb none either: it
// unwinds them by guesswork), each thread's walk stops in the C library
// where gdb's first frame is, saying why: every thread of the program
// waits there (the C library's frame is below the sleep in the callback).
func TestStackNativeMatchesGDB(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			musl := testruby.Musl(rb)
			withC := !testruby.Older(rb, 3, 0)
			arg := ""
			if withC {
				arg = buildBigFrame(t, musl)
			}
			p, d := startNativeStack(t, rb, arg)
			gdb := gdbStacks(t, p.PID())
			byTID := map[int]wire.NativeThread{}
			for _, th := range d.Threads {
				byTID[th.TID] = th
			}
			for tid, want := range gdb {
				th, ok := byTID[tid]
				if !ok {
					t.Errorf("thread %d: gdb unwinds it, rbscope lists no such thread", tid)
					continue
				}
				if musl {
					stopsInMusl(t, th, want)
					continue
				}
				compareWithGDB(t, th, want)
			}
			if musl {
				labels := rubyLabels(threadNamed(d, "main"))
				if i := slices.Index(labels, "Object#level3"); i < 0 || !slices.Equal(labels[i:i+2], []string{"Object#level3", "Object#level2"}) {
					t.Errorf("main thread's Ruby frames: %q", labels)
				}
				return
			}
			for _, th := range d.Threads {
				if !th.Ruby {
					continue
				}
				// A stripped build whose exec loop is a local symbol (3.2
				// and later) names no exec-loop frame: the Ruby frames then
				// follow the native ones, and say so.
				named := slices.ContainsFunc(th.Frames, func(f wire.MixedFrame) bool { return slices.Contains(rubyvm.ExecLoopFunctions, f.Function) })
				switch {
				case named && th.RubyPlacement != "":
					t.Errorf("thread %d (%s): Ruby frames placed %s", th.TID, th.Name, th.RubyPlacement)
				case named:
					checkPlacement(t, th)
				case th.RubyPlacement == "" || !rb.Stripped:
					t.Errorf("thread %d (%s): no exec-loop frame named on %s (placement %q)", th.TID, th.Name, rb.Name, th.RubyPlacement)
				}
			}
			main := threadNamed(d, "main")
			for i, f := range main.Frames {
				// Where the VM's call of the C method is named, the C
				// method's frame sits beside its C function.
				if f.Label == "Kernel#sleep" && i+1 < len(main.Frames) && hasAnyPrefix(main.Frames[i+1].Function, rubyvm.CFuncCallPrefixes) && (i == 0 || main.Frames[i-1].Function != "rb_f_sleep") {
					t.Errorf("Kernel#sleep is not beside rb_f_sleep: after %s", frameName(main.Frames[i-1]))
				}
			}
			labels := rubyLabels(main)
			if i := slices.Index(labels, "Object#level3"); i < 0 || !slices.Equal(labels[i:i+2], []string{"Object#level3", "Object#level2"}) {
				t.Errorf("main thread's Ruby frames: %q", labels)
			}
			if !withC {
				return
			}
			fiddle := threadNamed(d, "fiddle")
			var big *wire.MixedFrame
			for i, f := range fiddle.Frames {
				if f.Function == "rbscope_big_frame" {
					big = &fiddle.Frames[i]
				}
			}
			if big == nil || big.FrameSize < 300000 || big.FrameSize > 300000+4096 {
				t.Errorf("rbscope_big_frame: %+v, want a frame of 300000 bytes and a little more", big)
			}
			if fiddle.LargestFrame < 300000 {
				t.Errorf("largest frame of the fiddle thread: %d", fiddle.LargestFrame)
			}
			// threads shows each thread's largest frame beside its stack.
			out, errOut, code := rbscope(t, "threads", "-p", strconv.Itoa(p.PID()), "--json", "--interval", "10ms")
			var doc struct{ Threads []wire.ThreadRow }
			if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
				t.Fatalf("threads: exit %d, %v: %s", code, err, errOut)
			}
			for _, r := range doc.Threads {
				want := byTID[r.TID].LargestFrame
				if r.Ruby != nil && r.Ruby.Name == "fiddle" {
					// Its largest frame of its own, beside the one holding
					// its VM stack.
					if got := r.LargestFrame; got == nil || !strings.HasPrefix(got.Function, "rbscope_big_frame") {
						t.Errorf("threads: the fiddle thread's largest frame %+v, want rbscope_big_frame", got)
					}
					continue
				}
				if got := r.LargestFrame; got == nil || got.Bytes != want {
					t.Errorf("threads: thread %d (%s): largest frame %+v, stack --native %d", r.TID, r.Comm, got, want)
				}
				// Ruby 3.0 to 3.2 allocate a thread's VM stack in the
				// frame that starts it: queue-pop's largest frame holds it,
				// and is no alarm. 3.3 and later put it below the thread's
				// frames, at the far end of its stack's mapping (in no
				// frame, seen on 3.3.8, 3.4.5 and 3.4.11).
				if r.Ruby != nil && r.Ruby.Name == "queue-pop" && !testruby.Older(rb, 3, 0) && testruby.Older(rb, 3, 3) && (r.LargestFrame == nil || r.LargestFrame.VMStackBytes < 64<<10) {
					t.Errorf("threads: queue-pop's largest frame %+v holds no VM stack", r.LargestFrame)
				}
			}
			// The text flags the fiddle thread's 300000-byte frame, not the
			// frames that hold a VM stack.
			text, errOut, code := rbscope(t, "threads", "-p", strconv.Itoa(p.PID()), "--interval", "10ms")
			if code != 0 {
				t.Fatalf("threads: exit %d: %s", code, errOut)
			}
			for _, line := range strings.Split(text, "\n") {
				flagged := strings.Contains(line, "[large native frame")
				switch {
				case strings.Contains(line, " fiddle ") && !strings.Contains(line, "[large native frame: rbscope_big_frame"):
					t.Errorf("threads: the fiddle thread's large frame is not flagged: %s", line)
				case strings.Contains(line, " queue-pop ") && flagged:
					t.Errorf("threads: a frame holding the VM stack is flagged: %s", line)
				}
			}
		})
	}
}

// stopsInMusl checks the native frames of a thread waiting in musl's C
// library: the first is gdb's first (where the thread stands), in the C
// library, and the walk stops there for want of call frame information,
// naming musl.
func stopsInMusl(t *testing.T, th wire.NativeThread, want []gdbFrame) {
	t.Helper()
	var got []wire.MixedFrame
	for _, f := range th.Frames {
		if f.Kind == kindNative {
			got = append(got, f)
		}
	}
	if len(got) == 0 || len(want) == 0 {
		t.Errorf("thread %d (%s): %d native frames, gdb %d (%s)", th.TID, th.Name, len(got), len(want), th.NativeError)
		return
	}
	pc, _ := strconv.ParseUint(strings.TrimPrefix(got[0].PC, "0x"), 16, 64)
	if pc != want[0].pc {
		t.Errorf("thread %d (%s): first frame's pc %#x, gdb %#x", th.TID, th.Name, pc, want[0].pc)
	}
	last := got[len(got)-1]
	if !libc.IsMusl(last.Object) || !strings.Contains(th.NativeError, "musl's C library has call frame information for none") {
		t.Errorf("thread %d (%s): the native walk ends at %s in %s (%s), want in musl's C library, saying why", th.TID, th.Name, frameName(last), last.Object, th.NativeError)
	}
}

// compareWithGDB checks a thread's native frames against gdb's, frame by
// frame: the same pc and, where gdb knows it, the same CFA. gdb may know
// one more or one fewer outermost frame.
func compareWithGDB(t *testing.T, th wire.NativeThread, want []gdbFrame) {
	t.Helper()
	var got []wire.MixedFrame
	for _, f := range th.Frames {
		if f.Kind == kindNative {
			got = append(got, f)
		}
	}
	if len(got) < len(want)-1 || len(got) > len(want)+1 {
		t.Errorf("thread %d (%s): %d native frames, gdb %d\nrbscope: %s\ngdb: %v (%s)", th.TID, th.Name, len(got), len(want), frameList(got), want, th.NativeError)
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		pc, _ := strconv.ParseUint(strings.TrimPrefix(got[i].PC, "0x"), 16, 64)
		if pc != want[i].pc {
			t.Errorf("thread %d (%s) frame %d: pc %#x, gdb %#x (%s)\nrbscope: %s", th.TID, th.Name, i, pc, want[i].pc, want[i].name, frameList(got))
			return
		}
		cfa, _ := strconv.ParseUint(strings.TrimPrefix(got[i].CFA, "0x"), 16, 64)
		if want[i].cfa != 0 && cfa != want[i].cfa {
			t.Errorf("thread %d (%s) frame %d (%s): CFA %#x, gdb %#x", th.TID, th.Name, i, want[i].name, cfa, want[i].cfa)
		}
	}
}

func frameList(fs []wire.MixedFrame) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "\n  %s %s", f.PC, frameName(f))
	}
	return b.String()
}

// checkPlacement: each run of Ruby frames is followed by an exec-loop
// native frame (the call of the VM that runs them), or, for a C method's
// frame, by the VM's call of its C function, whose frame is just before.
func checkPlacement(t *testing.T, th wire.NativeThread) {
	t.Helper()
	for i, f := range th.Frames {
		if f.Kind == kindNative || (i+1 < len(th.Frames) && th.Frames[i+1].Kind != kindNative) {
			continue
		}
		next := "nothing"
		if i+1 < len(th.Frames) {
			next = frameName(th.Frames[i+1])
		}
		switch {
		case i+1 < len(th.Frames) && slices.Contains(rubyvm.ExecLoopFunctions, th.Frames[i+1].Function):
		case f.Kind == string(rubyvm.KindCFunc) && i+1 < len(th.Frames) && hasAnyPrefix(th.Frames[i+1].Function, rubyvm.CFuncCallPrefixes):
		default:
			t.Errorf("thread %d (%s): Ruby frame %q is followed by %s, not an exec-loop frame nor the call of a C method", th.TID, th.Name, f.Label, next)
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func threadNamed(d wire.NativeStack, name string) wire.NativeThread {
	for _, th := range d.Threads {
		if th.Name == name || name == "main" && th.Main {
			return th
		}
	}
	return wire.NativeThread{}
}

func rubyLabels(th wire.NativeThread) []string {
	var out []string
	for _, f := range th.Frames {
		if f.Kind != kindNative {
			out = append(out, f.Label)
		}
	}
	return out
}

// TestStackNativeYJIT: code YJIT generated has no CFI; the native walk
// stops there naming it [jit], and every Ruby frame is still shown.
func TestStackNativeYJIT(t *testing.T) {
	ran := 0
	for _, rb := range testruby.Rubies(t) {
		if out, _ := exec.Command(rb.Bin, "--yjit", "-e", "print RubyVM::YJIT.enabled?").Output(); string(out) != "true" {
			continue
		}
		ran++
		t.Run(rb.Name, func(t *testing.T) {
			cmd := exec.Command(rb.Bin, "--yjit", "--yjit-call-threshold=1", "-e", `def f; sleep; end; def g; f; end; $stdout.puts :ready; $stdout.flush; g`)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			bufio.NewReader(out).ReadString('\n')
			var main wire.NativeThread
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				stdout, errOut, code := rbscope(t, "stack", "--native", "--json", "-p", strconv.Itoa(cmd.Process.Pid))
				if code != 0 {
					t.Fatalf("stack --native: exit %d: %s", code, errOut)
				}
				var d wire.NativeStack
				if err := json.Unmarshal([]byte(stdout), &d); err != nil {
					t.Fatal(err)
				}
				if main = threadNamed(d, "main"); slices.Contains(rubyLabels(main), "Object#f") {
					break
				}
			}
			if labels := rubyLabels(main); !slices.Equal(labels, []string{"Kernel#sleep", "Object#f", "Object#g", "<main>"}) {
				t.Errorf("Ruby frames %q", labels)
			}
			var last wire.MixedFrame
			for _, f := range main.Frames {
				if f.Kind == kindNative {
					last = f
				}
			}
			if last.Object != "[jit]" || !strings.Contains(main.NativeError, "no call frame information") {
				t.Errorf("the native walk ends at %q (%s), want [jit] for want of CFI", frameName(last), main.NativeError)
			}
		})
	}
	if ran == 0 {
		testruby.Missing(t, "no Ruby built with YJIT (make rubies builds 3.3 and 3.4 with it)")
	}
}

// TestRecordNative: record --native samples the same mixed stacks stack
// --native reads: on a program whose threads stand still, every sample of
// a thread is its stack --native stack, native frames under their function
// (and object), Ruby frames as ever.
func TestRecordNative(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		if testruby.Older(rb, 3, 0) {
			continue // the C library needs Fiddle's need_gvl:
		}
		t.Run(rb.Name, func(t *testing.T) {
			musl := testruby.Musl(rb)
			p, d := startNativeStack(t, rb, buildBigFrame(t, musl))
			collapsed := filepath.Join(t.TempDir(), "native.collapsed")
			if _, errOut, code := rbscope(t, "record", "-p", strconv.Itoa(p.PID()), "--native", "--idle", "--threads", "-d", "0.5", "-f", "collapsed", "-o", collapsed); code != 0 {
				t.Fatalf("record --native: exit %d: %s", code, errOut)
			}
			b, err := os.ReadFile(collapsed)
			if err != nil {
				t.Fatal(err)
			}
			stacks := map[string]string{} // thread name -> its stack, leaf last
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				i := strings.LastIndexByte(line, ' ')
				frames := strings.Split(line[:i], ";")
				name := strings.TrimPrefix(frames[0], "thread ")
				if prev, ok := stacks[name]; ok && prev != strings.Join(frames[1:], ";") {
					t.Errorf("thread %s sampled in two stacks:\n%s\n%s", name, prev, strings.Join(frames[1:], ";"))
				}
				stacks[name] = strings.Join(frames[1:], ";")
			}
			for _, name := range []string{"main", "fiddle", "queue-pop"} {
				th := threadNamed(d, name)
				var want []string
				for i := len(th.Frames) - 1; i >= 0; i-- {
					f := th.Frames[i]
					switch {
					case f.Kind != kindNative:
						want = append(want, profileName(f))
					case f.Function != "":
						want = append(want, f.Function+" ["+filepath.Base(f.Object)+"]")
					}
				}
				var got []string
				for _, f := range strings.Split(stacks[name], ";") {
					if !unnamedNative.MatchString(f) {
						got = append(got, f)
					}
				}
				// record --idle ends a blocked thread's samples in its
				// wait's leaf, which stack shows on a line of its own.
				if name == "queue-pop" {
					if n := len(got); n == 0 || got[n-1] != "(waiting on Thread::Queue)" {
						t.Errorf("thread queue-pop: record --native --idle sampled no (waiting on Thread::Queue) leaf:\n%s", strings.Join(got, "\n"))
					} else {
						got = got[:n-1]
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("thread %s: record --native sampled\n%s\nstack --native reads\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
			if musl {
				return // the walk stops in the C library, before rbscope_big_frame
			}
			if !strings.Contains(stacks["fiddle"], "Fiddle::Function#call (cfunc);") || !strings.Contains(stacks["fiddle"], "rbscope_big_frame [libbigframe.so]") {
				t.Errorf("the fiddle thread's samples lack the C library between its Ruby frames: %s", stacks["fiddle"])
			}
		})
	}
}

// unnamedNative matches a native frame a profile names by its object and
// function start ("libruby.so.3.4.5+0x24ebd0 [libruby.so.3.4.5]").
var unnamedNative = regexp.MustCompile(`^\S+\+0x[0-9a-f]+ \[[^]]+\]$`)

// profileName is a Ruby frame's name in collapsed stacks.
func profileName(f wire.MixedFrame) string {
	if f.Kind == string(rubyvm.KindRuby) {
		return fmt.Sprintf("%s (%s:%d)", f.Label, f.Path, f.Line)
	}
	return f.Label + " (cfunc)"
}

// TestStackNativeLines: with --lines, a native frame of a debug build
// carries the source line addr2line gives for the same address.
func TestStackNativeLines(t *testing.T) {
	if _, err := exec.LookPath("addr2line"); err != nil {
		testruby.Missing(t, "addr2line (binutils) is not installed")
	}
	checked := 0
	for _, rb := range testruby.Rubies(t) {
		if !strings.HasSuffix(rb.Name, "-shared") {
			continue // the debug builds: their libruby has DWARF
		}
		t.Run(rb.Name, func(t *testing.T) {
			_, d := startNativeStack(t, rb, "", "--lines")
			n := 0
			for _, f := range threadNamed(d, "main").Frames {
				if f.Kind != kindNative || !strings.Contains(filepath.Base(f.Object), "libruby") {
					continue
				}
				if f.File == "" || f.Line <= 0 {
					t.Errorf("%s: no source line", frameName(f))
					continue
				}
				off, _ := strconv.ParseUint(strings.TrimPrefix(f.Offset, "0x"), 16, 64)
				if n > 0 || f.PC != threadNamed(d, "main").Frames[0].PC {
					off-- // a return address: the call lies before it
				}
				a2l, err := exec.Command("addr2line", "-e", f.Object, fmt.Sprintf("%#x", off)).Output()
				if err != nil {
					t.Fatalf("addr2line: %v", err)
				}
				want := strings.Fields(string(a2l))[0]
				if got := fmt.Sprintf("%s:%d", f.File, f.Line); filepath.Base(strings.Split(want, " ")[0]) != filepath.Base(got) {
					t.Errorf("%s: %s, addr2line says %s", frameName(f), got, want)
				}
				n++
			}
			if n == 0 {
				t.Error("no libruby frame on the main thread")
			}
			checked++
		})
	}
	if checked == 0 {
		testruby.Missing(t, "no debug Ruby build (make rubies)")
	}
}

// kindNative is the kind of a native frame in the documents.
const kindNative = string(stacks.KindNative)

// frameName is how a frame of the stack --native document reads: a Ruby
// frame's label, a native frame's function, else object+offset.
func frameName(f wire.MixedFrame) string {
	switch {
	case f.Kind != kindNative:
		return f.Label
	case f.Function != "":
		return f.Function
	}
	return filepath.Base(f.Object) + "+" + f.Offset
}
