package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestCoreArm64 runs rbscope core on the aarch64 core that qemu-user
// writes when testdata/core_crash.rb crashes itself on Debian's arm64
// Ruby, as a user with such a core would: --sysroot names the arm64
// system's files. The Ruby threads, the native frames of the crashing
// thread through its signal handler (--native, text), the census and a
// heap dump come out; without --sysroot the core is refused in one line
// naming it. (internal/rubyvm's TestArm64* compare all of it with what
// the program says of itself.)
func TestCoreArm64(t *testing.T) {
	rb := testruby.Arm64(t)
	var rep struct {
		PID int `json:"pid"`
	}
	core, _ := testruby.EmulatedCore(t, rb, "core_crash.rb", &rep, nil)

	doc := coreJSON(t, core, "--sysroot", rb.Sysroot, "--census")
	if doc.PID != rep.PID || doc.Signal != "SIGABRT" || doc.RubyVersion != "3.1.2" {
		t.Errorf("pid %d, signal %s, Ruby %s; want pid %d, SIGABRT, 3.1.2", doc.PID, doc.Signal, doc.RubyVersion, rep.PID)
	}
	var main, sleeper bool
	for _, th := range doc.Threads {
		if th.Main && len(th.Frames) > 1 && th.Frames[0].Label == "Process.kill" && th.Frames[1].Label == "Crasher#crash" {
			main = true
		}
		sleeper = sleeper || th.Name == "sleeper" && len(th.Frames) > 0 && th.Frames[0].Label == "Kernel#sleep"
	}
	if !main || !sleeper || len(doc.Census) == 0 {
		t.Errorf("main thread in Process.kill from Crasher#crash: %v, sleeper in Kernel#sleep: %v, %d census rows\n%+v", main, sleeper, len(doc.Census), doc.Threads)
	}

	stdout, stderr, code := rbscope(t, "core", core, "--sysroot", rb.Sysroot, "--native")
	if code != 0 {
		t.Fatalf("core --native: exit %d: %s", code, stderr)
	}
	for _, want := range []string{`^fault: +SIGSEGV at 0x\S+ in kill\+0xc \(libc\.so\.6\)`, `^ +\[signal trampoline\] `, `^ +rb_f_kill\+0x1cc `, `^ +__libc_start_main\+0x98 `, `^ +_start\+0x30 `} {
		if !regexpLine(stdout, want) {
			t.Errorf("core --native lacks a line matching %s:\n%s", want, stdout)
		}
	}

	dump := filepath.Join(t.TempDir(), "dump.json")
	if _, stderr, code := rbscope(t, "core", core, "--sysroot", rb.Sysroot, "--heap-dump", "-o", dump); code != 0 {
		t.Fatalf("core --heap-dump: exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(dump); err != nil || !strings.Contains(string(b), `"root":"global_tbl"`) || !strings.Contains(string(b), `"type":"STRING"`) {
		t.Errorf("the dump lacks strings or the global_tbl root (%v)", err)
	}

	_, stderr, code = rbscope(t, "core", core)
	if code != 1 || !strings.Contains(stderr, "--sysroot") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("without --sysroot: exit %d, %q; want one line naming --sysroot", code, stderr)
	}
}
