package rubyvm

import (
	"encoding/binary"
	"regexp"

	rbbinary "github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/libc"
)

// tidOfPthread returns the kernel TID of the thread whose pthread_t is pt:
// read from the C library's struct pthread (glibc's or musl's), or, where
// the C library's image cannot be read (a core from another machine), the
// thread whose thread pointer leads to pt (tidByThreadPointer). 0 when
// neither knows.
func (v *VM) tidOfPthread(pt uint64) int {
	if pt == 0 {
		return 0
	}
	if off, ok := v.pthreadTIDOffset(); ok {
		// musl's struct pthread starts with its own address: a pthread_t
		// whose struct does not is not one.
		self, err := v.m.u64(pt + libc.MuslPthreadSelf)
		if !v.tidOffMusl || (err == nil && self == pt) {
			if tid, err := v.m.u32(pt + off); err == nil && int32(tid) > 0 {
				return v.ownTID(int(int32(tid)))
			}
		}
	}
	return v.tidByThreadPointer(pt)
}

// ownTID turns a TID read from the process's memory, which is the thread's
// ID in the process's own PID namespace (a container's), into the ID its
// target lists the thread by (see target.Live.LocalTID).
func (v *VM) ownTID(tid int) int {
	if v.localTID == nil || tid <= 0 {
		return tid
	}
	return v.localTID(tid)
}

// maxPthreadSize bounds the size of the C library's struct pthread (glibc
// 2.36's is 1,856 bytes on arm64), for architectures whose thread pointer
// points just past it.
const maxPthreadSize = 4096

// tidByThreadPointer returns the TID of the thread whose pthread_t is pt,
// on targets that hold every thread's registers (cores): on x86_64 the
// thread pointer (fs_base) is the pthread_t; where it points past the C
// library's struct pthread (arm64's tpidr_el0, TLS variant I), the thread
// whose thread pointer lies less than maxPthreadSize above pt (the
// threads' structs lie far apart, each at its own stack's top). 0 when
// none does.
func (v *VM) tidByThreadPointer(pt uint64) int {
	if v.tpTIDs == nil {
		v.tpTIDs = map[uint64]int{}
		if v.live {
			return 0 // threads come and go: no map kept
		}
		tids, err := v.T.Threads()
		if err != nil {
			return 0
		}
		for _, tid := range tids {
			if regs, err := v.T.Registers(tid); err == nil && regs.TP != 0 {
				v.tpTIDs[regs.TP] = tid
				v.tpIsPthread = regs.Arch.TPIsPthread
			}
		}
	}
	if v.tpIsPthread {
		return v.tpTIDs[pt]
	}
	for tp, tid := range v.tpTIDs {
		if tp > pt && tp-pt < maxPthreadSize {
			return tid
		}
	}
	return 0
}

// threadLib matches the C library that defines struct pthread: libc since
// glibc 2.34, libpthread before.
var threadLib = regexp.MustCompile(`(^|/)lib(c|pthread)[-.0-9]*\.so`)

// pthreadTIDOffset returns where the C library's struct pthread keeps the
// kernel TID: for glibc as libthread_db learns it, from the descriptor
// glibc exports for debuggers, _thread_db_pthread_tid (bit size, count,
// byte offset, each a uint32); for musl, which exports none, the offset
// package libc knows. Rubies whose rb_thread_t keeps no TID (2.7) keep the
// pthread_t, which on Linux is the address of that struct. ok is false
// when the process runs on neither C library.
func (v *VM) pthreadTIDOffset() (uint64, bool) {
	if v.tidOffLooked {
		return v.tidOff, v.tidOff != 0
	}
	v.tidOffLooked = true
	maps, err := v.T.Mappings()
	if err != nil {
		return 0, false
	}
	if libc.Name(maps) == libc.Musl {
		v.tidOff, v.tidOffMusl = libc.MuslPthreadTID, true
		return v.tidOff, true
	}
	seen := map[string]bool{}
	for _, m := range maps {
		if !threadLib.MatchString(m.Path) || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		im, err := rbbinary.Open(v.T, maps, m.Path)
		if err != nil {
			continue
		}
		addr, _, err := im.Symbol("_thread_db_pthread_tid")
		im.Close()
		if err != nil {
			continue
		}
		desc, err := v.m.read(addr, 12)
		if err != nil {
			continue
		}
		bits, off := binary.LittleEndian.Uint32(desc), binary.LittleEndian.Uint32(desc[8:])
		if bits == 32 && off > 0 && off < 1<<16 {
			v.tidOff = uint64(off)
			return v.tidOff, true
		}
	}
	return 0, false
}
