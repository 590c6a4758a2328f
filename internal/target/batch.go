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
func (l *Live) ReadBatch(addrs []uint64, bufs [][]byte, ok []bool) {
	var localArr [maxBatch]unix.Iovec
	var remoteArr [maxBatch]unix.RemoteIovec
	for start := 0; start < len(bufs); start += maxBatch {
		end := min(start+maxBatch, len(bufs))
		local, remote := localArr[:0], remoteArr[:0]
		want := 0
		for i := start; i < end; i++ {
			ok[i] = len(bufs[i]) == 0
			if ok[i] {
				continue
			}
			v := unix.Iovec{Base: &bufs[i][0]}
			v.SetLen(len(bufs[i]))
			local = append(local, v)
			remote = append(remote, unix.RemoteIovec{Base: uintptr(addrs[i]), Len: len(bufs[i])})
			want += len(bufs[i])
		}
		n := 0
		if !l.useMem && len(local) > 0 {
			n, _ = rawProcessVMReadv(l.pid, local, remote)
			n = max(n, 0)
		}
		for i := start; i < end; i++ {
			if ok[i] {
				continue
			}
			if n >= len(bufs[i]) {
				n -= len(bufs[i])
				ok[i] = true
				continue
			}
			n = 0 // what follows a short range was not read
			ok[i] = ReadFull(l, bufs[i], addrs[i]) == nil
		}
	}
}
