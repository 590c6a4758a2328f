package target

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is returned when a path a target names is not a regular
// file (a FIFO, a device, a directory): rbscope never opens those, since
// opening a FIFO blocks and reading a device can block or never end.
var ErrNotRegular = errors.New("not a regular file")

// OpenInRoot opens path for reading as if root were "/": every symlink on
// the way, absolute ones included, resolves inside root, and no magic link
// (/proc/self/...) is followed. With follow false a symlink as the last
// component is refused. Anything but a regular file is refused without
// being opened (a FIFO's open would wait for a writer, a device's has
// effects of its own). root is
// typically /proc/PID/root, whose contents the target's user may control.
func OpenInRoot(root, path string, follow bool) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	// O_PATH opens nothing: a device's or FIFO's open (which can rewind a
	// tape, arm a watchdog, wait for a writer) never runs. The regular
	// file it names is opened for reading only once fstat has said so.
	flags := uint64(unix.O_PATH | unix.O_CLOEXEC)
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	name := filepath.Join(root, path)
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) {
		// No safe way to resolve a path the target controls: refused.
		return nil, &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (openat2 needs Linux 5.6; rbscope does not follow a target's paths without it)", err)}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return reopenRegular(fd, name)
}

// OpenRegular opens path (a magic link such as /proc/PID/map_files/...
// included) only if it is a regular file, never opening anything else.
func OpenRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return reopenRegular(fd, path)
}

// reopenRegular takes an O_PATH descriptor and, if it names a regular
// file, returns that file opened for reading (the same inode: the
// descriptor pins it); it closes fd in every case.
func reopenRegular(fd int, name string) (*os.File, error) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if typ := st.Mode & unix.S_IFMT; typ != unix.S_IFREG {
		what := fmt.Sprintf("mode %#o", typ)
		if typ == unix.S_IFLNK {
			what = "a symbolic link"
		}
		return nil, fmt.Errorf("%s: %w (%s)", name, ErrNotRegular, what)
	}
	rfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(rfd), name), nil
}

// ErrUntrusted is returned for a file rbscope reads only from root: one
// that another user owns or may write.
var ErrUntrusted = errors.New("not owned and writable by root alone")

// RootOwned returns f if root owns it and no one else may write it, and
// otherwise closes it and returns ErrUntrusted.
func RootOwned(f *os.File) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	if st.Uid != 0 || st.Mode&0o022 != 0 {
		f.Close()
		return nil, fmt.Errorf("%s: %w (uid %d, mode %#o)", f.Name(), ErrUntrusted, st.Uid, st.Mode&0o777)
	}
	return f, nil
}
