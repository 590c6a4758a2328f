package target

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Snapshot is a copy of a live process's writable memory, taken while all
// its threads stood still (Live.Snapshot), served as a Target: reads of
// writable memory come from the copy, as it was at that moment; reads of
// read-only mappings (code, constants), which cannot change, come from the
// process. The process runs again as soon as the copy is made, so what is
// decoded from a Snapshot holds together however long the decoding takes.
type Snapshot struct {
	l    *Live
	maps []Mapping
	tids []int
	regs map[int]Regs
	runs []snapRun // sorted by addr, disjoint
	// arena holds the runs' data, mapped outside Go's heap
	arena []byte
	// Bytes is how many bytes were copied; Paused how long the threads
	// stood still.
	Bytes  int64
	Paused time.Duration
}

// snapRun is a copied range; data is nil for a range that could not be
// read (reads of it fail).
type snapRun struct {
	addr uint64
	size uint64
	data []byte
}

func (r snapRun) end() uint64 { return r.addr + r.size }

// Limits of a snapshot.
const (
	// iovMax is how many ranges one process_vm_readv call copies (the
	// kernel's UIO_MAXIOV).
	iovMax = 1024
	// maxCopyIov bounds the bytes of one range of one call, so that a
	// short read costs little to retry.
	maxCopyIov = 64 << 20
	// maxGap is the longest run of untouched pages between touched ones
	// that is copied with them (one Ruby heap page).
	maxGap = 64 << 10
	// memHeadroom is the share of the machine's available memory a
	// snapshot may take.
	memHeadroom = 0.8
)

// ErrSnapshotTooBig says a snapshot would take more memory than the
// machine has available.
var ErrSnapshotTooBig = errors.New("not enough memory for a copy of the process")

// Snapshot stops every thread of the process, copies its writable memory
// (the pages the process has touched: resident or swapped, as
// /proc/PID/pagemap says, and every page of writable file mappings), and
// the stopped threads' registers, then lets it run. Memory is allocated
// and touched before the process stops, so the pause is the copy itself.
// A copy that would not fit in the machine's available memory is refused
// before the process stops (ErrSnapshotTooBig); a process that ends
// during the copy leaves no snapshot.
func (l *Live) Snapshot() (*Snapshot, error) {
	maps, err := l.Mappings()
	if err != nil {
		return nil, err
	}
	runs, err := l.touchedRuns(maps)
	if err != nil {
		return nil, err
	}
	need := runsBytes(runs)
	if avail, ok := availableMemory(); ok && float64(need) > memHeadroom*float64(avail) {
		return nil, fmt.Errorf("%w: pid %d has %d MB of writable memory in use, and %d MB are available (to this memory cgroup, or on the machine)", ErrSnapshotTooBig, l.pid, need>>20, avail>>20)
	}
	// One arena, with room for growth until the pause comes, warmed up
	// by a first copy of the running process: the kernel copies into
	// memory it has copied into before several times faster (measured on
	// a virtual machine: 48 MB in 50 ms cold, 6-15 ms warm).
	// The arena is mapped outside Go's heap: it is released at Close, and
	// does not make the garbage collector let the heap grow by its size.
	arena, err := mapArena(need + need/8 + 1<<20)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{l: l, regs: map[int]Regs{}, arena: arena}
	l.copyRuns(runs, arena, false) //nolint:errcheck // the warm-up's contents do not matter
	err = l.WhilePaused(nil, func(st *Stopped) error {
		start := time.Now()
		defer func() { s.Paused = time.Since(start) }()
		if s.maps, err = l.Mappings(); err != nil {
			return err
		}
		runs, err := l.touchedRuns(s.maps)
		if err != nil {
			return err
		}
		if n := runsBytes(runs); n > int64(len(arena)) {
			if avail, ok := availableMemory(); ok && float64(n-int64(len(arena))) > memHeadroom*float64(avail) {
				return fmt.Errorf("%w: pid %d grew to %d MB of writable memory in use", ErrSnapshotTooBig, l.pid, n>>20)
			}
			grown, err := mapArena(n)
			if err != nil {
				return err
			}
			unix.Munmap(s.arena) //nolint:errcheck // nothing points into it yet
			arena, s.arena = grown, grown
		}
		if err := l.copyRuns(runs, arena, true); err != nil {
			return err
		}
		s.runs = runs
		for tid := range st.Threads {
			s.tids = append(s.tids, tid)
			if r, err := st.Regs(tid); err == nil {
				s.regs[tid] = r
			}
		}
		sort.Ints(s.tids)
		return nil
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Bytes = runsBytes(s.runs)
	return s, nil
}

// mapArena maps n bytes of anonymous memory.
func mapArena(n int64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping %d MB for the copy: %v", ErrSnapshotTooBig, n>>20, err)
	}
	return b, nil
}

func runsBytes(runs []snapRun) int64 {
	var n int64
	for _, r := range runs {
		n += int64(r.size)
	}
	return n
}

// snapshotted reports whether a mapping's memory belongs in a snapshot:
// writable, and not a device's (whose reads may have effects).
func snapshotted(m Mapping) bool {
	if !strings.Contains(m.Perms, "w") {
		return false
	}
	if strings.HasPrefix(m.Path, "/dev/") && !strings.HasPrefix(m.Path, "/dev/shm/") && !strings.HasPrefix(m.Path, "/dev/zero") {
		return false
	}
	return m.Path != "[vvar]" && m.Path != "[vsyscall]"
}

// touchedRuns returns the ranges of the writable mappings the process has
// touched: for anonymous memory the pages /proc/PID/pagemap says are
// present or swapped (the others read as zeros), for file mappings every
// page (an untouched page holds the file's bytes).
func (l *Live) touchedRuns(maps []Mapping) ([]snapRun, error) {
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", l.pid))
	if err != nil {
		return nil, fmt.Errorf("pid %d: reading which pages are in use: %w", l.pid, err)
	}
	defer pm.Close()
	const page = 4096
	var runs []snapRun
	var m Mapping // the mapping being planned
	add := func(addr, size uint64) {
		// A short gap of untouched pages inside the same mapping is copied
		// too (as zeros): runs stay long, and an object spanning the gap
		// (a heap page with untouched slots) stays in one piece.
		if n := len(runs); n > 0 && runs[n-1].end() >= m.Start && addr-runs[n-1].end() <= maxGap &&
			addr+size-runs[n-1].addr <= maxCopyIov {
			runs[n-1].size = addr + size - runs[n-1].addr
			return
		}
		runs = append(runs, snapRun{addr: addr, size: size})
	}
	buf := make([]byte, 8*4096)
	for _, m = range maps {
		if !snapshotted(m) || m.End <= m.Start {
			continue
		}
		anon := m.Path == "" || m.Path == "[heap]" || m.Path == "[stack]" || strings.HasPrefix(m.Path, "[anon")
		if !anon {
			for a := m.Start; a < m.End; a += min(maxCopyIov, m.End-a) {
				add(a, min(maxCopyIov, m.End-a))
			}
			continue
		}
		for a := m.Start; a < m.End; {
			n := min((m.End-a)/page, uint64(len(buf)/8))
			got, err := pm.ReadAt(buf[:n*8], int64(a/page*8))
			if got < 8 {
				return nil, fmt.Errorf("pid %d: reading /proc/%d/pagemap at %#x: %v", l.pid, l.pid, a, err)
			}
			for i := 0; i+8 <= got; i += 8 {
				e := binary.LittleEndian.Uint64(buf[i:])
				if e&(1<<63|1<<62) != 0 { // present or swapped
					add(a+uint64(i/8)*page, page)
				}
			}
			a += uint64(got/8) * page
		}
	}
	return runs, nil
}

// copyRuns copies the runs into arena with process_vm_readv, iovMax
// ranges per call (paused: the copy that counts, not the warm-up). A range that cannot be read (a mapping gone) is kept
// without data; the process ending is an error.
func (l *Live) copyRuns(runs []snapRun, arena []byte, paused bool) error {
	off := uint64(0)
	for i := range runs {
		runs[i].data = arena[off : off+runs[i].size : off+runs[i].size]
		off += runs[i].size
	}
	local := make([]unix.Iovec, 0, iovMax)
	remote := make([]unix.RemoteIovec, 0, iovMax)
	for i := 0; i < len(runs); {
		local, remote = local[:0], remote[:0]
		j := i
		for ; j < len(runs) && j-i < iovMax; j++ {
			v := unix.Iovec{Base: &runs[j].data[0]}
			v.SetLen(len(runs[j].data))
			local = append(local, v)
			remote = append(remote, unix.RemoteIovec{Base: uintptr(runs[j].addr), Len: int(runs[j].size)})
		}
		if beforeCopyBatch != nil && paused {
			beforeCopyBatch()
		}
		n, err := unix.ProcessVMReadv(l.pid, local, remote, 0)
		if errors.Is(err, unix.ESRCH) || (err != nil && !l.hasThread(l.pid)) {
			return fmt.Errorf("pid %d ended while its memory was copied: %w", l.pid, ErrExited)
		}
		// The call stops at the first range it cannot read: mark that
		// one unreadable and go on after it.
		done := i
		for left := n; done < j && left >= int(runs[done].size); done++ {
			left -= int(runs[done].size)
		}
		if done == j {
			i = j
			continue
		}
		runs[done].data = nil
		i = done + 1
	}
	return nil
}

// beforeCopyBatch, when set (by tests), runs before each copy call.
var beforeCopyBatch func()

// availableMemory is memAvailable (a variable for tests).
var availableMemory = memAvailable

// memAvailable returns how much memory rbscope may still take: the
// machine's MemAvailable, or less if its memory cgroup's limit leaves less.
func memAvailable() (int64, bool) {
	avail, ok := meminfoAvailable()
	if room, cok := cgroupRoom(); cok && (!ok || room < avail) {
		return room, true
	}
	return avail, ok
}

// cgroupRoom returns the memory cgroup's limit less its usage (v2's
// memory.max and memory.current, or v1's limit_in_bytes and
// usage_in_bytes), for the cgroup /proc/self/cgroup names or, inside a
// cgroup namespace, the hierarchy's root.
func cgroupRoom() (int64, bool) {
	var v1, v2 string
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			if parts[0] == "0" && parts[1] == "" {
				v2 = parts[2]
			}
			for _, c := range strings.Split(parts[1], ",") {
				if c == "memory" {
					v1 = parts[2]
				}
			}
		}
	}
	type files struct{ dir, limit, usage string }
	var cands []files
	if v1 != "" {
		cands = append(cands, files{"/sys/fs/cgroup/memory" + v1, "memory.limit_in_bytes", "memory.usage_in_bytes"},
			files{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"})
	}
	if v2 != "" {
		cands = append(cands, files{"/sys/fs/cgroup" + v2, "memory.max", "memory.current"},
			files{"/sys/fs/cgroup", "memory.max", "memory.current"})
	}
	for _, c := range cands {
		lb, err1 := os.ReadFile(c.dir + "/" + c.limit)
		ub, err2 := os.ReadFile(c.dir + "/" + c.usage)
		if err1 != nil || err2 != nil {
			continue
		}
		limit, err1 := strconv.ParseInt(strings.TrimSpace(string(lb)), 10, 64)
		usage, err2 := strconv.ParseInt(strings.TrimSpace(string(ub)), 10, 64)
		if err1 != nil || err2 != nil || limit >= 1<<60 { // "max", or v1's "no limit"
			return 0, false
		}
		return max(limit-usage, 0), true
	}
	return 0, false
}

// meminfoAvailable returns MemAvailable from /proc/meminfo, in bytes.
func meminfoAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// find returns the index of the run holding addr, or -1.
func (s *Snapshot) find(addr uint64) int {
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].end() > addr })
	if i < len(s.runs) && addr >= s.runs[i].addr {
		return i
	}
	return -1
}

// Slice returns the copy of n bytes at addr without copying it again, if
// one run holds them all (do not modify it).
func (s *Snapshot) Slice(addr uint64, n int) ([]byte, bool) {
	i := s.find(addr)
	if i < 0 || s.runs[i].data == nil || addr+uint64(n) > s.runs[i].end() {
		return nil, false
	}
	o := addr - s.runs[i].addr
	return s.runs[i].data[o : o+uint64(n)], true
}

// errNotCopied refuses a read of memory the snapshot could not copy.
var errNotCopied = errors.New("memory not in the snapshot")

// ReadAt reads from the copy; what no run holds is zeros in writable
// anonymous memory the process had not touched, or read from the process
// in a read-only mapping.
func (s *Snapshot) ReadAt(p []byte, addr uint64) (int, error) {
	done := 0
	for done < len(p) {
		a := addr + uint64(done)
		if i := s.find(a); i >= 0 {
			r := s.runs[i]
			if r.data == nil {
				return done, errNotCopied
			}
			done += copy(p[done:], r.data[a-r.addr:])
			continue
		}
		m, ok := FindMapping(s.maps, a)
		if !ok {
			return done, errNotCopied
		}
		end := m.End
		if i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].addr > a }); i < len(s.runs) {
			end = min(end, s.runs[i].addr)
		}
		n := int(min(uint64(len(p)-done), end-a))
		if snapshotted(m) { // not touched: zeros
			clear(p[done : done+n])
			done += n
			continue
		}
		if !strings.Contains(m.Perms, "r") {
			return done, errNotCopied
		}
		got, err := s.l.ReadAt(p[done:done+n], a)
		done += got
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// PID returns the process's ID.
func (s *Snapshot) PID() int { return s.l.pid }

// Mappings returns the mappings as they were when the copy was made.
func (s *Snapshot) Mappings() ([]Mapping, error) { return s.maps, nil }

// Threads returns the threads that were stopped for the copy.
func (s *Snapshot) Threads() ([]int, error) { return s.tids, nil }

// Registers returns a thread's registers as the copy was made.
func (s *Snapshot) Registers(tid int) (Regs, bool) {
	r, ok := s.regs[tid]
	return r, ok
}

// Open opens a file as the process sees it.
func (s *Snapshot) Open(path string) (*os.File, error) { return s.l.Open(path) }

// Close releases the copy (what was read from it must not be used
// after); the process is not touched.
func (s *Snapshot) Close() error {
	s.runs = nil
	if s.arena == nil {
		return nil
	}
	err := unix.Munmap(s.arena)
	s.arena = nil
	return err
}
