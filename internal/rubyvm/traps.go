package rubyvm

import (
	"slices"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
)

// trapSlots is how many signals vm->trap_list.cmd holds (RUBY_NSIG on
// Linux).
const trapSlots = 65

// TrapsSignal tells whether the program has a Ruby-level handler for
// signal sig: trap with a block or a command, "IGNORE" or "EXIT" (Ruby
// keeps it in vm->trap_list.cmd[sig], 0 when there is none). ok is false
// when it cannot be told: the layout lacks the list, or what lies there
// does not look like one.
//
// Only an exact layout is trusted here (the process's own DWARF, a table
// made from this very release, or the layout of a release rbscope has the
// facts of: its family's table with the fields it moved): patch releases
// move rb_vm_t's fields (3.1.7 keeps the list 8 bytes after 3.1.2), and
// the list of another offset would read as a trap that is not there, or
// none where there is one. A release newer than the known ones, read with
// the newest's layout, is not trusted.
func (v *VM) TrapsSignal(sig int) (trapped, ok bool) {
	L := v.Layout
	exact := strings.HasPrefix(L.Source, "dwarf:") ||
		slices.Contains(strings.FieldsFunc(L.Checked, func(r rune) bool { return r == ',' || r == ' ' }), v.Version) ||
		L.Release == v.Version && slices.Contains(layouts.Releases(L.Family), v.Version)
	if !exact || v.Layout.VMTrapCmd < 0 || sig <= 0 || sig >= trapSlots {
		return false, false
	}
	vm, err := v.VMPtr()
	if err != nil {
		return false, false
	}
	b, err := v.m.read(at(vm, v.Layout.VMTrapCmd), trapSlots*8)
	if err != nil {
		return false, false
	}
	set := 0
	for i := 0; i < trapSlots; i++ {
		val := le64(b, int64(i*8))
		if val == 0 {
			continue
		}
		set++
		// A command is an object (a Proc, a String) or a special constant
		// (Qtrue for "IGNORE", Qundef for "EXIT").
		if val&7 != 0 && val > 0x40 {
			return false, false
		}
	}
	if set > trapSlots/2 {
		return false, false // most programs trap a few signals, not most
	}
	return le64(b, int64(sig*8)) != 0, true
}
