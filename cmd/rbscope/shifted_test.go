package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// hooksBin is rbscope built with the tests' hooks (-tags
// rbscope_testhooks), built once.
var hooksBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(rbscopeBin), "rbscope-hooks")
	if out, err := exec.Command("go", "build", "-tags", "rbscope_testhooks", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building rbscope with the test hooks: %v\n%s", err, out)
	}
	return bin, nil
})

// shifted runs the hooks' rbscope with layout field moved by 8 bytes.
func shifted(t *testing.T, field string, args ...string) (string, string, int) {
	t.Helper()
	bin, err := hooksBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "RBSCOPE_TEST_SHIFT="+field+":8", "RBSCOPE_CACHE=off")
	return runCommand(t, cmd)
}

// stackFrames is what stack --json says of each thread: its frames
// (label, path, line) by its name ("main" for the main thread).
func stackFrames(t *testing.T, out string) map[string][]string {
	t.Helper()
	var doc struct {
		Threads []struct {
			Name   string `json:"name"`
			Main   bool   `json:"main"`
			Frames []struct {
				Label string `json:"label"`
				Path  string `json:"path"`
				Line  int    `json:"line"`
			} `json:"frames"`
		} `json:"threads"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stack --json: %v\n%s", err, out)
	}
	m := map[string][]string{}
	for _, th := range doc.Threads {
		var fs []string
		for _, f := range th.Frames {
			fs = append(fs, fmt.Sprintf("%s %s:%d", f.Label, f.Path, f.Line))
		}
		name := th.Name
		if th.Main {
			name = "main"
		}
		m[name] = fs
	}
	return m
}

// TestShiftedLayout reads each Ruby of the matrix through its own layout
// with one field moved by 8 bytes, as 4.0.6 moved vm->objspace (and every
// later field of rb_vm_struct) from 4.0.5, in an rbscope built with the
// tests' hooks: stack, threads, record, heap census and heap dump must each
// refuse in one line naming the Ruby, the field and what to do, or, where
// the command does not read the field, print what the right layout prints.
// None may print a wrong frame, label or object.
func TestShiftedLayout(t *testing.T) {
	fields := []struct {
		field, names string
		stack        bool // the stack needs it: every command refuses
	}{
		{"VMObjspace", "rb_vm_struct.objspace", false},
		{"ThreadSelf", "rb_thread_struct.self", true},
		{"ThreadName", "rb_thread_struct.name", true},
		{"ThreadEC", "rb_thread_struct.ec", true},
		// what the VM keeps of every iseq, method entry and class
		{"CFPIseq", "rb_control_frame_struct.iseq", true},
		{"IseqBody", "rb_iseq_struct.body", true},
		{"BodyLabel", "rb_iseq_constant_body.location.label", true},
		{"BodyPathObj", "rb_iseq_constant_body.location.pathobj", true},
		{"BodyIseqEncoded", "rb_iseq_constant_body.iseq_encoded", true},
		{"BodyIseqSize", "rb_iseq_constant_body.iseq_size", true},
		{"MEOwner", "rb_callable_method_entry_struct.owner", true},
		{"RBasicKlass", "RBasic.klass", true},
		{"ClassExtAttached", "rb_classext_struct.as.singleton_class.attached_object", true},
		{"ClassExtOrigin", "rb_classext_struct.origin_", true},
	}
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "layout_shift.rb", nil)
			var rep struct {
				PID     int    `json:"pid"`
				Version string `json:"version"`
			}
			p.WaitReport(t, &rep, 60*time.Second)
			pid := fmt.Sprint(p.PID())
			// what the right layout reads, once the main thread sleeps in
			// Billing::Invoice#total
			var want map[string][]string
			for deadline := time.Now().Add(30 * time.Second); ; {
				out, stderr, code := rbscope(t, "stack", "-p", pid, "--json")
				if code != 0 {
					t.Fatalf("stack: exit %d: %s", code, stderr)
				}
				want = stackFrames(t, out)
				if m := want["main"]; len(m) > 1 && strings.HasPrefix(m[1], "Billing::Invoice#total ") && len(want["ledger"]) > 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the program's threads never all slept where it says:\n%s", out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			dir := t.TempDir()
			for _, f := range fields {
				t.Run(f.field, func(t *testing.T) {
					refused := func(what, stderr string, code int) {
						t.Helper()
						// what to do: for a table, --force-version or the
						// Ruby's debug symbols; for DWARF, a matching one
						if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "Ruby "+rep.Version+": the layout does not fit this process") ||
							!strings.Contains(stderr, f.names+" at ") || !(strings.Contains(stderr, "--force-version") || strings.Contains(stderr, "debug information does not match")) {
							t.Errorf("%s: exit %d, want a refusal in one line naming Ruby %s, %s and what to do; stderr %q", what, code, rep.Version, f.names, stderr)
						}
					}
					noFile := func(what, file string) {
						t.Helper()
						if _, err := os.Stat(file); err == nil {
							t.Errorf("%s wrote %s, refused", what, file)
						}
					}

					out, stderr, code := shifted(t, f.field, "stack", "-p", pid, "--json")
					if code == 3 && strings.Contains(stderr, f.field+" is absent from this layout") {
						t.Skipf("this Ruby's layout has no %s", f.field)
					}
					if f.stack {
						refused("stack", stderr, code)
					} else if code != 0 {
						t.Errorf("stack (which reads no %s): exit %d: %s", f.field, code, stderr)
					} else if got := stackFrames(t, out); !reflect.DeepEqual(got, want) {
						t.Errorf("stack through the shifted layout: %v, through the right one %v", got, want)
					}

					out, stderr, code = shifted(t, f.field, "threads", "-p", pid)
					if f.stack {
						refused("threads", stderr, code)
					} else if code != 0 || !strings.Contains(out, "ledger") || !strings.Contains(out, "Kernel#sleep") {
						t.Errorf("threads: exit %d: %s\n%s", code, stderr, out)
					}

					rec := filepath.Join(dir, f.field+".collapsed")
					out, stderr, code = shifted(t, f.field, "record", "-p", pid, "--idle", "--duration", "0.5", "-f", "collapsed", "-o", rec)
					if f.stack {
						refused("record", stderr, code)
						noFile("record", rec)
					} else if b, err := os.ReadFile(rec); code != 0 || err != nil || !strings.Contains(string(b), "Billing::Invoice#total") {
						t.Errorf("record: exit %d: %s %s\n%s", code, stderr, out, b)
					} else {
						for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
							if !strings.Contains(line, "Kernel#sleep") {
								t.Errorf("record: a sample of sleeping threads not in Kernel#sleep: %q", line)
							}
						}
					}

					_, stderr, code = shifted(t, f.field, "heap", "census", "-p", pid)
					refused("heap census", stderr, code)

					dump := filepath.Join(dir, f.field+".json")
					_, stderr, code = shifted(t, f.field, "heap", "dump", "-p", pid, "-o", dump)
					refused("heap dump", stderr, code)
					noFile("heap dump", dump)
				})
			}
		})
	}
}
