package heap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeDump writes dump to path, compressed as its name says, and returns
// it opened.
func writeDump(t *testing.T, path, dump string) *File {
	t.Helper()
	writeFile(t, path, dump)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// writeFile writes dump to path, compressed as its name says.
func writeFile(t *testing.T, path, dump string) {
	t.Helper()
	c, err := CompressionOf(path)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w, err := NewWriter(&b, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(dump)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCompressionOf(t *testing.T) {
	for _, c := range []struct {
		name string
		want Compression
		err  string
	}{
		{"heap.jsonl", Plain, ""},
		{"heap.json", Plain, ""},
		{"heap", Plain, ""},
		{"heap.jsonl.zst", Zstd, ""},
		{"HEAP.JSONL.ZST", Zstd, ""},
		{"heap.zst", Zstd, ""},
		{"heap.jsonl.gz", Gzip, ""},
		{"heap.jsonl.gz.zst", Plain, "two compression suffixes"},
		{"heap.jsonl.zst.gz", Plain, "two compression suffixes"},
		{"heap.jsonl.xz", Plain, "not .xz"},
		{"heap.jsonl.bz2", Plain, "not .bz2"},
		{"heap.jsonl.zstd", Plain, "not .zstd"},
		{"heap.jsonl.gzip", Plain, "not .gzip"},
	} {
		got, err := CompressionOf(c.name)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("CompressionOf(%q) = %v, %v; want %v, %q", c.name, got, err, c.want, c.err)
		}
	}
}

// TestCompressedDumpsRead: a dump reads the same plain, zstd and gzip,
// told by its magic bytes whatever its name says.
func TestCompressedDumpsRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dump := randomDump(rng, 2000, 6000, 10)
	want, err := Load(strings.NewReader(dump), "plain")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"d.jsonl.zst", "d.jsonl.gz"} {
		writeFile(t, filepath.Join(dir, name), dump)
		// The same bytes under a name that says nothing of them.
		b, _ := os.ReadFile(filepath.Join(dir, name))
		os.WriteFile(filepath.Join(dir, name+".json"), b, 0o600)
		for _, p := range []string{name, name + ".json"} {
			g, err := LoadFile(filepath.Join(dir, p))
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if g.Len() != want.Len() || g.NumRefs() != want.NumRefs() || len(g.Roots) != len(want.Roots) {
				t.Errorf("%s: %d objects, %d references, %d roots; plain: %d, %d, %d", p, g.Len(), g.NumRefs(), len(g.Roots), want.Len(), want.NumRefs(), len(want.Roots))
			}
		}
	}
}

// TestCompressedDumpsCut: a compressed dump cut anywhere is refused in
// one line that says it is cut short, never read as a shorter heap: Ruby's
// dump_all compressed (no end line of rbscope's to tell) as well as
// rbscope's own.
func TestCompressedDumpsCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	dir := t.TempDir()
	for _, dump := range []string{randomDump(rng, 3000, 9000, 10), oursDump()} {
		for _, name := range []string{"cut.jsonl.zst", "cut.jsonl.gz"} {
			path := filepath.Join(dir, name)
			writeFile(t, path, dump)
			whole, _ := os.ReadFile(path)
			if _, err := LoadFile(path); err != nil {
				t.Fatalf("%s whole: %v", name, err)
			}
			for _, cut := range []int{len(whole) - 1, len(whole) - 4, len(whole) / 2, 20, 5} {
				if err := os.WriteFile(path, whole[:cut], 0o600); err != nil {
					t.Fatal(err)
				}
				_, err := LoadFile(path)
				if err == nil || !strings.Contains(err.Error(), "cut short") || strings.Contains(err.Error(), "\n") {
					t.Errorf("%s cut at %d of %d bytes: %v, want one line saying it is cut short", name, cut, len(whole), err)
				}
			}
		}
	}
}

// TestZstdFrames: a zstd dump is written in frames with a seek table at
// its end, which zstd's own tool reads as the dump; Record reads any
// object's line from the frame that holds it; cut at a frame's end (a
// stream the decompressor finds whole), a dump of rbscope's is still
// refused by the reader (mid-line, or short of its end line).
func TestZstdFrames(t *testing.T) {
	defer func(n int) { zstdFrame = n }(zstdFrame)
	zstdFrame = 4096
	rng := rand.New(rand.NewPCG(9, 10))
	dump := randomDump(rng, 3000, 9000, 10)
	dir := t.TempDir()
	path := filepath.Join(dir, "frames.jsonl.zst")
	f := writeDump(t, path, dump)
	whole, _ := os.ReadFile(path)
	c, d, ok := seekTable(bytes.NewReader(whole), int64(len(whole)))
	if !ok || len(c) < 10 || d[len(d)-1] != int64(len(dump)) {
		t.Fatalf("seek table: %v, %d frames, %d bytes; want one, of %d bytes", ok, len(c)-1, d[len(d)-1], len(dump))
	}
	if zstdTool, err := exec.LookPath("zstd"); err == nil {
		out, err := exec.Command(zstdTool, "-dc", path).Output()
		if err != nil || string(out) != dump {
			t.Errorf("zstd -d: %d bytes, %v; want the dump's %d", len(out), err, len(dump))
		}
	}
	g, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < g.Len(); i += 7 {
		rec, err := g.Record(f, i)
		if err != nil || rec.Address != g.Address(i) {
			t.Fatalf("object %d (%#x): line of %#x, %v", i, g.Address(i), rec.Address, err)
		}
	}

	zstdFrame = 200
	writeFile(t, path, oursDump())
	whole, _ = os.ReadFile(path)
	c, _, ok = seekTable(bytes.NewReader(whole), int64(len(whole)))
	if !ok || len(c) < 3 {
		t.Fatalf("setup: %d frames", len(c)-1)
	}
	os.WriteFile(path, whole[:c[1]], 0o600)
	var he *Error
	if _, err := LoadFile(path); !errors.As(err, &he) {
		t.Errorf("rbscope's dump cut at a frame's end: %v, want the reader's refusal (mid-line, or cut short without its end line)", err)
	}
}

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after -= len(p); f.after < 0 {
		return 0, errors.New("no space left on device")
	}
	return len(p), nil
}

// TestCompressedWriteFails: a compressed writer whose file fails (a full
// disk) says so, at a Write or at the latest at Close, never silently.
func TestCompressedWriteFails(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	dump := []byte(randomDump(rng, 20000, 60000, 10))
	for _, c := range []Compression{Zstd, Gzip} {
		w, err := NewWriter(&failingWriter{after: 1000}, c)
		if err != nil {
			t.Fatal(err)
		}
		var werr error
		for i := 0; i < 20 && werr == nil; i++ {
			_, werr = w.Write(dump)
		}
		cerr := w.Close()
		if werr == nil && cerr == nil || !strings.Contains(fmt.Sprint(werr, cerr), "no space left") {
			t.Errorf("%v: write %v, close %v; want the file's error", c, werr, cerr)
		}
	}
}
