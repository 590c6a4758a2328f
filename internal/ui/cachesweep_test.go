package ui

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSweepCache: the cache directory's parts lose what is older than the
// age limit, then their oldest files while they hold more than the size
// limit; a file in use, one changed within the last minute, a symbolic
// link and a file outside the parts stay.
func TestSweepCache(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	put := func(rel string, size int, age time.Duration) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	day := 24 * time.Hour
	oldDump := put("live/heap-1-old.json", 100, 20*day)
	oldInUse := put("live/heap-2-open.json", 100, 30*day)
	oldIndex := put("heap-index/aa.rbscope-index", 50, 15*day)
	mid := put("dropped/1-mid.raw.gz", 400, 5*day)
	recent := put("live/record-3.raw.gz", 300, 2*day)
	writing := put("live/heap-4-being-written.json", 900, 10*time.Second)
	elsewhere := put("mine/notes.txt", 10, 100*day)
	link := filepath.Join(dir, "live", "link")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(link, now.Add(-100*day), now.Add(-100*day))
	inUse := func(p string) bool { return p == oldInUse }

	// Age first: the two old files not in use go.
	n, freed, err := sweepCache(dir, CacheLimits{MaxAge: 14 * day}, now, inUse)
	if err != nil || n != 2 || freed != 150 {
		t.Fatalf("age limit: removed %d files, %d bytes, err %v; want 2, 150", n, freed, err)
	}
	// Size next: 100 (in use) + 400 + 300 + 900 (being written) = 1700
	// bytes; at most 1300 takes the oldest that may go (mid, 400).
	n, freed, err = sweepCache(dir, CacheLimits{MaxBytes: 1300}, now, inUse)
	if err != nil || n != 1 || freed != 400 {
		t.Fatalf("size limit: removed %d files, %d bytes, err %v; want 1, 400", n, freed, err)
	}
	var left []string
	for _, p := range []string{oldDump, oldInUse, oldIndex, mid, recent, writing, elsewhere, link} {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	want := []string{oldInUse, recent, writing, elsewhere, link}
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	// No limits: nothing goes.
	if n, _, _ := sweepCache(dir, CacheLimits{}, now.Add(1000*day), func(string) bool { return false }); n != 0 {
		t.Errorf("no limits removed %d files", n)
	}
}
