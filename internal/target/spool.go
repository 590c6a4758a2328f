package target

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SnapshotOptions say where a snapshot's copy is kept.
type SnapshotOptions struct {
	// SpoolDir, when set, keeps the copy in an unnamed file there (gone
	// with rbscope, however it ends) mapped into memory, not in
	// rbscope's own anonymous memory: the kernel can write it out and
	// drop it as it needs, and rbscope's resident memory stays small when
	// its reader trims it (Snapshot.Trim). A copy the directory's disk
	// cannot hold is refused before the process stops (ErrNoRoom).
	SpoolDir string
}

// ErrNoRoom says the disk of SnapshotOptions.SpoolDir cannot hold the copy.
var ErrNoRoom = errors.New("not enough disk for the copy of the process")

// spoolMargin is the room a spool leaves free on its disk besides the
// copy.
const spoolMargin = 64 << 20

// openSpool opens an unnamed file in dir for a copy of need bytes, after
// checking that the disk holds them.
func openSpool(dir string, need int64) (*os.File, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("the copy's directory %s: %w", dir, err)
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < need+spoolMargin {
		return nil, fmt.Errorf("%w: the copy takes %d MB and %s has %d MB free: free some, or write the dump to another disk", ErrNoRoom, need>>20, dir, free>>20)
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), dir+"/(copy)"), nil
	}
	// A file system without unnamed files: a named one, unlinked at once.
	f, err := os.CreateTemp(dir, ".rbscope-copy-*")
	if err != nil {
		return nil, fmt.Errorf("a file for the copy in %s: %w", dir, err)
	}
	os.Remove(f.Name())
	return f, nil
}

// mapArena maps n bytes for a copy: of the spool file when there is one
// (grown to n), else anonymous memory; noReserve maps room that only
// what is copied takes.
func mapArena(n int64, spool *os.File, noReserve bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	fd := -1
	if spool != nil {
		if err := spool.Truncate(n); err != nil {
			return nil, fmt.Errorf("%w: growing the copy's file to %d MB: %v", ErrNoRoom, n>>20, err)
		}
		flags, fd = unix.MAP_SHARED, int(spool.Fd())
	}
	if noReserve {
		flags |= unix.MAP_NORESERVE
	}
	b, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping %d MB for the copy: %v", ErrSnapshotTooBig, n>>20, err)
	}
	return b, nil
}

// growArena grows the arena to n bytes, keeping what it holds.
func growArena(arena []byte, n int64, spool *os.File) ([]byte, error) {
	if spool != nil {
		if err := spool.Truncate(n); err != nil {
			return nil, fmt.Errorf("%w: growing the copy's file to %d MB: %v", ErrNoRoom, n>>20, err)
		}
	}
	grown, err := unix.Mremap(arena, int(n), unix.MREMAP_MAYMOVE)
	if err != nil {
		return nil, fmt.Errorf("%w: growing the copy to %d MB: %v", ErrSnapshotTooBig, n>>20, err)
	}
	return grown, nil
}

// Trim gives back the memory of the copy's pages that are in rbscope's
// resident memory, where the copy is kept in a spool file (the kernel
// keeps them in its page cache, or reads them again from the file, when
// next read); without one it does nothing. What was read from the
// snapshot stays valid.
func (s *Snapshot) Trim() {
	if s.spool == nil || len(s.arena) == 0 {
		return
	}
	unix.Madvise(s.arena, unix.MADV_DONTNEED) //nolint:errcheck // a hint
}
