package libc_test

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/libc"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestMuslPthreadTID reads each thread's TID and stack top from musl's
// struct pthread, from outside, at the offsets this package knows, and
// compares with the TID each thread of a C program built with musl-gcc got
// from gettid and the stack pthread_getattr_np gave it.
func TestMuslPthreadTID(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "root (to read another process's memory)")
	}
	if _, err := exec.LookPath("musl-gcc"); err != nil {
		testruby.Missing(t, "musl-gcc (make deps installs musl-tools)")
	}
	bin := filepath.Join(t.TempDir(), "threads")
	if out, err := exec.Command("musl-gcc", "-O1", "-pthread", "-o", bin, testruby.Testdata("libc/threads.c")).CombinedOutput(); err != nil {
		t.Fatalf("musl-gcc: %v\n%s", err, out)
	}
	pid, lines := testruby.StartReporting(t, bin)
	type thread struct {
		pt, top uint64
		tid     int
	}
	var threads []thread
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("bad line %q", line)
		}
		pt, err1 := strconv.ParseUint(f[0], 10, 64)
		tid, err2 := strconv.Atoi(f[1])
		top, err3 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("bad line %q", line)
		}
		threads = append(threads, thread{pt: pt, top: top, tid: tid})
	}
	l, err := target.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	maps, err := l.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	if got := libc.Name(maps); got != libc.Musl {
		t.Fatalf("Name = %s, want musl", got)
	}
	if len(threads) != 4 {
		t.Fatalf("%d threads reported, want 4", len(threads))
	}
	for _, th := range threads {
		var b [libc.MuslPthreadTID + 4]byte
		if err := target.ReadFull(l, b[:], th.pt); err != nil {
			t.Fatal(err)
		}
		if self := binary.LittleEndian.Uint64(b[libc.MuslPthreadSelf:]); self != th.pt {
			t.Errorf("pthread %#x: self is %#x", th.pt, self)
		}
		if tid := int(int32(binary.LittleEndian.Uint32(b[libc.MuslPthreadTID:]))); tid != th.tid {
			t.Errorf("pthread %#x: TID read %d, gettid said %d", th.pt, tid, th.tid)
		}
		if top, ok := libc.MuslStackTop(l, th.pt); top != th.top || ok != (th.top != 0) {
			t.Errorf("pthread %#x: stack top read %#x (ok=%v), pthread_getattr_np said %#x", th.pt, top, ok, th.top)
		}
	}
}

// TestName names the C library from the mappings of each one.
func TestName(t *testing.T) {
	for _, c := range []struct {
		paths []string
		want  libc.Kind
	}{
		{[]string{"/usr/bin/ruby", "/usr/lib/x86_64-linux-gnu/libc.so.6"}, libc.Glibc},
		{[]string{"/usr/local/bin/ruby", "/lib/ld-musl-x86_64.so.1"}, libc.Musl},
		{[]string{"/lib/libc.musl-x86_64.so.1", "/lib/ld-musl-x86_64.so.1"}, libc.Musl},
		{[]string{"/x/bin/ruby", "/usr/lib/x86_64-linux-musl/libc.so"}, libc.Musl},
		{[]string{"/x/bin/ruby"}, libc.Unknown},
	} {
		var maps []target.Mapping
		for _, p := range c.paths {
			maps = append(maps, target.Mapping{Path: p})
		}
		if got := libc.Name(maps); got != c.want {
			t.Errorf("Name(%v) = %s, want %s", c.paths, got, c.want)
		}
	}
}
