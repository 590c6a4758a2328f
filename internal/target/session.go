package target

import (
	"errors"
	"fmt"
)

// Stopped is a live target with some of its threads standing still: the
// session Live.WhilePaused hands to its do function, valid only until do
// returns. What it offers runs on the tracer thread without taking the
// target's lock again: reads, writes, and system calls and function calls
// injected into a stopped thread.
type Stopped struct {
	l     *Live
	ended bool // do has returned: the threads run again
	// Threads are the threads that stand still (those that had ended when
	// they were to stop are not among them).
	Threads map[int]bool
}

// PID is the process the session holds.
func (s *Stopped) PID() int { return s.l.pid }

// Live is the target the session holds.
func (s *Stopped) Live() *Live { return s.l }

// ReadAt reads the process's memory (Live.ReadAt).
func (s *Stopped) ReadAt(p []byte, addr uint64) (int, error) { return s.l.ReadAt(p, addr) }

// WriteAt writes p to the process's memory at addr, through the
// /proc/PID/mem opened at Attach, after checking that the PID still names
// that process (CheckSame): an exec'd process or a reused PID is never
// written to. Mappings need not be writable.
func (s *Stopped) WriteAt(p []byte, addr uint64) (int, error) {
	if s.ended {
		return 0, errEnded
	}
	return s.l.writeAt(p, addr)
}

// errEnded refuses what a session offers once its do has returned.
var errEnded = errors.New("the stopped-target session has ended: its threads run again")

// Registers returns the general registers of tid, a thread that stands
// still.
func (s *Stopped) Registers(tid int) (Regs, error) {
	if s.ended {
		return Regs{}, errEnded
	}
	if !s.Threads[tid] {
		return Regs{}, fmt.Errorf("tid %d is not stopped: %w", tid, ErrNoRegisters)
	}
	r, err := ptraceRegs(tid)
	if err != nil {
		return Regs{}, fmt.Errorf("registers of tid %d: %w", tid, err)
	}
	return r, nil
}
