package target

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
)

// Snapshot is a copy of a live process's writable memory, taken while all
// its threads stood still (Live.Snapshot), served as a Target: reads of
// memory the process had touched come from the copy, as it was at that
// moment; reads of anonymous memory it had not touched give zeros, as
// they would have; the rest (code, constants, file pages never written)
// is read from the process. The process runs again as soon as the copy
// is made, so what is decoded from a Snapshot holds together however long
// the decoding takes.
type Snapshot struct {
	l    *Live
	maps []Mapping
	tids []int
	regs map[int]Regs
	runs []snapRun // sorted by addr, disjoint
	bad  []uint64  // pages that could not be copied, sorted
	// arena holds the runs' data, mapped outside Go's heap
	arena []byte
	// Bytes is how many bytes were copied, Held the memory the copy takes
	// (its arena's resident pages: the gaps inside runs take none);
	// Paused how long the threads stood still in all (each stop from the
	// first thread's stop to the last one's resume), in Stops stops, the
	// longest of them Longest.
	Bytes, Held int64
	Paused      time.Duration
	Stops       int
	Longest     time.Duration
	// spool is the file the copy is kept in (nil: anonymous memory).
	spool *os.File
	// Method says how the copy was made: PreCopied or CopiedPaused.
	Method string
	// Fallback says why a copy was not pre-copied ("" when it was).
	Fallback string
}

// How a snapshot's copy is made (Snapshot.Method).
const (
	// PreCopied: copied while the process ran, then again, while it
	// stood still, only the pages it wrote since (the kernel's
	// soft-dirty bits): the pause does not grow with the memory.
	PreCopied = "pre-copied"
	// CopiedPaused: every page copied while the process stood still.
	CopiedPaused = "copied while paused"
)

// snapRun is a range of the copy: the pieces the process had touched,
// which are copied, and in anonymous memory the short gaps between them
// (zeros), so that what spans a gap (a heap page with untouched slots)
// stays in one slice. A run of a file mapping has no gaps: its untouched
// pages hold the file's bytes, read from the process.
type snapRun struct {
	addr, size uint64
	pieces     []piece // copied, sorted
	data       []byte  // the run's bytes in the arena
}

// piece is a touched range of a run.
type piece struct{ addr, size uint64 }

func (r snapRun) end() uint64 { return r.addr + r.size }

// Limits of a snapshot.
const (
	// iovMax is how many ranges one process_vm_readv call copies (the
	// kernel's UIO_MAXIOV).
	iovMax = 1024
	// maxCopyIov bounds the bytes of one range of one call.
	maxCopyIov = 64 << 20
	// maxCallBytes bounds the bytes of one call (the kernel copies at most
	// 2 GiB less a page per call).
	maxCallBytes = 1 << 30
	// maxGap is the longest gap of untouched anonymous pages kept inside
	// a run (as zeros, never read from the process).
	maxGap = 64 << 10
	// maxRun bounds a run.
	maxRun = 1 << 30
	// memHeadroom is the share of the machine's available memory a
	// snapshot may take.
	memHeadroom = 0.8
	page        = 4096
)

// ErrSnapshotTooBig says a snapshot would take more memory than the
// machine has available.
var ErrSnapshotTooBig = errors.New("not enough memory for a copy of the process")

// Snapshot stops every thread of the process, copies the writable memory
// it has touched (the pages /proc/PID/pagemap says are present or
// swapped) and the stopped threads' registers, then lets it run. The copy
// is planned, and its memory allocated and warmed up, before the process
// stops, so the pause is the copy itself. Untouched pages are never read
// (a read would make the kernel allocate them, charged to the process). A
// copy that would not fit in the memory available is refused before the
// process stops (ErrSnapshotTooBig); a process that ends during the copy
// leaves no snapshot.
//
// Where the kernel keeps soft-dirty bits, the copy is pre-copied instead
// (precopy.go): the pause is a scan of the page tables and the copy of
// what the process wrote meanwhile, not the copy of all of it.
func (l *Live) Snapshot() (*Snapshot, error) { return l.SnapshotWith(SnapshotOptions{}) }

// SnapshotWith is Snapshot with options.
func (l *Live) SnapshotWith(opts SnapshotOptions) (*Snapshot, error) {
	why := softDirtyMissing()
	if why == "" {
		s, err := l.precopy(opts)
		if !errors.Is(err, errNoPrecopy) {
			return s, err
		}
		why = err.Error()
	}
	s, err := l.snapshotPaused(opts)
	if s != nil {
		s.Fallback = why
	}
	return s, err
}

// planCopy reads the mappings and the pages a copy of them takes, and
// refuses, before the process stops, a copy kept in memory that would not
// fit in what is available (a spooled copy's disk is checked as its file
// is made).
func (l *Live) planCopy(opts SnapshotOptions) (maps []Mapping, runs []snapRun, need int64, err error) {
	if maps, err = l.Mappings(); err != nil {
		return nil, nil, 0, err
	}
	if runs, err = l.plan(maps); err != nil {
		return nil, nil, 0, err
	}
	need = runsBytes(runs)
	if avail, ok := availableMemory(); ok && opts.SpoolDir == "" && float64(need) > memHeadroom*float64(avail) {
		return nil, nil, 0, fmt.Errorf("%w: pid %d has %d MB of writable memory in use, and %d MB are available (to this memory cgroup, or on the machine)", ErrSnapshotTooBig, l.pid, need>>20, avail>>20)
	}
	return maps, runs, need, nil
}

// snapshotPaused is Snapshot with every page copied while the process
// stands still.
func (l *Live) snapshotPaused(opts SnapshotOptions) (*Snapshot, error) {
	_, runs, need, err := l.planCopy(opts)
	if err != nil {
		return nil, err
	}
	// One arena, with room for growth until the pause comes, warmed up
	// by a first copy of the running process: the kernel copies into
	// memory it has copied into before several times faster (measured on
	// a virtual machine: 48 MB in 50 ms cold, 6-15 ms warm).
	// The arena is mapped outside Go's heap: it is released at Close, and
	// does not make the garbage collector let the heap grow by its size.
	s := &Snapshot{l: l, regs: map[int]Regs{}, Method: CopiedPaused, Stops: 1}
	if opts.SpoolDir != "" {
		if s.spool, err = openSpool(opts.SpoolDir, need); err != nil {
			return nil, err
		}
	}
	if s.arena, err = mapArena(need+need/8+1<<20, s.spool, false); err != nil {
		s.Close()
		return nil, err
	}
	s.copy(runs, true) //nolint:errcheck // the warm-up's contents do not matter
	warm := runs
	if afterWarmup != nil {
		afterWarmup()
	}
	start := time.Now()
	err = l.WhilePaused(nil, func(st *Stopped) error {
		if s.maps, err = l.Mappings(); err != nil {
			return err
		}
		runs, err := l.plan(s.maps)
		if err != nil {
			return err
		}
		if n := runsBytes(runs); n > int64(len(s.arena)) {
			if avail, ok := availableMemory(); ok && s.spool == nil && float64(n-int64(len(s.arena))) > memHeadroom*float64(avail) {
				return fmt.Errorf("%w: pid %d grew to %d MB of writable memory in use", ErrSnapshotTooBig, l.pid, n>>20)
			}
			grown, err := growArena(s.arena, n, s.spool) // keeps the warm pages
			if err != nil {
				return err
			}
			s.arena = grown
		}
		if !samePlan(runs, warm) {
			// The warm-up laid the arena out otherwise: what it left in
			// the new plan's gaps must read as zeros.
			s.clearGaps(runs)
		}
		if err := s.copy(runs, false); err != nil {
			return err
		}
		s.runs = runs
		for tid := range st.Threads {
			s.tids = append(s.tids, tid)
			if r, err := st.Registers(tid); err == nil {
				s.regs[tid] = r
			}
		}
		sort.Ints(s.tids)
		return nil
	})
	s.Paused = time.Since(start)
	s.Longest = s.Paused
	if err != nil {
		s.Close()
		return nil, err
	}
	s.count()
	return s, nil
}

// count sets Bytes and Held once the copy is made.
func (s *Snapshot) count() {
	s.Bytes = 0
	for _, r := range s.runs {
		for _, pc := range r.pieces {
			s.Bytes += int64(pc.size)
		}
	}
	s.Bytes -= int64(len(s.bad)) * page
	s.Held = resident(s.arena)
}

// layOut gives each run its place in the arena, one after the other.
func (s *Snapshot) layOut(runs []snapRun) {
	off := uint64(0)
	for i := range runs {
		r := &runs[i]
		r.data = s.arena[off : off+r.size : off+r.size]
		off += r.size
	}
}

// samePlan reports whether two plans lay the arena out alike.
func samePlan(a, b []snapRun) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].addr != b[i].addr || a[i].size != b[i].size || !slices.Equal(a[i].pieces, b[i].pieces) {
			return false
		}
	}
	return true
}

// clearGaps zeros the bytes of the runs' gaps in the arena.
func (s *Snapshot) clearGaps(runs []snapRun) {
	s.layOut(runs)
	for _, r := range runs {
		at := r.addr
		for _, p := range r.pieces {
			clear(r.data[at-r.addr : p.addr-r.addr])
			at = p.addr + p.size
		}
		clear(r.data[at-r.addr:])
	}
}

// resident returns how many bytes of b are in memory (mincore).
func resident(b []byte) int64 {
	if len(b) == 0 {
		return 0
	}
	vec := make([]byte, (len(b)+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return int64(len(b))
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n * page
}

// runsBytes is what the runs take in the arena.
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
	return !strings.HasPrefix(m.Path, "/dev/") || strings.HasPrefix(m.Path, "/dev/shm/") || strings.HasPrefix(m.Path, "/dev/zero")
}

// anonymous reports whether a mapping is anonymous memory, whose
// untouched pages read as zeros.
func anonymous(m Mapping) bool {
	return m.Path == "" || m.Path == "[heap]" || m.Path == "[stack]" || strings.HasPrefix(m.Path, "[anon")
}

// plan returns the runs a copy of the writable mappings takes: the pages
// /proc/PID/pagemap says the process has touched (present or swapped), in
// runs that also span gaps of up to maxGap untouched anonymous pages.
func (l *Live) plan(maps []Mapping) ([]snapRun, error) {
	pm, err := l.openPagemap()
	if err != nil {
		return nil, err
	}
	defer pm.Close()
	var runs []snapRun
	for _, m := range maps {
		if !snapshotted(m) || m.End <= m.Start {
			continue
		}
		rb := runBuilder{anon: anonymous(m), runs: runs}
		if err := l.pagemap(pm, m, func(addr, e uint64) {
			if e&(pmPresent|pmSwapped) != 0 {
				rb.add(addr)
			}
		}); err != nil {
			return nil, err
		}
		runs = rb.runs
	}
	return runs, nil
}

// Bits of a pagemap entry.
const (
	pmPresent   = 1 << 63
	pmSwapped   = 1 << 62
	pmSoftDirty = 1 << 55
)

// runBuilder gathers the touched pages of one mapping, in address order,
// into runs: a run goes on over a page that follows it, and in anonymous
// memory over a gap of up to maxGap untouched pages, up to maxRun.
type runBuilder struct {
	anon    bool
	started bool // the mapping's first page has started a run
	runs    []snapRun
}

func (rb *runBuilder) add(addr uint64) {
	if n := len(rb.runs); n > 0 && rb.started {
		r := &rb.runs[n-1]
		gap := addr - r.end()
		if gap == 0 || (rb.anon && gap <= maxGap) {
			if addr+page-r.addr <= maxRun {
				r.size = addr + page - r.addr
				if p := &r.pieces[len(r.pieces)-1]; gap == 0 && p.size < maxCopyIov {
					p.size += page
				} else {
					r.pieces = append(r.pieces, piece{addr, page})
				}
				return
			}
		}
	}
	rb.started = true
	rb.runs = append(rb.runs, snapRun{addr: addr, size: page, pieces: []piece{{addr, page}}})
}

// openPagemap opens the process's page map.
func (l *Live) openPagemap() (*os.File, error) {
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", l.pid))
	if err != nil {
		return nil, fmt.Errorf("pid %d: reading which pages are in use: %w", l.pid, err)
	}
	return pm, nil
}

// pagemap calls fn with each page of mapping m and its pagemap entry, in
// address order.
func (l *Live) pagemap(pm *os.File, m Mapping, fn func(addr, entry uint64)) error {
	buf := make([]byte, 8*4096)
	for a := m.Start; a < m.End; {
		n := min((m.End-a)/page, uint64(len(buf)/8))
		got, err := pm.ReadAt(buf[:n*8], int64(a/page*8))
		if got < 8 {
			return fmt.Errorf("pid %d: reading /proc/%d/pagemap at %#x: %v", l.pid, l.pid, a, err)
		}
		for i := 0; i+8 <= got; i += 8 {
			fn(a+uint64(i/8)*page, binary.LittleEndian.Uint64(buf[i:]))
		}
		a += uint64(got/8) * page
	}
	return nil
}

// copy lays the runs out in the arena and copies their pieces into it
// with process_vm_readv: at most iovMax ranges and maxCallBytes per call.
// A page the kernel will not copy (a mapping shrunk, a file truncated) is
// kept as unreadable and the copy goes on after it; the process ending is
// an error. warmup is the copy made before the pause: its contents do not
// matter.
func (s *Snapshot) copy(runs []snapRun, warmup bool) error {
	s.layOut(runs)
	var all []dest
	for i := range runs {
		r := &runs[i]
		for _, p := range r.pieces {
			all = append(all, dest{p.addr, r.data[p.addr-r.addr : p.addr-r.addr+p.size]})
		}
	}
	s.bad = s.bad[:0]
	bad, err := s.l.copyPieces(all, !warmup)
	if !warmup {
		s.bad = bad
	}
	return err
}

// dest is a piece of the process's memory to copy and where it goes.
type dest struct {
	addr uint64
	buf  []byte
}

// copyPieces copies the pieces of all with process_vm_readv: at most
// iovMax ranges and maxCallBytes per call. A page the kernel will not
// copy (a mapping shrunk, a file truncated) is returned among bad and the
// copy goes on after it; the process ending is an error. hooked runs the
// tests' beforeCopyBatch before each call.
func (l *Live) copyPieces(all []dest, hooked bool) (bad []uint64, err error) {
	local := make([]unix.Iovec, 0, iovMax)
	remote := make([]unix.RemoteIovec, 0, iovMax)
	for i, skip := 0, uint64(0); i < len(all); {
		local, remote = local[:0], remote[:0]
		want := 0
		for j := i; j < len(all) && len(local) < iovMax && want < maxCallBytes; j++ {
			d := all[j]
			if j == i {
				d = dest{d.addr + skip, d.buf[skip:]}
			}
			if len(d.buf) == 0 {
				continue
			}
			v := unix.Iovec{Base: &d.buf[0]}
			v.SetLen(len(d.buf))
			local = append(local, v)
			remote = append(remote, unix.RemoteIovec{Base: uintptr(d.addr), Len: len(d.buf)})
			want += len(d.buf)
		}
		if beforeCopyBatch != nil && hooked {
			beforeCopyBatch()
		}
		n, err := unix.ProcessVMReadv(l.pid, local, remote, 0)
		if errors.Is(err, unix.ESRCH) || (err != nil && procfs.Exited(l.pid)) {
			return bad, fmt.Errorf("pid %d ended while its memory was copied: %w", l.pid, ErrExited)
		}
		if err != nil && !errors.Is(err, unix.EFAULT) {
			return bad, fmt.Errorf("pid %d: copying its memory: %w", l.pid, err)
		}
		n = max(n, 0)
		// Move past what was copied.
		for left := uint64(n); i < len(all) && left > 0; {
			rest := uint64(len(all[i].buf)) - skip
			if left < rest {
				skip += left
				break
			}
			left -= rest
			i, skip = i+1, 0
		}
		if n >= want || i >= len(all) {
			continue
		}
		// The call stopped short: at the 2 GiB limit of one call, or at a
		// page it could not read. Only the latter needs a page skipped.
		if err == nil && n > 0 {
			continue
		}
		pageAt := (all[i].addr + skip) &^ (page - 1)
		bad = append(bad, pageAt)
		next := pageAt + page - all[i].addr
		if next >= uint64(len(all[i].buf)) {
			i, skip = i+1, 0
		} else {
			skip = next
		}
	}
	return bad, nil
}

// beforeCopyBatch and afterWarmup, when set (by tests), run before each
// copy call of the paused copy, and after the warm-up copy.
var beforeCopyBatch, afterWarmup func()

// availableMemory is memAvailable (a variable for tests).
var availableMemory = memAvailable

// memAvailable returns how much memory rbscope may still take: the
// machine's MemAvailable, or less if its memory cgroup's limit leaves less.
func memAvailable() (int64, bool) {
	avail, ok := procfs.HostMemAvailable()
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

// find returns the index of the run holding addr, or -1.
func (s *Snapshot) find(addr uint64) int {
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].end() > addr })
	if i < len(s.runs) && addr >= s.runs[i].addr {
		return i
	}
	return -1
}

// Slice returns the copy of n bytes at addr without copying it again, if
// one run holds them all and none of them failed to copy (do not modify
// it).
func (s *Snapshot) Slice(addr uint64, n int) ([]byte, bool) {
	i := s.find(addr)
	if i < 0 || addr+uint64(n) > s.runs[i].end() || s.hasBad(addr, uint64(n)) {
		return nil, false
	}
	r := s.runs[i]
	o := addr - r.addr
	return r.data[o : o+uint64(n)], true
}

// hasBad reports whether a page of [addr, addr+n) failed to copy.
func (s *Snapshot) hasBad(addr, n uint64) bool {
	i := sort.Search(len(s.bad), func(i int) bool { return s.bad[i]+page > addr })
	return i < len(s.bad) && s.bad[i] < addr+n
}

// errNotCopied refuses a read of memory the snapshot could not copy.
var errNotCopied = errors.New("memory not in the snapshot")

// ReadAt reads from the copy; untouched anonymous memory reads as zeros,
// and the rest (read-only mappings, file pages never written) from the
// process.
func (s *Snapshot) ReadAt(p []byte, addr uint64) (int, error) {
	done := 0
	for done < len(p) {
		a := addr + uint64(done)
		if s.hasBad(a, 1) {
			return done, errNotCopied
		}
		// The longest stretch from a that one source serves.
		if i := s.find(a); i >= 0 {
			r := s.runs[i]
			n := int(min(uint64(len(p)-done), r.end()-a))
			if j := sort.Search(len(s.bad), func(j int) bool { return s.bad[j] > a }); j < len(s.bad) {
				n = int(min(uint64(n), s.bad[j]-a))
			}
			done += copy(p[done:done+n], r.data[a-r.addr:])
			continue
		}
		m, ok := FindMapping(s.maps, a)
		if !ok {
			return done, errNotCopied
		}
		end := m.End
		if i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].end() > a }); i < len(s.runs) {
			end = min(end, s.runs[i].addr)
		}
		n := int(min(uint64(len(p)-done), end-a))
		if snapshotted(m) && anonymous(m) { // never touched: zeros
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

// Registers implements Target: a thread's registers as the copy was made.
func (s *Snapshot) Registers(tid int) (Regs, error) {
	r, ok := s.regs[tid]
	if !ok {
		return Regs{}, fmt.Errorf("tid %d was not stopped for the copy: %w", tid, ErrNoRegisters)
	}
	return r, nil
}

// Open opens a file as the process sees it.
func (s *Snapshot) Open(path string) (*os.File, error) { return s.l.Open(path) }

// Close releases the copy (what was read from it must not be used
// after); the process is not touched.
func (s *Snapshot) Close() error {
	s.runs = nil
	var err error
	if s.arena != nil {
		err = unix.Munmap(s.arena)
		s.arena = nil
	}
	if s.spool != nil {
		s.spool.Close()
		s.spool = nil
	}
	return err
}
