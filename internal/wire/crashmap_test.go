package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/crashreport"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/unwind"
)

// TestCrashReportRoundTrip: a report written as report.json reads back
// to a report that writes the same bytes, every key filled.
func TestCrashReportRoundTrip(t *testing.T) {
	a := arch.All[0]
	regs := &target.Regs{Arch: a, V: make([]uint64, len(a.Regs)), TP: 0x7f00}
	for i := range regs.V {
		regs.V[i] = uint64(i + 1)
	}
	if a.TPIndex >= 0 {
		regs.V[a.TPIndex] = regs.TP
	}
	r := &crashreport.Report{ID: "20261123T120000Z-4242", Time: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), PID: 4242, TID: 4243,
		UID: 1000, Signal: 6, SignalName: "SIGABRT", Exe: "/usr/bin/ruby", Cmdline: []string{"ruby", "app.rb"},
		Fault: "SIGSEGV at 0x10 in f", Registers: regs,
		Native: []crashreport.NativeThread{{TID: 4243, PC: 0x7f01, SP: 0x7ff0, Error: "stopped", Frames: []unwind.Frame{
			{PC: 0x7f01, CFA: 0x7ff8, Size: 8, Object: "/lib/libc.so.6", Offset: 0x1201, Function: "raise", FuncOffset: 0x12},
			{PC: 0x7f02, Object: "/lib/libc.so.6", Offset: 0x3c050, Signal: &unwind.Signal{Number: 11, Addr: 16}},
			{PC: 0x7f03, Object: "[jit]"},
			{PC: 0x7f04, CFA: 0x8000, Size: 32, Object: "/lib/x.so", Offset: 0x40, Function: "f", File: "x.c", Line: 7},
		}}, {TID: 4242, PC: 1, SP: 2}},
		Ruby: &crashreport.Ruby{Version: "3.4.5", Threads: []stacks.Thread{{TID: 4242, Name: "main", Ruby: true, Main: true, Status: "run", GVL: true,
			Frames: []stacks.Frame{{Kind: stacks.KindCFunc, Label: "Fiddle::Pointer#[]"}, {Kind: stacks.KindRuby, Label: "boom", BaseLabel: "boom", Path: "app.rb", Line: 3}}},
			{TID: 4243, Ruby: true, Frames: []stacks.Frame{}, Error: "unreadable"}}},
		Proc: crashreport.Proc{Maps: "m", Status: "s", Limits: "l", FDs: map[string]string{"0": "/dev/null"}, Cgroup: "c", Cwd: "/",
			Environ: map[string]string{"HOME": "/root"}},
		Core:      crashreport.Core{File: "core.zst", Bytes: 10, Stored: 4, Truncated: true, NotStored: "n", ChainedTo: "x", ChainError: "e"},
		Notified:  []crashreport.Notification{{Kind: "webhook", To: "https://x", OK: false, Error: "refused"}},
		Problems:  []string{"p"},
		HandledIn: 1234 * time.Millisecond,
	}
	b, err := EncodeCrashReport(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadCrashReport(b)
	if err != nil {
		t.Fatal(err)
	}
	again, err := EncodeCrashReport(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, again) {
		t.Errorf("report.json read back writes\n%s\nwant\n%s", again, b)
	}
	if !bytes.HasPrefix(b, []byte("{\n  \"schema_version\": 2,")) {
		t.Errorf("report.json does not open with schema_version:\n%s", b)
	}
	for _, want := range []string{`"function": "raise"`, `"function_offset": "0x12"`, `"object": "/lib/libc.so.6"`, `"offset": "0x1201"`, `"pc": "0x7f01"`, `"cfa": "0x7ff8"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report.json lacks %s", want)
		}
	}
	if back.TopRubyFrame() != "" {
		t.Errorf("top Ruby frame of a crashing thread with no frame: %q", back.TopRubyFrame())
	}
	back.TID = 4242
	if got := back.TopRubyFrame(); got != "Fiddle::Pointer#[]" {
		t.Errorf("top Ruby frame %q", got)
	}
}

// TestCrashReportVersion1: a report stored before schema version 2 (the
// golden store's, from a real crash) reads with its native frames in the
// current spelling: pc, function and its offset, object, or the object's
// offset where no symbol held the pc.
func TestCrashReportVersion1(t *testing.T) {
	paths, _ := filepath.Glob("../../testdata/golden/crash-store/*/report.json")
	if len(paths) == 0 {
		t.Fatal("no stored report in testdata/golden/crash-store")
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("schema_version")) || !bytes.Contains(b, []byte(`"symbol": "raise+0x12"`)) {
		t.Fatal("the golden store's report is no longer version 1's: keep one that is")
	}
	r, err := ReadCrashReport(b)
	if err != nil {
		t.Fatal(err)
	}
	var frames []unwind.Frame
	for _, nt := range r.Native {
		if nt.TID == r.TID {
			frames = nt.Frames
		}
	}
	if len(frames) < 5 {
		t.Fatalf("crashing thread: %d native frames", len(frames))
	}
	if f := frames[1]; f.PC != 0x7f55f5ebcfb2 || f.Function != "raise" || f.FuncOffset != 0x12 || f.Object != "/usr/lib/x86_64-linux-gnu/libc.so.6" || f.File != "" || f.Name() != "raise+0x12" {
		t.Errorf("frame 1: %+v", f)
	}
	if f := frames[4]; f.Function != "" || f.Offset != 0x3c050 || f.Signal == nil || f.Signal.Addr != 16 || f.Name() != "libc.so.6+0x3c050" {
		t.Errorf("frame 4 (the signal frame): %+v", f)
	}
	if r.Registers == nil || r.Registers.PC() == 0 || r.HandledIn == 0 {
		t.Errorf("registers %v, handled in %v", r.Registers, r.HandledIn)
	}
	// A report of a version newer than this rbscope's is refused.
	if _, err := ReadCrashReport([]byte(`{"schema_version": 99, "id": "x"}`)); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("a newer report: %v", err)
	}
}
