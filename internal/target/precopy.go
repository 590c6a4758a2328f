package target

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The pre-copy: Snapshot copies the process's writable memory while it
// runs, with the kernel's soft-dirty bits cleared first (clear_refs), then
// stops it for a moment to read which pages it wrote since (pagemap) and
// clear the bits again, copies those, and so on a few rounds, until what
// is left is small; the last stop copies what was written since the round
// before. The pause so costs a scan of the page tables and the copy of
// what the process wrote in the last round, not the copy of all of it (as
// CRIU's iterative pre-dump does).
//
// Each writable mapping has a region of the arena of its own, addressed
// by the page's offset in the mapping, with room to grow, so that a page
// copied in one round keeps its place in the next; a page's copy is
// valid until the process writes it again (its soft-dirty bit) or the
// mapping moves.

// errNoPrecopy says the pre-copy cannot be made here; Snapshot copies
// while paused instead, and says why.
var errNoPrecopy = errors.New("no pre-copy")

// Limits of the pre-copy.
const (
	// maxPrecopyRounds bounds the rounds copied while the process runs
	// after the first.
	maxPrecopyRounds = 3
	// smallRound is the dirty memory below which no further round is
	// worth a stop: the last stop copies it.
	smallRound = 4 << 20
	// maxPrecopyVA bounds the address space of the writable mappings the
	// arena reserves room for (mapped without reserving memory: only what
	// is copied takes any).
	maxPrecopyVA = 1 << 42
)

// softDirtyMissing says why the kernel's soft-dirty bits cannot be used
// ("" when they can): checked once, on a page of rbscope's own, which it
// writes, clears and writes again. A kernel without CONFIG_MEM_SOFT_DIRTY
// (arm64's, for one) accepts the clear and never sets the bit: a page
// would never read as written, so the check must see it set.
var softDirtyMissing = sync.OnceValue(checkSoftDirty)

func checkSoftDirty() string {
	b, err := unix.Mmap(-1, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Sprintf("no page to check the kernel's soft-dirty bits on: %v", err)
	}
	defer unix.Munmap(b) //nolint:errcheck
	self := os.Getpid()
	entry := func() (uint64, error) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", self))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		var e [8]byte
		if _, err := f.ReadAt(e[:], int64(uintptr(unsafe.Pointer(&b[0]))/page*8)); err != nil {
			return 0, err
		}
		return uint64(e[0]) | uint64(e[1])<<8 | uint64(e[2])<<16 | uint64(e[3])<<24 | uint64(e[4])<<32 | uint64(e[5])<<40 | uint64(e[6])<<48 | uint64(e[7])<<56, nil
	}
	b[0] = 1
	if err := clearSoftDirty(self); err != nil {
		return fmt.Sprintf("the kernel's soft-dirty bits cannot be cleared: %v", err)
	}
	clean, err1 := entry()
	b[0] = 2
	dirty, err2 := entry()
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Sprintf("the page map cannot be read: %v", err)
	}
	if clean&pmSoftDirty != 0 || dirty&pmSoftDirty == 0 || clean&pmPresent == 0 {
		return "the kernel keeps no soft-dirty bits (CONFIG_MEM_SOFT_DIRTY)"
	}
	return ""
}

// clearSoftDirty clears the soft-dirty bits of every page of process pid.
func clearSoftDirty(pid int) error {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/clear_refs", pid), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("4")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// region is a writable mapping's place in the arena.
type region struct {
	start uint64 // the mapping's start
	size  uint64 // the room kept for it, from start
	off   uint64 // its offset in the arena
	// valid holds a bit a page: its copy is the page as the process has
	// it, unless the page's soft-dirty bit says it wrote it since.
	valid []uint64
}

func (r *region) isValid(i uint64) bool { return r.valid[i/64]&(1<<(i%64)) != 0 }
func (r *region) setValid(i uint64)     { r.valid[i/64] |= 1 << (i % 64) }

// precopier is the state of a pre-copy between its rounds.
type precopier struct {
	l       *Live
	s       *Snapshot
	regions map[uint64]*region // by the mapping's start
	next    uint64             // the arena's first offset not given out
}

// roundWork is what a round found to do: the pages to copy (present or
// swapped, whose copy is not valid or that the process wrote since) and
// the pages to zero (copied once, gone since).
type roundWork struct {
	copy, zero []pageRef
	bytes      int64
	// runs, of the last round, are the snapshot's: the pages present
	// or swapped, with gaps of untouched anonymous pages.
	runs []snapRun
}

// pageRef is a page of a region.
type pageRef struct {
	r    *region
	addr uint64
}

// off is the page's offset in the arena.
func (p pageRef) off() uint64 { return p.r.off + p.addr - p.r.start }

// precopy makes the snapshot by pre-copying (see above); errNoPrecopy,
// wrapped with why, when it cannot be made here.
func (l *Live) precopy(opts SnapshotOptions) (*Snapshot, error) {
	maps, _, need, err := l.planCopy(opts)
	if err != nil {
		return nil, err
	}
	var va uint64
	for _, m := range maps {
		if snapshotted(m) && m.End > m.Start {
			va += regionSize(m)
		}
	}
	reserve := 2*va + 1<<30
	if reserve > maxPrecopyVA {
		return nil, fmt.Errorf("%w: the writable mappings span %d GB", errNoPrecopy, va>>30)
	}
	s := &Snapshot{l: l, regs: map[int]Regs{}, Method: PreCopied}
	fail := func(err error) (*Snapshot, error) {
		s.Close()
		return nil, err
	}
	if opts.SpoolDir != "" {
		if s.spool, err = openSpool(opts.SpoolDir, need); err != nil {
			return fail(err)
		}
	}
	if s.arena, err = mapArena(int64(reserve), s.spool, true); err != nil {
		return fail(fmt.Errorf("%w: reserving %d GB of address space for the copy: %v", errNoPrecopy, reserve>>30, err))
	}
	pc := &precopier{l: l, s: s, regions: map[uint64]*region{}}
	// The first round: every page, while the process runs.
	if err := clearSoftDirty(l.pid); err != nil {
		return fail(fmt.Errorf("%w: clearing pid %d's soft-dirty bits: %v", errNoPrecopy, l.pid, err))
	}
	w, err := pc.scan(maps, false)
	if err != nil {
		return fail(err)
	}
	if err := pc.apply(w, false); err != nil {
		return fail(err)
	}
	if afterWarmup != nil {
		afterWarmup()
	}
	// Rounds of what was written meanwhile, each read and cleared in a
	// stop, copied while the process runs. (The mappings are read before
	// the stop: one mapped meanwhile is the next round's.)
	// A round that left no less to copy than the one before (a process
	// writing as fast as it is copied) ends them: the last stop copies
	// what is left.
	for round, prev := 0, int64(math.MaxInt64); round < maxPrecopyRounds && w.bytes >= smallRound && w.bytes < prev; round++ {
		prev = w.bytes
		maps, err := l.Mappings()
		if err != nil {
			return fail(err)
		}
		err = pc.stop(func(*Stopped) error {
			var err error
			if w, err = pc.scan(maps, false); err != nil {
				return err
			}
			if err := clearSoftDirty(l.pid); err != nil {
				return fmt.Errorf("%w: clearing pid %d's soft-dirty bits: %v", errNoPrecopy, l.pid, err)
			}
			return nil
		})
		if err != nil {
			return fail(err)
		}
		if err := pc.apply(w, false); err != nil {
			return fail(err)
		}
	}
	// The last stop: what was written since, and the threads' registers.
	err = pc.stop(func(st *Stopped) error {
		if s.maps, err = l.Mappings(); err != nil {
			return err
		}
		w, err := pc.scan(s.maps, true)
		if err != nil {
			return err
		}
		if err := pc.apply(w, true); err != nil {
			return err
		}
		s.runs = w.runs
		for tid := range st.Threads {
			s.tids = append(s.tids, tid)
			if r, err := st.Registers(tid); err == nil {
				s.regs[tid] = r
			}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	sort.Ints(s.tids)
	s.count()
	return s, nil
}

// stop runs read with every thread stopped, counting the stop.
func (pc *precopier) stop(read func(*Stopped) error) error {
	start := time.Now()
	err := pc.l.WhilePaused(nil, read)
	d := time.Since(start)
	pc.s.Stops++
	pc.s.Paused += d
	pc.s.Longest = max(pc.s.Longest, d)
	return err
}

// regionSize is the room a mapping's region keeps: twice its size, so
// that a heap growing at its end keeps its region (and its pages' copies)
// from one round to the next.
func regionSize(m Mapping) uint64 { return 2 * (m.End - m.Start) }

// region returns mapping m's region, made (with no page valid) where it
// has none or has outgrown it.
func (pc *precopier) region(m Mapping) (*region, error) {
	r := pc.regions[m.Start]
	if r != nil && m.End-m.Start <= r.size {
		return r, nil
	}
	size := regionSize(m)
	if pc.next+size > uint64(len(pc.s.arena)) {
		return nil, fmt.Errorf("%w: the writable mappings grew past the room reserved for them", errNoPrecopy)
	}
	r = &region{start: m.Start, size: size, off: pc.next, valid: make([]uint64, (size/page+63)/64)}
	pc.next += size
	pc.regions[m.Start] = r
	return r, nil
}

// scan reads which pages of the writable mappings are to be copied: those
// present (or swapped) whose copy is not valid or that the process wrote
// since (soft-dirty); and those to zero: copied once, gone since. With
// last, it also makes the snapshot's runs.
func (pc *precopier) scan(maps []Mapping, last bool) (roundWork, error) {
	var w roundWork
	pm, err := pc.l.openPagemap()
	if err != nil {
		return w, err
	}
	defer pm.Close()
	for _, m := range maps {
		if !snapshotted(m) || m.End <= m.Start {
			continue
		}
		r, err := pc.region(m)
		if err != nil {
			return w, err
		}
		anon := anonymous(m)
		rb := runBuilder{anon: anon, runs: w.runs}
		err = pc.l.pagemap(pm, m, func(addr, e uint64) {
			i := (addr - r.start) / page
			switch {
			case e&(pmPresent|pmSwapped) != 0:
				if !r.isValid(i) || e&pmSoftDirty != 0 {
					w.copy = append(w.copy, pageRef{r, addr})
					w.bytes += page
				}
				if last {
					rb.add(addr)
				}
			case anon && r.isValid(i):
				// Copied once, gone since (returned to the kernel):
				// zeros, as the process now reads it.
				w.zero = append(w.zero, pageRef{r, addr})
			}
		})
		if err != nil {
			return w, err
		}
		for j := len(w.runs); j < len(rb.runs); j++ {
			run := &rb.runs[j]
			o := r.off + run.addr - r.start
			run.data = pc.s.arena[o : o+run.size : o+run.size]
		}
		w.runs = rb.runs
	}
	return w, nil
}

// apply copies and zeros what a scan found, neighbouring pages in one
// range of a copy call, and marks the pages valid. A page that cannot be
// copied stays invalid; in the last round, it is the snapshot's bad page.
func (pc *precopier) apply(w roundWork, last bool) error {
	for _, z := range w.zero {
		o := z.off()
		clear(pc.s.arena[o : o+page])
		z.r.setValid((z.addr - z.r.start) / page)
	}
	var ds []dest
	for _, p := range w.copy {
		o := p.off()
		if n := len(ds); n > 0 {
			d := &ds[n-1]
			if d.addr+uint64(len(d.buf)) == p.addr && len(d.buf) < maxCopyIov &&
				&pc.s.arena[o-uint64(len(d.buf))] == &d.buf[0] {
				d.buf = pc.s.arena[o-uint64(len(d.buf)) : o+page]
				continue
			}
		}
		ds = append(ds, dest{p.addr, pc.s.arena[o : o+page]})
	}
	bad, err := pc.l.copyPieces(ds, last)
	if err != nil {
		return err
	}
	if last {
		pc.s.bad = bad
	}
	badSet := make(map[uint64]bool, len(bad))
	for _, b := range bad {
		badSet[b] = true
	}
	for _, p := range w.copy {
		if !badSet[p.addr] {
			p.r.setValid((p.addr - p.r.start) / page)
		}
	}
	return nil
}
