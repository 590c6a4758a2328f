package target

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
)

// ErrReplaced means the process ID no longer names the process rbscope
// attached to: that process exited and the ID was reused, or it ran
// execve and is another program now. Nothing is written to it.
var ErrReplaced = errors.New("the process was replaced since rbscope attached (exited and its PID reused, or exec'd)")

// identity pins what a PID named at Attach, so that every later write can
// check that it still names the same process image.
type identity struct {
	// mem is /proc/PID/mem opened at Attach. The kernel binds it to the
	// address space the process had then: after an exec or an exit (and
	// so before any reuse of the PID) it reads as end of file, and a write
	// through it can only reach that address space.
	mem *os.File
	// pidfd refers to the process itself, not to its number (-1 when the
	// kernel has no pidfd_open).
	pidfd int
	// start is the process's start time (clock ticks after boot, field 22
	// of /proc/PID/stat); exeDev and exeIno are its executable's.
	start          time.Duration
	exeDev, exeIno uint64
}

// pin records the identity of l's process; it runs once, in Attach.
func (l *Live) pin() error {
	l.id.pidfd = -1
	// The pins first, then what identifies the process: a re-exec between
	// the two then shows (the pinned memory reads as end of file).
	if fd, err := unix.PidfdOpen(l.pid, 0); err == nil {
		unix.CloseOnExec(fd)
		l.id.pidfd = fd
	}
	// Opened read-write when allowed: every write goes through it. A
	// reader without the right to write still gets the checks.
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", l.pid), os.O_RDWR, 0)
	if err != nil {
		f, err = os.Open(fmt.Sprintf("/proc/%d/mem", l.pid))
	}
	if err == nil {
		l.id.mem = f
	}
	start, err := startTime(l.pid)
	if err != nil {
		return err
	}
	l.id.start = start
	if st, err := os.Stat(fmt.Sprintf("/proc/%d/exe", l.pid)); err == nil {
		if s, ok := st.Sys().(*syscall.Stat_t); ok {
			l.id.exeDev, l.id.exeIno = s.Dev, s.Ino
		}
	}
	// The PID may have been reused between the listing of its mappings and
	// the opening of the pins: check that they name the same process.
	return l.CheckSame()
}

// unpin releases what pin opened.
func (l *Live) unpin() {
	if l.id.mem != nil {
		l.id.mem.Close()
		l.id.mem = nil
	}
	if l.id.pidfd >= 0 {
		unix.Close(l.id.pidfd)
		l.id.pidfd = -1
	}
}

// CheckSame returns ErrReplaced (wrapped) unless the PID still names the
// process rbscope attached to: the address space pinned at Attach is still
// in use (no exec, no exit), and the start time and executable are the
// ones recorded then. It returns ErrExited when the process is gone.
func (l *Live) CheckSame() error {
	if gone, pinned := l.pinnedSpaceGone(); pinned && gone {
		if procfs.Exited(l.pid) {
			return fmt.Errorf("pid %d: %w", l.pid, ErrExited)
		}
		return fmt.Errorf("pid %d: %w", l.pid, ErrReplaced)
	}
	start, err := startTime(l.pid)
	if err != nil {
		return fmt.Errorf("pid %d: %w", l.pid, ErrExited)
	}
	if start != l.id.start {
		return fmt.Errorf("pid %d (start time %d, was %d): %w", l.pid, start, l.id.start, ErrReplaced)
	}
	if l.id.exeIno != 0 {
		st, err := os.Stat(fmt.Sprintf("/proc/%d/exe", l.pid))
		if err != nil {
			return fmt.Errorf("pid %d: executable: %w", l.pid, ErrReplaced)
		}
		if s, ok := st.Sys().(*syscall.Stat_t); !ok || s.Dev != l.id.exeDev || s.Ino != l.id.exeIno {
			return fmt.Errorf("pid %d: another executable: %w", l.pid, ErrReplaced)
		}
	}
	return nil
}

// Gone reports whether the process rbscope attached to is no longer
// there to read: it exited, or ran execve (a server's hot restart: the
// same PID, another program, whose memory the VM read at Attach no longer
// describes), or exited and its PID now names another process. It is
// cheap enough for a sampler to ask every second: one read of the address
// space pinned at Attach, which reads as end of file once no process uses
// it. Where that could not be opened, CheckSame's other checks say (the
// start time and the executable; an exec of the same executable then goes
// unseen).
func (l *Live) Gone() bool {
	if gone, pinned := l.pinnedSpaceGone(); pinned {
		return gone
	}
	return l.CheckSame() != nil
}

// pinnedSpaceGone reports whether no process uses the address space
// pinned at Attach any more (after an exit or an exec); pinned is false
// where none could be pinned. Address 0 is never mapped: a live address
// space answers EIO there, one no process uses end of file. The system
// call itself, as os.File would allocate to wrap the EIO.
func (l *Live) pinnedSpaceGone() (gone, pinned bool) {
	if l.id.mem == nil {
		return false, false
	}
	var b [1]byte
	n, err := unix.Pread(int(l.id.mem.Fd()), b[:], 0)
	return n == 0 && err == nil, true
}

// startTime is when the process started (field 22 of /proc/PID/stat).
func startTime(pid int) (time.Duration, error) {
	st, err := procfs.ReadStat(pid, 0)
	if errors.Is(err, procfs.ErrBadStat) {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, ErrExited)
	}
	return st.Start(), nil
}

// GetFD returns a copy (close-on-exec) of the process's file descriptor
// fd, taken with pidfd_getfd from the process rbscope attached to (never
// from whatever now has its PID). The copy shares the open file with the
// process; the caller closes it.
func (l *Live) GetFD(fd int) (int, error) {
	if l.id.pidfd < 0 {
		return -1, fmt.Errorf("pid %d: the kernel has no pidfd_getfd (Linux 5.6 or later is needed)", l.pid)
	}
	nfd, err := unix.PidfdGetfd(l.id.pidfd, fd, 0) // always close-on-exec
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return -1, fmt.Errorf("pid %d: %w", l.pid, ErrExited)
		}
		return -1, fmt.Errorf("pid %d: take its file descriptor %d: %w", l.pid, fd, err)
	}
	return nfd, nil
}

// Wake sends signal sig to the process's main thread, after checking that
// the PID still names the process rbscope attached to.
func (l *Live) Wake(sig unix.Signal) error {
	if err := l.CheckSame(); err != nil {
		return err
	}
	return unix.Tgkill(l.pid, l.pid, sig)
}
