package arch

import (
	"debug/elf"
	"testing"
)

// TestDescriptionsHoldTogether checks each architecture's description
// against itself: the DWARF numbers of the stack pointer and the pc lead
// to the registers SP and PC name, the thread pointer is named where it is
// kept, and every callee-saved register is a general register.
func TestDescriptionsHoldTogether(t *testing.T) {
	want := map[*Arch][3]string{AMD64: {"rip", "rsp", "rbp"}, ARM64: {"pc", "sp", "x29"}}
	for _, a := range All {
		if got := [3]string{a.Regs[a.PC], a.Regs[a.SP], a.Regs[a.FP]}; got != want[a] {
			t.Errorf("%s: pc, sp, fp are %v, want %v", a.Name, got, want[a])
		}
		if a.DWARF[a.DWARFSP] != a.SP || a.DWARF[a.DWARFPC] != a.PC {
			t.Errorf("%s: DWARF %d and %d are registers %d and %d, want sp %d and pc %d",
				a.Name, a.DWARFSP, a.DWARFPC, a.DWARF[a.DWARFSP], a.DWARF[a.DWARFPC], a.SP, a.PC)
		}
		seen := map[int]bool{}
		for n, i := range a.DWARF {
			if i >= len(a.Regs) || i >= 0 && seen[i] {
				t.Errorf("%s: DWARF %d maps to register %d twice or out of range", a.Name, n, i)
			}
			seen[i] = true
		}
		for _, n := range a.CalleeSaved {
			if n >= len(a.DWARF) || a.DWARF[n] < 0 {
				t.Errorf("%s: callee-saved DWARF %d is no general register", a.Name, n)
			}
		}
		if (a.TPIndex >= 0) == (a.TPNote != 0) || a.TPIndex >= 0 && a.Regs[a.TPIndex] != a.ThreadPointer {
			t.Errorf("%s: thread pointer %s at index %d, note %#x", a.Name, a.ThreadPointer, a.TPIndex, a.TPNote)
		}
		if got, err := ForMachine(a.Machine); got != a || err != nil {
			t.Errorf("ForMachine(%v) = %v, %v", a.Machine, got, err)
		}
	}
	if _, err := ForMachine(elf.EM_RISCV); err == nil {
		t.Error("ForMachine(EM_RISCV) is no error")
	}
	if Host() == nil {
		t.Error("no Host")
	}
}
