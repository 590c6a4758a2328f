package rubyvm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// selfReport is what testdata/stack_threads.rb writes about itself.
type selfReport struct {
	PID         int               `json:"pid"`
	Version     string            `json:"version"`
	Statuses    map[string]string `json:"statuses"`
	ThreadNames []*string         `json:"thread_names"`
	Threads     []threadReport    `json:"threads"`
}

// threadReport is one thread's part of a selfReport.
type threadReport struct {
	Name   *string `json:"name"`
	Main   bool    `json:"main"`
	TID    int     `json:"tid"`
	Top    [][]any `json:"top"`
	Frames [][]any `json:"frames"`
	// Between are the lines the frame under Top's first may be at when the
	// thread is caught between two calls of that block.
	Between []int `json:"between"`
}

const deepFrames = 3000

// TestStacksMatchCallerLocations compares every thread's stack, read from
// outside, with the caller_locations the thread took on the line it blocks
// on, for every Ruby installed, and again with YJIT on and with M:N threads
// where the Ruby has them.
func TestStacksMatchCallerLocations(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		for _, va := range testruby.Variants(t, rb) {
			name := strings.TrimSuffix(rb.Name+"/"+va.Name, "/")
			t.Run(name, func(t *testing.T) {
				p := testruby.Start(t, rb, "stack_threads.rb", va.Env, fmt.Sprint(deepFrames))
				var rep selfReport
				p.WaitReport(t, &rep, 30*time.Second)
				vm, threads := testvm.AttachAsleep(t, p.PID(), true)
				// A running thread may be caught anywhere in its loop:
				// read again (a few times) until it is where it reported.
				// Under M:N threads the GVL may also be caught handed to
				// a thread that no native thread has picked up yet.
				mn := va.Name == "mn"
				for i := 0; i < 20 && (!runningAgree(&rep, threads) || mn && gvlUnplaced(threads)); i++ {
					vm, threads = testvm.AttachAsleep(t, p.PID(), true)
				}
				checkStacks(t, rb, &rep, vm, threads, mn)
			})
		}
	}
}

// gvlUnplaced reports whether the GVL's holder is on no native thread: a
// moment of M:N scheduling, between the GVL being handed to a thread and
// a shared native thread taking it up.
func gvlUnplaced(threads []rubyvm.Thread) bool {
	for _, th := range threads {
		if th.GVL && th.TID == 0 {
			return true
		}
	}
	return false
}

// TestListedThenReadStacks: threads listed while the process runs and
// their stacks read later, with the process paused (how the sampler
// keeps its pauses short), are what the program says of itself.
func TestListedThenReadStacks(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "stack_threads.rb", nil, fmt.Sprint(deepFrames))
			var rep selfReport
			p.WaitReport(t, &rep, 30*time.Second)
			testvm.AttachAsleep(t, p.PID(), true) // until the main thread sleeps
			_, vm := testvm.Attach(t, p.PID())
			var ths []rubyvm.Thread
			// A running thread may be caught anywhere in its loop: read
			// again (a few times) until it is where it reported.
			for i := 0; i < 20 && (i == 0 || !runningAgree(&rep, ths)); i++ {
				var err error
				if ths, err = vm.ReadThreads(nil); err != nil {
					t.Fatal(err)
				}
				for _, th := range ths {
					if len(th.Frames) != 0 {
						t.Fatalf("thread %q: ReadThreads(nil) read %d frames", th.Name, len(th.Frames))
					}
				}
				err = testvm.Paused(t, vm, func() error {
					vm.ReadStacks(ths, func(rubyvm.Thread) bool { return true })
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			checkStacks(t, rb, &rep, vm, ths, false)
		})
	}
}

// checkStacks compares the threads rbscope read with what the program
// reported about itself (shared by the live and the core-file tests).
// Threads are matched by TID, or by name under M:N threads (mn), where a
// Ruby thread has no native thread of its own: then its TID is that of the
// native thread it last ran on, which Thread#native_thread_id reported
// only for the moment of the report.
func checkStacks(t *testing.T, rb testruby.Ruby, rep *selfReport, vm *rubyvm.VM, threads []rubyvm.Thread, mn bool) {
	t.Helper()
	if vm.Version != rep.Version {
		t.Errorf("version: rbscope read %q, Ruby says %q", vm.Version, rep.Version)
	}
	t.Logf("Ruby %s, layout from %s", vm.Version, vm.Layout.Source)
	switch {
	case rb.Stripped && vm.Layout.Source != "table":
		t.Errorf("a stripped Ruby must be read with the built-in table, got layout from %s", vm.Layout.Source)
	case !rb.Stripped && !strings.HasPrefix(vm.Layout.Source, "dwarf:"):
		t.Errorf("a debug build must be read with its own DWARF, got layout from %s", vm.Layout.Source)
	}
	if len(threads) != len(rep.ThreadNames) {
		t.Errorf("rbscope found %d threads, Thread.list has %d", len(threads), len(rep.ThreadNames))
	}
	byTID := map[int]rubyvm.Thread{}
	byName := map[string]rubyvm.Thread{}
	for _, th := range threads {
		byTID[th.TID] = th
		if th.Main {
			byName["main"] = th
		} else {
			byName[th.Name] = th
		}
	}
	for _, want := range rep.Threads {
		name := "main"
		if want.Name != nil {
			name = *want.Name
		}
		got, ok := byTID[want.TID]
		if mn {
			got, ok = byName[name]
			// A thread that is not running, runnable ones waiting for
			// the GVL included, is on no native thread; the one that
			// holds the GVL is on one once a native thread has taken it
			// up (the caller reads again until then).
			if ok && (got.TID < 0 || (got.TID == 0 && got.GVL)) {
				t.Errorf("thread %s (%s, GVL %v): TID %d", name, got.Status, got.GVL, got.TID)
			}
		}
		if !ok {
			t.Errorf("thread %s (tid %d) not found by rbscope", name, want.TID)
			continue
		}
		if got.Error != "" {
			t.Errorf("thread %s: %s", name, got.Error)
		}
		if want.Name != nil && got.Name != *want.Name {
			t.Errorf("thread tid %d: name %q, Ruby says %q", want.TID, got.Name, *want.Name)
		}
		if got.Main != want.Main {
			t.Errorf("thread %s: main=%v, Ruby says %v", name, got.Main, want.Main)
		}
		if st := rep.Statuses[name]; name != "main" && st != got.Status {
			t.Errorf("thread %s: status %q, Thread#status says %q", name, got.Status, st)
		}
		diff := compareFrames(vm.Version, got.Frames, append(want.Top, want.Frames...))
		if diff != "" && got.Status == "run" {
			diff = compareBetween(vm.Version, got.Frames, want)
		}
		if diff != "" {
			t.Errorf("thread %s: %s", name, diff)
		}
	}
}

// compareBetween compares a running thread's frames with its report as if
// it was caught between two calls of its innermost block, inside the
// method that yields: a C method, or one written in Ruby at any of the
// lines its instructions have (Between). It returns what differs, as
// compareFrames does.
func compareBetween(version string, got []rubyvm.Frame, want threadReport) string {
	if len(want.Top) < 2 {
		return compareFrames(version, got, append(want.Top, want.Frames...))
	}
	frames := append(slices.Clone(want.Top[1:]), want.Frames...)
	if len(got) > 0 && len(frames[0]) == 3 && slices.Contains(want.Between, got[0].Line) {
		leaf := slices.Clone(frames[0])
		leaf[2] = float64(got[0].Line)
		frames[0] = leaf
	}
	return compareFrames(version, got, frames)
}

// compareFrames checks rbscope's frames against [label, path, line] triples
// from caller_locations and returns what differs. caller_locations reports a
// C method with its bare name and its caller's path and line; rbscope names
// it Owner#name. Ruby frames are labelled as Ruby 3.4 labels them (see
// testruby.LabelMatches).
func compareFrames(version string, got []rubyvm.Frame, want [][]any) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d frames, caller_locations has %d\n got: %s\nwant: %s", len(got), len(want), fmtFrames(got), fmtWant(want))
	}
	for i, w := range want {
		label, _ := w[0].(string)
		g := got[i]
		if g.Kind == rubyvm.KindCFunc {
			bare := label[strings.LastIndexAny(label, "#.")+1:]
			ok := strings.HasSuffix(g.Label, "#"+bare) || strings.HasSuffix(g.Label, "."+bare)
			if w[1] == nil {
				ok = g.Label == label // a frame the program named in full
			}
			if !ok {
				return fmt.Sprintf("frame %d: C method %q, want %q", i, g.Label, label)
			}
			continue
		}
		path, _ := w[1].(string)
		line, _ := w[2].(float64)
		if g.Kind != rubyvm.KindRuby || !testruby.LabelMatches(version, g.Label, label) || g.Path != path || g.Line != int(line) {
			return fmt.Sprintf("frame %d: %s (%s:%d), want %s (%s:%d)", i, g.Label, g.Path, g.Line, label, path, int(line))
		}
	}
	return ""
}

func fmtFrames(fs []rubyvm.Frame) string {
	var b strings.Builder
	for i, f := range fs {
		if i > 8 {
			b.WriteString("...")
			break
		}
		fmt.Fprintf(&b, "[%s %s:%d] ", f.Label, f.Path, f.Line)
	}
	return b.String()
}

func fmtWant(ws [][]any) string {
	var b strings.Builder
	for i, w := range ws {
		if i > 8 {
			b.WriteString("...")
			break
		}
		fmt.Fprintf(&b, "%v ", w)
	}
	return b.String()
}

// TestStacksWhileThreadsComeAndGo reads, without pausing, a process whose
// threads are born and die all the time: every read must finish with the
// known threads intact and no error escaping as a crash.
func TestStacksWhileThreadsComeAndGo(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "stack_threads.rb", []string{"RBSCOPE_CHURN=1"}, "50")
			var rep selfReport
			p.WaitReport(t, &rep, 30*time.Second)
			_, vm := testvm.Attach(t, p.PID())
			for i := 0; i < 200; i++ {
				ths, err := vm.Threads()
				if err != nil {
					continue // a list torn by a dying thread: skipped, as a sampler would
				}
				names := map[string]bool{}
				for _, th := range ths {
					names[th.Name] = true
				}
				for _, n := range []string{"sleeper", "deep", "blocked"} {
					if !names[n] && err == nil {
						t.Fatalf("read %d: thread %q missing from %d threads", i, n, len(ths))
					}
				}
			}
			if p.Cmd.ProcessState != nil {
				t.Fatalf("the Ruby process died: %s", p.Output())
			}
		})
	}
}

// TestFrameBudget: with a frame budget, all stack reads of one call take
// at most that many control frames (a crash report reads a hostile
// process); a stack cut short keeps its innermost frames and says so.
func TestFrameBudget(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "stack_threads.rb", nil, fmt.Sprint(deepFrames))
	var rep selfReport
	p.WaitReport(t, &rep, 30*time.Second)
	vm, full := testvm.AttachAsleep(t, p.PID(), true)
	var cut []rubyvm.Thread
	if err := testvm.Paused(t, vm, func() (err error) { cut, err = vm.Threads(rubyvm.WithFrameBudget(100)); return err }); err != nil {
		t.Fatal(err)
	}
	total, said := 0, 0
	for i, th := range cut {
		total += len(th.Frames)
		if strings.Contains(th.Error, rubyvm.ErrFrameBudget.Error()) {
			said++
		}
		if n := len(th.Frames); n > 0 && i < len(full) && full[i].Name == th.Name && (len(full[i].Frames) < n || full[i].Frames[0] != th.Frames[0]) {
			t.Errorf("thread %q: innermost frame %v cut, %v whole", th.Name, th.Frames[0], full[i].Frames[0])
		}
	}
	if total > 100 || said == 0 {
		t.Errorf("budget 100: %d frames read, %d threads say the budget was spent", total, said)
	}
}
