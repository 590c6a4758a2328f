package ebpfsample

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ringWaiter is how a Set sleeps between drains: until one of its
// processes' programs finds a quarter of its ring buffer waiting and wakes
// it, until a timeout, or until its context ends. It is an epoll instance
// of the rings (edge-triggered: one wake-up a program's wake), itself
// polled by the Go runtime, so that a Set asleep holds no thread.
type ringWaiter struct {
	f      *os.File
	rc     syscall.RawConn
	events []unix.EpollEvent
}

// newRingWaiter returns a waiter of no ring yet.
func newRingWaiter() (*ringWaiter, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll instance for the ring buffers: %w", err)
	}
	// Non-blocking, so that the runtime's poller takes it.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("epoll instance for the ring buffers: %w", err)
	}
	f := os.NewFile(uintptr(fd), "rbscope-rings")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("epoll instance for the ring buffers: %w", err)
	}
	return &ringWaiter{f: f, rc: rc, events: make([]unix.EpollEvent, 16)}, nil
}

// add makes the ring buffer map ring wake the waiter.
func (w *ringWaiter) add(ring int) error {
	var err error
	if cerr := w.rc.Control(func(fd uintptr) {
		err = unix.EpollCtl(int(fd), unix.EPOLL_CTL_ADD, ring, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(ring)})
	}); cerr != nil {
		return fmt.Errorf("waiting on a ring buffer: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("waiting on a ring buffer: %w", err)
	}
	return nil
}

// remove lets ring go (before it is closed: its memory mapping would keep
// it in the epoll instance).
func (w *ringWaiter) remove(ring int) {
	_ = w.rc.Control(func(fd uintptr) {
		_ = unix.EpollCtl(int(fd), unix.EPOLL_CTL_DEL, ring, nil)
	})
}

// wait returns when a ring woke the waiter, after d, or when ctx is done
// (interrupt, called once ctx is done, cuts a wait short).
func (w *ringWaiter) wait(ctx context.Context, d time.Duration) {
	_ = w.f.SetReadDeadline(time.Now().Add(d))
	if ctx.Err() != nil {
		return
	}
	_ = w.rc.Read(func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), w.events, 0)
		return n > 0 || err != nil && !errors.Is(err, unix.EINTR)
	})
}

// interrupt ends the current wait, if any.
func (w *ringWaiter) interrupt() { _ = w.f.SetReadDeadline(time.Now()) }

// close frees the epoll instance.
func (w *ringWaiter) close() { w.f.Close() }
