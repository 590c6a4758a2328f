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
// component is refused. The open never blocks (O_NONBLOCK, so a FIFO does
// not wait for a writer) and anything but a regular file is refused. root is
// typically /proc/PID/root, whose contents the target's user may control.
func OpenInRoot(root, path string, follow bool) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	flags := uint64(unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY)
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	name := filepath.Join(root, path)
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err == unix.ELOOP && !follow {
		return nil, &os.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (a symbolic link)", ErrNotRegular)}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return regularFD(fd, name)
}

// OpenRegular opens path (a magic link such as /proc/PID/map_files/...
// included) without blocking, and only if it is a regular file.
func OpenRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return regularFD(fd, path)
}

// regularFD makes fd a blocking *os.File if it is a regular file, else
// closes it.
func regularFD(fd int, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w (mode %#o)", name, ErrNotRegular, st.Mode&unix.S_IFMT)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}
