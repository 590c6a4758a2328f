package rubyvm

import (
	"strings"

	"github.com/rbscope/rbscope/internal/target"
)

// A locator says how to find one of the VM's globals: by its symbol, or,
// in a stripped image where the symbol is hidden, among the addresses the
// machine code of exported functions takes RIP-relative (findRIPRef), up
// to depth calls down. accept checks a candidate and may return the
// address adjusted (a candidate may point into the global rather than at
// it); a symbol's address must pass it too.
//
// A core without the image's code (its files are not on this machine) is
// scanned instead where scan is set: every 8-aligned word of the image's
// writable data is offered to scan with its address, and the first
// accepted is taken.
type locator struct {
	via    []string
	depth  int
	accept func(v *VM, candidate uint64) (uint64, bool)
	scan   func(v *VM, addr, word uint64) bool
}

// locators is every global rbscope finds in the VM, keyed by symbol. It
// is filled in init, as the acceptors use locate themselves.
var locators map[string]locator

func init() {
	locators = map[string]locator{
		// Ruby 3.1 exports it; from 3.2 on only .symtab names it. The
		// exported ruby_vm_at_exit loads it first thing (GET_VM()).
		"ruby_current_vm_ptr": {via: []string{"ruby_vm_at_exit"}, depth: 0,
			accept: func(v *VM, c uint64) (uint64, bool) { return c, v.plausibleVMPtr(c) },
			scan: func(v *VM, a, word uint64) bool {
				if word == 0 || word&7 != 0 {
					return false
				}
				m, ok := target.FindMapping(v.maps, word)
				return ok && strings.Contains(m.Perms, "w") && v.plausibleVMPtr(a)
			}},
		// The table that maps IDs to names; rb_id2str reads it.
		"ruby_global_symbols": {via: []string{"rb_id2str"}, depth: 2,
			accept: func(v *VM, c uint64) (uint64, bool) {
				for _, base := range []uint64{c, c - uint64(v.Layout.SymbolsIDs)} {
					if v.plausibleSymbols(base) {
						return base, true
					}
				}
				return 0, false
			},
			scan: func(v *VM, a, _ uint64) bool {
				last, err := v.m.u32(at(a, v.Layout.SymbolsLastID))
				return err == nil && last >= 100 && last <= 1<<28 && v.plausibleSymbols(a)
			}},
		// The global variables' table.
		"rb_global_tbl": {via: []string{"rb_gv_get", "rb_gv_set", "rb_define_hooked_variable"}, depth: 3,
			accept: func(v *VM, c uint64) (uint64, bool) { return c, v.plausibleGlobalTbl(c) },
			// a stripped image whose code rbscope does not decode
			// (aarch64's) or a core without it
			scan: func(v *VM, a, word uint64) bool {
				if word == 0 || word&7 != 0 {
					return false
				}
				m, ok := target.FindMapping(v.maps, word)
				return ok && strings.Contains(m.Perms, "w") && v.plausibleGlobalTbl(a)
			}},
		// The generic instance variables' table (a static variable;
		// 2.7 and 4.0 name it otherwise, see genericIvarTables).
		"generic_iv_tbl_": {via: []string{"rb_mark_generic_ivar", "rb_free_generic_ivar", "rb_copy_generic_ivar"}, depth: 2,
			accept: func(v *VM, c uint64) (uint64, bool) { return c, v.plausibleGenericTbl(c) }},
		// The object shapes' tree (3.2+).
		"rb_shape_tree_ptr": {via: []string{"rb_shape_get_shape_by_id"}, depth: 1,
			accept: func(v *VM, c uint64) (uint64, bool) {
				tree, err := v.m.u64(c)
				if err != nil {
					return 0, false
				}
				_, ok := v.shapeListIn(tree)
				return c, ok
			}},
		// The object shapes' tree itself, a global of 4.0.
		"rb_shape_tree": {
			accept: func(v *VM, c uint64) (uint64, bool) { _, ok := v.shapeListIn(c); return c, ok }},
	}
}

// locate returns the address of the VM global named by its symbol, found
// as its locator says, or 0 when it cannot be found. Answers are kept: a
// global's address does not change. Where another process of the same
// Build found it is tried first, and taken if it passes this process's
// checks.
func (v *VM) locate(name string) uint64 {
	if addr, ok := v.located[name]; ok {
		return addr
	}
	l := locators[name]
	if h, ok := v.build.hint(name); ok {
		if a, ok := l.accept(v, h.addr+v.Image.Bias); ok {
			v.located[name] = a
			v.locatedHow[name] = h.how
			return a
		}
	}
	addr, how := uint64(0), FoundBySymbol
	if a, _, err := v.Symbol(name); err == nil {
		if l.accept == nil {
			addr = a
		} else if a, ok := l.accept(v, a); ok {
			addr = a
		}
	}
	for _, fn := range l.via {
		if addr != 0 {
			break
		}
		addr, _ = v.findRIPRef(fn, l.depth, func(c uint64) (uint64, bool) { return l.accept(v, c) })
		how = FoundByCode
	}
	if addr == 0 && l.scan != nil {
		addr, _ = v.scanData(func(a, word uint64) bool { return l.scan(v, a, word) })
		how = FoundByScan
	}
	v.located[name] = addr
	v.locatedHow[name] = how
	if addr != 0 && l.accept != nil {
		v.build.found(name, addr-v.Image.Bias, how)
	}
	return addr
}
