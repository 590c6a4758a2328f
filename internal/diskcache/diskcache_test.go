package diskcache

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func open(t *testing.T) *Cache {
	t.Helper()
	t.Setenv(Env, t.TempDir())
	c := Open("images")
	if c == nil {
		t.Fatal("no cache")
	}
	return c
}

// TestRoundTrip: a file stored is loaded back, written 0600 in a 0700
// directory, with no temporary file left behind.
func TestRoundTrip(t *testing.T) {
	c := open(t)
	if err := c.Store("abc123", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := c.Store("abc123", []byte("two")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Load("abc123")
	if err != nil || string(got) != "two" {
		t.Fatalf("Load: %q, %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(c.Dir(), "abc123"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v (%v), want 0600", fi.Mode(), err)
	}
	di, err := os.Stat(c.Dir())
	if err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v (%v), want 0700", di.Mode(), err)
	}
	ents, _ := os.ReadDir(c.Dir())
	if len(ents) != 1 {
		t.Errorf("%d files in the cache, want 1", len(ents))
	}
}

// TestBaseStaysReachable: the directories the cache makes above its own
// are 0755 whatever the umask (the test Rubies live beside the cache under
// /var/cache/rbscope and must stay reachable by every user), its own
// directory 0700.
func TestBaseStaysReachable(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := filepath.Join(t.TempDir(), "var", "cache", "rbscope")
	t.Setenv(Env, base)
	c := Open("images")
	if err := c.Store("abc123", []byte("one")); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]os.FileMode{
		filepath.Dir(filepath.Dir(base)): 0o755,
		filepath.Dir(base):               0o755,
		base:                             0o755,
		c.Dir():                          0o700,
	} {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", d, fi.Mode().Perm(), err, want)
		}
	}
}

// TestUntrusted: a file of the wrong mode or owner, a symbolic link, a
// directory others may write and a name that is no plain name are never
// read.
func TestUntrusted(t *testing.T) {
	c := open(t)
	if err := c.Store("good", []byte("x")); err != nil {
		t.Fatal(err)
	}
	path := func(n string) string { return filepath.Join(c.Dir(), n) }
	if err := os.WriteFile(path("loose"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path("loose"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(path("good"), path("link")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"loose", "link", "../images/good", ".tmp-good"} {
		if b, err := c.Load(n); err == nil {
			t.Errorf("Load(%q) = %q, want an error", n, b)
		}
	}
	if os.Geteuid() == 0 {
		if err := os.WriteFile(path("foreign"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path("foreign"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if b, err := c.Load("foreign"); !errors.Is(err, ErrUntrusted) {
			t.Errorf("a file of uid 65534: Load = %q, %v; want ErrUntrusted", b, err)
		}
	}
	if err := os.Chmod(c.Dir(), 0o777); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Load("good"); !errors.Is(err, ErrUntrusted) {
		t.Errorf("in a directory all may write: Load = %q, %v; want ErrUntrusted", b, err)
	}
	if err := c.Store("good", []byte("y")); !errors.Is(err, ErrUntrusted) {
		t.Errorf("in a directory all may write: Store = %v; want ErrUntrusted", err)
	}
}

// TestOff: RBSCOPE_CACHE=off turns the cache off, and a relative
// directory is refused.
func TestOff(t *testing.T) {
	for _, v := range []string{"off", "relative/dir"} {
		t.Setenv(Env, v)
		if c := Open("images"); c != nil {
			t.Errorf("%s=%s: cache in %s", Env, v, c.Dir())
		}
	}
	var c *Cache
	if _, err := c.Load("x"); err == nil {
		t.Error("a cache turned off loaded a file")
	}
	if err := c.Store("x", nil); err != nil {
		t.Error(err)
	}
}
