package target

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// BatchReader reads several ranges of a process's memory in one call.
type BatchReader interface {
	// ReadBatch reads bufs[i] at addrs[i] for every i and sets ok[i] when
	// that buffer was read in full.
	ReadBatch(addrs []uint64, bufs [][]byte, ok []bool)
}

// ReadBatch reads each of bufs at the address addrs gives it, in one call
// where the target can (a live process: one process_vm_readv for all of
// them), and otherwise one ReadAt each. ok[i] tells whether bufs[i] was
// read in full; a range that could not be read costs only itself.
func ReadBatch(t Reader, addrs []uint64, bufs [][]byte, ok []bool) {
	if b, isBatch := t.(BatchReader); isBatch {
		b.ReadBatch(addrs, bufs, ok)
		return
	}
	for i := range bufs {
		ok[i] = len(bufs[i]) == 0 || ReadFull(t, bufs[i], addrs[i]) == nil
	}
}

// rawProcessVMReadv is process_vm_readv made as a raw system call: it
// never blocks for long (a page of the target's that is swapped out is the
// worst), and a sampler makes thousands a second. Made the usual way, each
// would tell the Go scheduler of a system call, and its monitor thread,
// seeing a thread in system calls again and again, would wake every 20µs
// and hand the thread's processor to another thread: at 1000 samples a
// second that cost more CPU than the reads.
// Reads of more than rawReadMax bytes in all are made the usual way.
func rawProcessVMReadv(pid int, local []unix.Iovec, remote []unix.RemoteIovec) (int, error) {
	if len(local) == 0 {
		return 0, nil
	}
	total := 0
	for _, r := range remote {
		total += r.Len
	}
	if total > rawReadMax {
		return unix.ProcessVMReadv(pid, local, remote, 0)
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid),
		uintptr(unsafe.Pointer(&local[0])), uintptr(len(local)),
		uintptr(unsafe.Pointer(&remote[0])), uintptr(len(remote)), 0)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}

// rawReadMax is the most a raw process_vm_readv copies: a larger copy
// takes long enough for the Go scheduler to be told.
const rawReadMax = 256 << 10

// maxBatch is how many ranges one ReadBatch call passes to the kernel at
// most (its UIO_MAXIOV is 1024).
const maxBatch = 64

// ReadBatch reads every range with one process_vm_readv per maxBatch of
// them. The kernel stops at the first range it cannot read in full; the
// ranges after it are read again, each on its own.
//
// A range costs the kernel about as much as a page does (it pins the
// pages of each range apart, about 0.35 µs a range on this VM, against
// 1.4 µs a call): ranges that lie close together (coalesce) are read as
// one, into a buffer of l's, and copied out.
func (l *Live) ReadBatch(addrs []uint64, bufs [][]byte, ok []bool) {
	l.batchMu.Lock()
	defer l.batchMu.Unlock()
	for start := 0; start < len(bufs); start += maxBatch {
		end := min(start+maxBatch, len(bufs))
		l.readChunk(addrs[start:end], bufs[start:end], ok[start:end])
	}
}

// coalesceGap is how many bytes apart two ranges may lie and be read as
// one: copying them costs less than a range more.
const coalesceGap = 2048

// span is one range of a coalesced batch: the ranges first..last of the
// chunk's order, from lo to hi.
type batchSpan struct {
	lo, hi      uint64
	first, last int
}

// readChunk is ReadBatch of at most maxBatch ranges.
func (l *Live) readChunk(addrs []uint64, bufs [][]byte, ok []bool) {
	// The ranges in address order (insertion sort: a chunk is small).
	var orderArr [maxBatch]int
	order := orderArr[:0]
	for i := range bufs {
		if ok[i] = len(bufs[i]) == 0; ok[i] {
			continue
		}
		j := len(order)
		order = append(order, i)
		for ; j > 0 && addrs[order[j-1]] > addrs[i]; j-- {
			order[j] = order[j-1]
		}
		order[j] = i
	}
	if len(order) == 0 {
		return
	}
	// Spans: a range joins the span before it when it starts at most
	// coalesceGap bytes after the span ends, and no page lies between
	// them that neither touches (which might not be mapped).
	var spanArr [maxBatch]batchSpan
	spans := spanArr[:0]
	for k, i := range order {
		lo, hi := addrs[i], addrs[i]+uint64(len(bufs[i]))
		if n := len(spans); n > 0 {
			sp := &spans[n-1]
			if lo <= sp.hi+coalesceGap && lo>>12 <= (sp.hi-1)>>12+1 {
				sp.hi, sp.last = max(sp.hi, hi), k
				continue
			}
		}
		spans = append(spans, batchSpan{lo: lo, hi: hi, first: k, last: k})
	}
	size := 0
	for _, sp := range spans {
		if sp.first != sp.last {
			size += int(sp.hi - sp.lo)
		}
	}
	if cap(l.batchBuf) < size {
		l.batchBuf = make([]byte, size)
	}
	scratch := l.batchBuf[:size]
	var localArr [maxBatch]unix.Iovec
	var remoteArr [maxBatch]unix.RemoteIovec
	local, remote := localArr[:0], remoteArr[:0]
	off := 0
	for _, sp := range spans {
		var v unix.Iovec
		if sp.first == sp.last {
			v.Base = &bufs[order[sp.first]][0]
		} else {
			v.Base = &scratch[off]
			off += int(sp.hi - sp.lo)
		}
		v.SetLen(int(sp.hi - sp.lo))
		local = append(local, v)
		remote = append(remote, unix.RemoteIovec{Base: uintptr(sp.lo), Len: int(sp.hi - sp.lo)})
	}
	n := 0
	if !l.useMem {
		n, _ = rawProcessVMReadv(l.pid, local, remote)
		n = max(n, 0)
	}
	off = 0
	for _, sp := range spans {
		whole := n >= int(sp.hi-sp.lo)
		if whole {
			n -= int(sp.hi - sp.lo)
		} else {
			n = 0 // what follows a short span was not read
		}
		for k := sp.first; k <= sp.last; k++ {
			i := order[k]
			switch {
			case whole && sp.first != sp.last:
				copy(bufs[i], scratch[off+int(addrs[i]-sp.lo):])
				ok[i] = true
			case whole:
				ok[i] = true
			default:
				ok[i] = ReadFull(l, bufs[i], addrs[i]) == nil
			}
		}
		if sp.first != sp.last {
			off += int(sp.hi - sp.lo)
		}
	}
}
