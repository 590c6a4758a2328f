package target

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenInRoot: paths resolve inside the root, absolute symlinks and
// directory symlinks included; a final symlink is refused when not to be
// followed; a FIFO is refused without ever being opened (no IN_OPEN event,
// no wait for a writer).
func TestOpenInRoot(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "lib.so"), []byte("inside"), 0o644))
	must(os.Symlink(secret, filepath.Join(root, "abs")))               // absolute: means root+secret
	must(os.Symlink(filepath.Dir(secret), filepath.Join(root, "dir"))) // a directory outside, by name
	must(os.Symlink("/lib.so", filepath.Join(root, "inside")))         // absolute, resolves to root/lib.so
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))

	read := func(path string, follow bool) (string, error) {
		f, err := OpenInRoot(root, path, follow)
		if err != nil {
			return "", err
		}
		defer f.Close()
		buf := make([]byte, 64)
		n, err := f.Read(buf)
		return string(buf[:n]), err
	}
	if got, err := read("lib.so", false); got != "inside" {
		t.Errorf("a regular file: %q, %v", got, err)
	}
	if got, err := read("inside", true); got != "inside" {
		t.Errorf("an absolute symlink within the root: %q, %v", got, err)
	}
	for _, p := range []string{"abs", "dir/secret"} {
		if got, err := read(p, true); got == "host secret" || err == nil {
			t.Errorf("%s reached the host's file: %q, %v", p, got, err)
		}
	}
	if _, err := read("inside", false); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a final symlink not to be followed: %v, want ErrNotRegular", err)
	}

	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	must(err)
	defer unix.Close(in)
	_, err = unix.InotifyAddWatch(in, filepath.Join(root, "fifo"), unix.IN_OPEN)
	must(err)
	if _, err := read("fifo", true); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a FIFO: %v, want ErrNotRegular", err)
	}
	buf := make([]byte, 4096)
	if n, _ := unix.Read(in, buf); n > 0 {
		t.Error("the FIFO was opened before it was refused")
	}
	// The watch works: an open of the FIFO is seen.
	fd, err := unix.Open(filepath.Join(root, "fifo"), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	must(err)
	unix.Close(fd)
	if n, _ := unix.Read(in, buf); n <= 0 {
		t.Fatal("setup: inotify does not see the FIFO's opens")
	}
}

// TestRootOwned: a file another user owns, or may write, is refused.
func TestRootOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("run as root: the test makes files owned by other users")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		uid  int
		mode os.FileMode
		ok   bool
	}{
		{"root 0644", 0, 0o644, true},
		{"root 0664", 0, 0o664, false},
		{"root 0646", 0, 0o646, false},
		{"nobody 0644", 65534, 0o644, false},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, nil, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(os.Chmod(p, c.mode), os.Chown(p, c.uid, c.uid)); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		g, err := RootOwned(f)
		if ok := err == nil; ok != c.ok || (!ok && !errors.Is(err, ErrUntrusted)) {
			t.Errorf("%s: %v, want accepted %v", c.name, err, c.ok)
		}
		if g != nil {
			g.Close()
		}
		if _, err := f.Stat(); c.ok == false && !errors.Is(err, os.ErrClosed) {
			t.Errorf("%s: the refused file was left open", c.name)
		}
	}
}
