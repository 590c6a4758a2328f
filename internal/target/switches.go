package target

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SwitchState is what the last context switch of a thread says of it.
type SwitchState uint8

// The states a SwitchWatch reports.
const (
	// SwitchNone: the thread has not been switched since the watch was
	// opened (its state is whatever it was then).
	SwitchNone SwitchState = iota
	// SwitchedIn: the thread was put on a CPU and is on it still.
	SwitchedIn
	// SwitchedOutPreempted: the thread was taken off its CPU while it
	// could still run: it waits for a CPU.
	SwitchedOutPreempted
	// SwitchedOut: the thread left its CPU to wait for something (sleep,
	// a lock, I/O); woken since, it waits for a CPU.
	SwitchedOut
	// ThreadExited: the thread has exited (its last switch is not
	// recorded); its TID may name another thread by now.
	ThreadExited
	// SwitchOther: the last record is another event of the thread (it
	// started a thread): its state is not known.
	SwitchOther
)

// SwitchWatch follows one thread's context switches as the kernel records
// them (a perf event with context_switch, writing into a ring buffer that
// rbscope maps): the last record tells, with no system call, whether the
// thread is on a CPU at this moment. A thread's CPU-time counter tells the
// same by moving between two readings, but reading the counter of a
// thread on another CPU makes the kernel interrupt that CPU to bring the
// count up to date, which costs about 10µs of CPU on a virtual machine.
//
// The ring is written backward and overwritten (the kernel never waits for
// rbscope to read it): its newest record is at its head.
type SwitchWatch struct {
	fd   int
	mem  []byte // the control page and the data pages, mapped read-only
	data []byte // the data pages
	page *unix.PerfEventMmapPage
}

// switchRecordLen is the length of a switch record as WatchSwitches asks
// for it: the header, and the sample ID of the TID, the time and the CPU.
const switchRecordLen = 8 + 8 + 8 + 8

// switchDataPages is how many pages the ring holds (a power of two): one
// holds 128 switches, and only the newest is read.
const switchDataPages = 1

// WatchSwitches opens a watch of thread tid's context switches. It fails
// where perf events are not allowed (perf_event_paranoid, seccomp, some
// containers), or on a kernel older than 4.7 (a ring written backward).
func (l *Live) WatchSwitches(tid int) (*SwitchWatch, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_DUMMY,
		// No samples: the switch records alone, each with the sample ID
		// below.
		Sample_type: unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU,
		// Task records say when the thread exits, which no switch
		// record does.
		Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv | unix.PerfBitContextSwitch |
			unix.PerfBitTask | unix.PerfBitSampleIDAll | unix.PerfBitWriteBackward,
	}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf switch events of tid %d: %w", tid, err)
	}
	pageSize := unix.Getpagesize()
	// Mapped without PROT_WRITE: the kernel then overwrites the oldest
	// records rather than wait for them to be read.
	mem, err := unix.Mmap(fd, 0, (1+switchDataPages)*pageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("map the switch events of tid %d: %w", tid, err)
	}
	w := &SwitchWatch{fd: fd, mem: mem, page: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0]))}
	off, size := w.page.Data_offset, w.page.Data_size
	if off == 0 { // a kernel before 4.1: the data follow the first page
		off, size = uint64(pageSize), uint64(switchDataPages*pageSize)
	}
	if off+size > uint64(len(mem)) || size == 0 || size&(size-1) != 0 {
		w.Close()
		return nil, fmt.Errorf("switch events of tid %d: ring of %d bytes at %d in a mapping of %d", tid, size, off, len(mem))
	}
	w.data = mem[off : off+size]
	return w, nil
}

// Last returns what the thread's last switch says of it, the CPU of that
// switch (-1 unless switched), and seq, which changes with every record
// (0 before the first). It makes no system call.
func (w *SwitchWatch) Last() (state SwitchState, cpu int, seq uint64) {
	size := uint64(len(w.data))
	word := func(off uint64) uint64 { // the ring wraps around its end
		var b [8]byte
		for i := range b {
			b[i] = w.data[(off+uint64(i))&(size-1)]
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	for try := 0; try < 4; try++ {
		head := atomic.LoadUint64(&w.page.Data_head)
		if head == 0 {
			return SwitchNone, -1, 0
		}
		hdr := word(head)
		typ, misc, n := uint32(hdr), uint16(hdr>>32), uint64(hdr>>48)
		c := -1
		if typ == unix.PERF_RECORD_SWITCH && n == switchRecordLen {
			c = int(int32(word(head + 24)))
		}
		// The kernel writes a record and then moves the head: a head that
		// moved by less than the ring while the record was read left it
		// whole (newer records go below it).
		if moved := head - atomic.LoadUint64(&w.page.Data_head); moved > size-min(max(n, switchRecordLen), size) {
			continue
		}
		switch {
		case typ == unix.PERF_RECORD_EXIT:
			return ThreadExited, -1, head
		case typ != unix.PERF_RECORD_SWITCH || n != switchRecordLen:
			return SwitchOther, -1, head
		case misc&unix.PERF_RECORD_MISC_SWITCH_OUT == 0:
			return SwitchedIn, c, head
		case misc&unix.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0:
			return SwitchedOutPreempted, c, head
		default:
			return SwitchedOut, c, head
		}
	}
	return SwitchOther, -1, atomic.LoadUint64(&w.page.Data_head)
}

// Close releases the watch.
func (w *SwitchWatch) Close() {
	if w.mem != nil {
		_ = unix.Munmap(w.mem)
		w.mem, w.data, w.page = nil, nil, nil
	}
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}
