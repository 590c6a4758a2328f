package target

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/arch"
)

// ptraceRegs reads a stopped thread's general registers: arm64's
// user_pt_regs, and tpidr_el0 from its own register set (NT_ARM_TLS).
func ptraceRegs(tid int) (Regs, error) {
	var r unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &r); err != nil {
		return Regs{}, err
	}
	regs := regsFrom(arch.ARM64, unsafe.Slice((*byte)(unsafe.Pointer(&r)), unsafe.Sizeof(r)))
	var tp uint64
	iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&tp))}
	iov.SetLen(8)
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETREGSET, uintptr(tid), uintptr(arch.ARM64.TPNote), uintptr(unsafe.Pointer(&iov)), 0, 0); e == 0 {
		regs.TP = tp
	}
	return regs, nil
}
