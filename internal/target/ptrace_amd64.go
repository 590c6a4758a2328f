package target

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/arch"
)

// ptraceRegs reads a stopped thread's general registers: x86_64's
// user_regs_struct, which holds fs_base too.
func ptraceRegs(tid int) (Regs, error) {
	var r unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &r); err != nil {
		return Regs{}, err
	}
	return regsFrom(arch.AMD64, unsafe.Slice((*byte)(unsafe.Pointer(&r)), unsafe.Sizeof(r))), nil
}
