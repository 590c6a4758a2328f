// Package diskcache keeps small files of derived data (what rbscope read
// of a Ruby image, by its build ID) in a directory only the user running
// rbscope can write: /var/cache/rbscope/<kind> for root, else
// $XDG_CACHE_HOME/rbscope/<kind> (~/.cache/rbscope/<kind>).
//
// A file is trusted only if it is a regular file, not a symbolic link,
// owned by the user running rbscope with mode 0600, in a directory owned by
// that user that no one else may write; anything else is ignored (never
// read, never removed). Files are written whole under a temporary name and
// renamed into place. Callers check what they read against what it
// describes before use: a file may be stale or damaged.
//
// The environment variable RBSCOPE_CACHE turns it off ("off") or names
// another directory (an absolute path, under which <kind> is made).
package diskcache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Env is the environment variable that turns the cache off or moves it.
const Env = "RBSCOPE_CACHE"

// MaxFile bounds the size of a file read from the cache.
const MaxFile = 4 << 20

// Cache is one kind of cached file. A nil *Cache is a cache turned off:
// it loads nothing and stores nothing.
type Cache struct {
	dir string
	uid int
}

// Open returns the cache of kind ("images"), or nil when RBSCOPE_CACHE is
// "off" or no directory can be chosen.
func Open(kind string) *Cache {
	uid := os.Geteuid()
	base := os.Getenv(Env)
	switch {
	case base == "off":
		return nil
	case base != "":
		if !filepath.IsAbs(base) {
			return nil
		}
	case uid == 0:
		base = "/var/cache/rbscope"
	default:
		base = os.Getenv("XDG_CACHE_HOME")
		if !filepath.IsAbs(base) {
			home, err := os.UserHomeDir()
			if err != nil || !filepath.IsAbs(home) {
				return nil
			}
			base = filepath.Join(home, ".cache")
		}
		base = filepath.Join(base, "rbscope")
	}
	return &Cache{dir: filepath.Join(base, kind), uid: uid}
}

// At returns the cache in the directory dir (an absolute path; nil
// otherwise), such as a kind under a directory the user named.
func At(dir string) *Cache {
	if !filepath.IsAbs(dir) {
		return nil
	}
	return &Cache{dir: filepath.Clean(dir), uid: os.Geteuid()}
}

// Dir returns the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// validName says whether name may be a file's name: a build ID in hex,
// and the like (lower-case letters, digits, '.', '_', '-'; no leading
// dot; at most 128 bytes).
func validName(name string) bool {
	if name == "" || len(name) > 128 || name[0] == '.' || name[0] == '_' || name[0] == '-' {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ErrUntrusted means a cache file or directory is not one rbscope made:
// another owner, a mode others may write, not a regular file.
var ErrUntrusted = errors.New("not trusted")

// Load returns the content of the file name, or an error when there is
// none or it is not trusted.
func (c *Cache) Load(name string) ([]byte, error) {
	if c == nil {
		return nil, os.ErrNotExist
	}
	if !validName(name) {
		return nil, fmt.Errorf("cache file name %q: %w", name, ErrUntrusted)
	}
	if err := c.trustedDir(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(c.dir, name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || int(st.Uid) != c.uid || fi.Mode().Perm() != 0o600 {
		return nil, fmt.Errorf("%s: %w (want a regular file of uid %d, mode 0600)", f.Name(), ErrUntrusted, c.uid)
	}
	if fi.Size() > MaxFile {
		return nil, fmt.Errorf("%s: %d bytes: %w", f.Name(), fi.Size(), ErrUntrusted)
	}
	return io.ReadAll(io.LimitReader(f, MaxFile))
}

// Store writes data as the file name: under a temporary name first, then
// renamed into place, so that a reader sees the old file or the new one.
func (c *Cache) Store(name string, data []byte) error {
	if c == nil {
		return nil
	}
	if !validName(name) {
		return fmt.Errorf("cache file name %q: %w", name, ErrUntrusted)
	}
	if err := c.makeDir(); err != nil {
		return err
	}
	if err := c.trustedDir(); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, ".tmp-"+name+"-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(c.dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// makeDir makes the cache's directory, 0700, and what is missing of the
// directories above it 0755: the base (/var/cache/rbscope) is shared with
// other users of that tree (the test Rubies are built under it and must
// stay reachable by every user), so only the kind's own directory is
// private.
func (c *Cache) makeDir() error {
	var missing []string
	for d := filepath.Dir(c.dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		// Chmod, not the umask's cut of Mkdir's mode: a umask of 077
		// would make the base private.
		if err := os.Chmod(missing[i], 0o755); err != nil {
			return err
		}
	}
	if err := os.Mkdir(c.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// trustedDir checks that the cache's directory is a directory (not a
// symbolic link) of the user running rbscope that no one else may write.
func (c *Cache) trustedDir() error {
	fi, err := os.Lstat(c.dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != c.uid || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s: %w (want a directory of uid %d that only it may write)", c.dir, ErrUntrusted, c.uid)
	}
	return nil
}
