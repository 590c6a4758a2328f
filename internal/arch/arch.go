// Package arch describes the processor architectures rbscope reads, one
// value per architecture: the general registers as the kernel records them
// (ptrace, a core's NT_PRSTATUS), which of them is the pc, the stack
// pointer and the frame pointer, where the thread pointer is kept and how
// it leads to the C library's thread, the DWARF register numbering the
// call frame information uses, and the sizes of the C library's types that
// Ruby's structs embed. Every package that reads registers or lays out a
// struct asks the target's Arch rather than branching on an architecture.
package arch

import (
	"debug/elf"
	"fmt"
	"runtime"
)

// Arch is what rbscope needs to know of one architecture (on Linux, with
// glibc or musl).
type Arch struct {
	// Name is the architecture as uname -m spells it ("x86_64",
	// "aarch64"); GOARCH is Go's and Debian's name ("amd64", "arm64").
	Name, GOARCH string
	// Machine is the e_machine of its ELF files.
	Machine elf.Machine

	// Regs are the lower-case names of the general registers, in the order
	// of the kernel's NT_PRSTATUS pr_reg (x86_64's user_regs_struct,
	// arm64's user_pt_regs), which ptrace's PTRACE_GETREGS gives too.
	Regs []string
	// PC, SP and FP index Regs: the program counter, the stack pointer
	// and the frame pointer.
	PC, SP, FP int
	// ThreadPointer is the name of the register that holds the thread
	// pointer; TPIndex indexes it in Regs, or is -1 when pr_reg leaves it
	// out and a note of its own (TPNote) holds it.
	ThreadPointer string
	TPIndex       int
	TPNote        elf.NType
	// TPIsPthread says the thread pointer is the thread's pthread_t (the
	// address of the C library's struct pthread): TLS variant II
	// (x86_64). Under variant I (arm64) it points past the struct, whose
	// size only the C library knows.
	TPIsPthread bool

	// DWARF maps a DWARF register number to its index in Regs (-1: not a
	// general register). Its length bounds the numbers the unwinder keeps.
	DWARF []int
	// DWARFSP is the stack pointer's DWARF number and DWARFPC the column
	// that holds the pc (x86_64's rip is a DWARF register; arm64's pc is
	// not a column CFI rules use).
	DWARFSP, DWARFPC int
	// LinkRegister says a call leaves the return address in a register
	// (arm64's x30): a function's CFI without a rule for the return
	// address column means it is still there, not that the frame is the
	// outermost.
	LinkRegister bool
	// CalleeSaved are the DWARF numbers of the registers the ABI has a
	// function keep for its caller: without a rule, the caller's value is
	// the frame's.
	CalleeSaved []int
	// AddrMask clears what is no address in a return address read from
	// the stack (arm64's pointer authentication code above a 48-bit
	// user address); all ones when nothing is.
	AddrMask uint64
	// RedZone is the bytes below the stack pointer that a leaf function
	// may use without moving it.
	RedZone uint64
	// SiginfoInFrame is where a signal frame's siginfo lies from the stack
	// pointer of its frame (the kernel's rt_sigframe).
	SiginfoInFrame uint64
	// SigreturnCode is the code a signal handler returns to (rt_sigreturn),
	// told by its bytes where no CFI covers it (qemu-user's trampoline, a
	// vDSO a core does not hold), and SigframeRegs where the interrupted
	// thread's registers lie, in Regs' order, from the stack pointer of
	// that frame (the kernel's sigcontext). Nil where the C library's
	// restorer has CFI (x86_64's __restore_rt).
	SigreturnCode []byte
	SigframeRegs  uint64

	// PrstatusRegs is where pr_reg lies in the kernel's struct
	// elf_prstatus.
	PrstatusRegs int

	// CTypes are the sizes and alignments of the C library's types that
	// Ruby's structs embed, by the name Ruby's headers give them.
	CTypes map[string]CType
}

// CType is the size and alignment of a C type.
type CType struct{ Size, Align int64 }

// AMD64 is x86_64 (System V ABI, glibc's or musl's types).
var AMD64 = &Arch{
	Name: "x86_64", GOARCH: "amd64", Machine: elf.EM_X86_64,
	Regs: []string{"r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8",
		"rax", "rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss",
		"fs_base", "gs_base", "ds", "es", "fs", "gs"},
	PC: 16, SP: 19, FP: 4,
	ThreadPointer: "fs_base", TPIndex: 21, TPIsPthread: true,
	// rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8-r15, rip (the return
	// address column)
	DWARF:   []int{10, 12, 11, 5, 13, 14, 4, 19, 9, 8, 7, 6, 3, 2, 1, 0, 16},
	DWARFSP: 7, DWARFPC: 16,
	CalleeSaved:    []int{3, 6, 12, 13, 14, 15}, // rbx, rbp, r12-r15
	AddrMask:       ^uint64(0),
	RedZone:        128,
	SiginfoInFrame: 304, // after struct ucontext
	PrstatusRegs:   112,
	CTypes: map[string]CType{
		"pthread_mutex_t": {40, 8},
		"pthread_cond_t":  {48, 8},
		"jmp_buf":         {200, 8}, // __jmpbuf[8], __mask_was_saved, __saved_mask
	},
}

// ARM64 is AArch64 (AAPCS64, glibc's types).
var ARM64 = &Arch{
	Name: "aarch64", GOARCH: "arm64", Machine: elf.EM_AARCH64,
	Regs: []string{"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9",
		"x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17", "x18", "x19",
		"x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28", "x29",
		"x30", "sp", "pc", "pstate"},
	PC: 32, SP: 31, FP: 29,
	ThreadPointer: "tpidr_el0", TPIndex: -1, TPNote: 0x401, // NT_ARM_TLS
	// x0-x30 are 0-30, sp 31; 32 holds the pc here (DWARF for AArch64
	// reserves it; no CFI rule names it).
	DWARF: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
		20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32},
	DWARFSP: 31, DWARFPC: 32,
	LinkRegister:   true,
	CalleeSaved:    []int{19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29},
	AddrMask:       1<<48 - 1,
	RedZone:        0,
	SiginfoInFrame: 0, // rt_sigframe: siginfo, then ucontext
	// mov x8, #139 (rt_sigreturn); svc #0
	SigreturnCode: []byte{0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4},
	// siginfo (128 bytes), then ucontext, whose uc_mcontext (16-aligned,
	// at 176) starts with fault_address, then regs[31], sp, pc, pstate
	SigframeRegs: 128 + 176 + 8,
	PrstatusRegs: 112,
	CTypes: map[string]CType{
		"pthread_mutex_t": {48, 8},
		"pthread_cond_t":  {48, 8},
		"jmp_buf":         {312, 8}, // __jmpbuf[22], __mask_was_saved, __saved_mask
	},
}

// All lists the architectures rbscope reads and is released for.
var All = []*Arch{AMD64, ARM64}

// ForMachine returns the architecture of ELF files of machine m.
func ForMachine(m elf.Machine) (*Arch, error) {
	for _, a := range All {
		if a.Machine == m {
			return a, nil
		}
	}
	return nil, fmt.Errorf("%v: rbscope reads %s only", m, Names())
}

// MachineName names the architecture of ELF machine m ("aarch64"), or the
// machine as debug/elf spells it when rbscope describes none.
func MachineName(m elf.Machine) string {
	if a, err := ForMachine(m); err == nil {
		return a.Name
	}
	return m.String()
}

// Host is the architecture rbscope runs on (that of the live processes it
// reads through ptrace).
func Host() *Arch {
	for _, a := range All {
		if a.GOARCH == runtime.GOARCH {
			return a
		}
	}
	panic("arch: rbscope built for an architecture it does not describe: " + runtime.GOARCH)
}

// Names lists the architectures' names ("x86_64 and aarch64").
func Names() string {
	s := ""
	for i, a := range All {
		if i > 0 {
			s += " and "
		}
		s += a.Name
	}
	return s
}
