package alloctrace_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/alloctrace"
	"github.com/rbscope/rbscope/internal/rubyexec"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// workload is what testdata/alloc_workload.rb reports about itself.
type workload struct {
	PID      int    `json:"pid"`
	File     string `json:"file"`
	KeepMany int    `json:"keep_many"`
	KeepFew  int    `json:"keep_few"`
	Garbage  int    `json:"garbage"`
}

// start runs testdata/alloc_workload.rb on rb, waits for its report and
// opens its VM.
func start(t *testing.T, rb testruby.Ruby) (workload, *target.Live, *rubyvm.VM) {
	t.Helper()
	p := testruby.Start(t, rb, "alloc_workload.rb", nil)
	var w workload
	p.WaitReport(t, &w, 30*time.Second)
	tg, vm := testvm.Attach(t, p.PID())
	return w, tg, vm
}

// watchdogGone is Ruby code that gives a watchdog thread that was killed
// (Thread#kill only asks it to end) up to 2 s to be gone.
const watchdogGone = `Thread.list.select { |t| t.name.to_s.include?("alloc") }.each { |t| t.join(2) }`

// TestAlloc: every round the program keeps 1,000 Strings from one line and
// 100 from another and drops 10,000 from a third. The window's survivors
// must come from the first two lines in a 10:1 ratio, none from the third,
// none from rbscope's own code; afterwards tracing is off and nothing of
// rbscope's is left in the process.
func TestAlloc(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			w, tg, vm := start(t, rb)
			sess, err := alloctrace.Start(tg, vm, 1500*time.Millisecond, 20*time.Second, true)
			if vm.Layout.JobsOnStaleEC == 1 {
				if !errors.Is(err, rubyexec.ErrJobsUnsafe) {
					t.Fatalf("Ruby %s: got %v, want the refusal %v", vm.Version, err, rubyexec.ErrJobsUnsafe)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond)
			rep, err := sess.Stop()
			if err != nil {
				t.Fatal(err)
			}
			counts := map[int]uint64{}
			for _, s := range rep.Sites {
				if strings.Contains(s.File, "rbscope") || s.File == "eval" {
					t.Errorf("rbscope's own objects in the report: %+v", s)
				}
				if filepath.Base(s.File) == filepath.Base(w.File) && s.Class == "String" {
					counts[s.Line] += s.Count
				}
			}
			many, few := counts[w.KeepMany], counts[w.KeepFew]
			t.Logf("%s: %d from line %d, %d from line %d, %d from line %d; sites %+v", rb.Name, many, w.KeepMany, few, w.KeepFew, counts[w.Garbage], w.Garbage, rep.Sites)
			if few < 500 || many < 10*few-1000 || many > 10*few+1000 {
				t.Errorf("kept Strings: %d at line %d and %d at line %d, want a 10:1 ratio of at least 5,000:500", many, w.KeepMany, few, w.KeepFew)
			}
			if counts[w.Garbage] > 100 {
				t.Errorf("%d garbage Strings from line %d reported alive after a full GC", counts[w.Garbage], w.Garbage)
			}
			res, err := rubyexec.Run(tg, vm, watchdogGone+`; [ObjectSpace.allocation_sourcefile(Object.new), $__rbscope_alloc, $__rbscope_alloc_stopper, Thread.list.map(&:name).grep(/alloc/)]`, rubyexec.Options{Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if res.Value != "[nil, nil, nil, []]" {
				t.Errorf("after Stop: tracing, rbscope's globals and watchdog = %s, want [nil, nil, nil, []]", res.Value)
			}
		})
	}
}

// TestAllocAbort: an interrupted window turns tracing off too.
func TestAllocAbort(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	_, tg, vm := start(t, rb)
	sess, err := alloctrace.Start(tg, vm, time.Minute, 20*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alloctrace.Start(tg, vm, time.Minute, 20*time.Second, true); err == nil || !strings.Contains(err.Error(), "another rbscope alloc") {
		t.Errorf("a second window while one is open: %v, want a refusal", err)
	}
	if err := sess.Abort(); err != nil {
		t.Fatal(err)
	}
	res, err := rubyexec.Run(tg, vm, watchdogGone+`; [ObjectSpace.allocation_sourcefile(Object.new), $__rbscope_alloc, Thread.list.map(&:name).grep(/alloc/)]`, rubyexec.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Value != "[nil, nil, []]" {
		t.Errorf("after Abort: %s, want [nil, nil, []]", res.Value)
	}
}

// TestGroup checks the regrouping of sites.
func TestGroup(t *testing.T) {
	sites := []alloctrace.Site{
		{File: "a.rb", Line: 1, Class: "String", Count: 5, Bytes: 200},
		{File: "a.rb", Line: 1, Class: "Array", Count: 1, Bytes: 40},
		{File: "a.rb", Line: 2, Class: "String", Count: 7, Bytes: 280},
		{File: "b.rb", Line: 1, Class: "String", Count: 1, Bytes: 40},
	}
	for _, tc := range []struct {
		by   string
		want string
	}{
		{"file", "a.rb=13 b.rb=1"},
		{"line", "a.rb:2=7 a.rb:1=6 b.rb:1=1"},
		{"class", "String=13 Array=1"},
		{"site", "a.rb:1:String=5 a.rb:1:Array=1 a.rb:2:String=7 b.rb:1:String=1"},
	} {
		got, err := alloctrace.Group(sites, tc.by)
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, s := range got {
			parts = append(parts, s.Label()+"="+itoa(s.Count))
		}
		if g := strings.Join(parts, " "); g != tc.want {
			t.Errorf("by %s: %s, want %s", tc.by, g, tc.want)
		}
	}
	if _, err := alloctrace.Group(sites, "method"); err == nil {
		t.Error("grouping by method: no error")
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestAllocFork: a child the program forks during the window used to keep
// tracing allocations for good (the watchdog thread does not survive
// fork). The child now turns it off as it starts, while the parent's
// window goes on and ends with its report.
func TestAllocFork(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			if out, _ := exec.Command(rb.Bin, "-e", "print Process.respond_to?(:_fork)").Output(); string(out) != "true" {
				t.Skip("no Process._fork before Ruby 3.1: a child forked in the window keeps tracing")
			}
			dir := t.TempDir()
			trigger, childReport := filepath.Join(dir, "fork"), filepath.Join(dir, "child.json")
			p := testruby.Start(t, rb, "alloc_fork.rb", nil, trigger, childReport)
			var rep struct{ PID int }
			p.WaitReport(t, &rep, 30*time.Second)
			tg, vm := testvm.Attach(t, p.PID())
			sess, err := alloctrace.Start(tg, vm, 5*time.Second, 20*time.Second, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(trigger, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var child struct {
				PID           int
				Tracing       bool
				Rbscope       bool
				ParentTracing bool `json:"parent_tracing"`
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				b, err := os.ReadFile(childReport)
				if err == nil {
					if err := json.Unmarshal(b, &child); err != nil {
						t.Fatal(err)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("setup: the child did not report; output:\n%s", p.Output())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if child.PID == 0 || child.PID == p.PID() {
				t.Fatalf("setup: the report is not a child's: %+v", child)
			}
			if !child.ParentTracing {
				t.Fatalf("setup: the parent did not trace allocations when it forked: %+v", child)
			}
			if child.Tracing || child.Rbscope {
				t.Errorf("the child forked in the window traces allocations (%v) or has rbscope's window (%v)", child.Tracing, child.Rbscope)
			}
			if _, err := sess.Stop(); err != nil {
				t.Fatalf("the parent's window: %v", err)
			}
			res, err := rubyexec.Run(tg, vm, `ObjectSpace.allocation_sourcefile(Object.new)`, rubyexec.Options{Timeout: 20 * time.Second})
			if err != nil || res.Value != "nil" {
				t.Errorf("after Stop the parent traces: %v %+v", err, res)
			}
		})
	}
}
