package crash

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/crashreport"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/wire"
)

// TestRotatePerUser: one user's crashes rotate away only that user's
// oldest, never another's; and the store as a whole stays bounded.
func TestRotatePerUser(t *testing.T) {
	dir := t.TempDir()
	add := func(id string, uid int64) {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o700); err != nil {
			t.Fatal(err)
		}
		// A report is large (rotation must not need all of it to know
		// whose it is).
		b, _ := wire.EncodeCrashReport(&crashreport.Report{ID: id, UID: uid, Cmdline: []string{strings.Repeat("x", 100<<10)}})
		if err := os.WriteFile(filepath.Join(dir, id, "report.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	add("20260101T000000Z-1", 0) // root's, oldest of all
	for i := 2; i <= 6; i++ {
		add(fmt.Sprintf("20260101T00000%dZ-%d", i, i), 65534)
	}
	rotate(dir, 2, 65534)
	ids, _ := List(dir)
	want := []string{"20260101T000000Z-1", "20260101T000005Z-5", "20260101T000006Z-6"}
	if !slices.Equal(ids, want) {
		t.Errorf("after rotating uid 65534's crashes to 2: %v, want %v", ids, want)
	}
	// The whole store: at most rotateAllFactor times keep.
	for i := 0; i < 3*rotateAllFactor; i++ {
		add(fmt.Sprintf("20260102T%06dZ-%d", i, i), int64(i))
	}
	rotate(dir, 1, 12345)
	if ids, _ := List(dir); len(ids) > rotateAllFactor {
		t.Errorf("%d crashes kept, want at most %d", len(ids), rotateAllFactor)
	}
}

// TestExpandPatternKernelValues: a chained handler gets the %c, %d, %u and
// %g the kernel passed, not made-up ones; without them (an older install)
// an unlimited core and a dumpable process.
func TestExpandPatternKernelValues(t *testing.T) {
	argv := []string{"%c", "%d", "%u", "%g", "x%%y"}
	got := expandPattern(argv, Args{PID: 1 << 30, Kernel: true, CoreLimit: 0, Dumpable: 2, UID: 1000, GID: 1001})
	if want := []string{"0", "2", "1000", "1001", "x%y"}; !slices.Equal(got, want) {
		t.Errorf("with the kernel's values: %q, want %q", got, want)
	}
	got = expandPattern(argv[:2], Args{PID: 1 << 30})
	if want := []string{"18446744073709551615", "1"}; !slices.Equal(got, want) {
		t.Errorf("without them: %q, want %q", got, want)
	}
}

// TestTextSaysWhyCoreIsShort: a core that was stored only in part (the
// disk filled, the time ran out) says so in report.txt beside its file.
func TestTextSaysWhyCoreIsShort(t *testing.T) {
	r := crashreport.Report{ID: "x", Core: crashreport.Core{File: "core.zst", Bytes: 10, Stored: 4, NotStored: "writing core.zst failed (what it holds is cut short): no space left on device"}}
	var b strings.Builder
	WriteText(&b, &r)
	if !strings.Contains(b.String(), "core.zst (10 bytes read, 4 stored): writing core.zst failed") {
		t.Errorf("report.txt hides why the core is short:\n%s", b.String())
	}
}

// TestTextNamesLocks: report.txt says what each Ruby thread waited on and
// held, and the deadlock they were in, as stack prints them; report.json
// keeps them (read back, the same lines).
func TestTextNamesLocks(t *testing.T) {
	mutex := func(addr uint64) rubyvm.SyncObject { return rubyvm.SyncObject{Class: "Thread::Mutex", Addr: addr} }
	a := stacks.ThreadRef{Index: 0, TID: 11, Name: "a"}
	b := stacks.ThreadRef{Index: 1, TID: 12, Name: "b"}
	r := crashreport.Report{ID: "x", Ruby: &crashreport.Ruby{Version: "3.3.8", Threads: []stacks.Thread{
		{TID: 11, Name: "a", Ruby: true, Status: "sleep", Wait: &stacks.Wait{Kind: rubyvm.WaitMutex, Object: mutex(0x20), Owner: &b, OwnerKnown: true},
			Held: []stacks.Held{{Mutex: mutex(0x10), Waiters: []stacks.ThreadRef{b}}}},
		{TID: 12, Name: "b", Ruby: true, Status: "sleep", Wait: &stacks.Wait{Kind: rubyvm.WaitMutex, Object: mutex(0x10), Owner: &a, OwnerKnown: true},
			Held: []stacks.Held{{Mutex: mutex(0x20), Waiters: []stacks.ThreadRef{a}}}},
	}}}
	want := []string{
		`  - waiting for Thread::Mutex 0x0000000000000020 held by "b" tid=12`,
		`  - holds Thread::Mutex 0x0000000000000010; waited for by "b" tid=12`,
		`deadlock: "a" waits for Thread::Mutex 0x0000000000000020 held by "b", which waits for Thread::Mutex 0x0000000000000010 held by "a"`,
	}
	var text strings.Builder
	WriteText(&text, &r)
	js, err := wire.EncodeCrashReport(&r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := wire.ReadCrashReport(js)
	if err != nil {
		t.Fatal(err)
	}
	var again strings.Builder
	WriteText(&again, back)
	for _, w := range want {
		if !strings.Contains(text.String(), w+"\n") {
			t.Errorf("report.txt lacks %q:\n%s", w, text.String())
		}
	}
	if again.String() != text.String() {
		t.Errorf("read back from report.json:\n%s\nwant\n%s", again.String(), text.String())
	}
}
