package tempfiles

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveAll: a recorded file is removed, a forgotten one is kept.
func TestRemoveAll(t *testing.T) {
	dir := t.TempDir()
	kept, gone := filepath.Join(dir, "kept"), filepath.Join(dir, "gone")
	for _, p := range []string{kept, gone} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		Add(p)
	}
	Forget(kept)
	RemoveAll()
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("recorded temporary file still there: %v", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("forgotten file removed: %v", err)
	}
}
