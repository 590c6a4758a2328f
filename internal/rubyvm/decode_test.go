package rubyvm

import (
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// TestDecodeEndbr64 walks the code of Debian's Ruby 3.4.11's
// rb_shape_get_shape_by_id (built with -fcf-protection): the walk must
// step over its endbr64 to the RIP-relative load of rb_shape_tree_ptr.
func TestDecodeEndbr64(t *testing.T) {
	code := []byte{
		0xf3, 0x0f, 0x1e, 0xfa, // endbr64
		0x48, 0x8b, 0x05, 0x95, 0x4f, 0x2c, 0x00, // mov 0x2c4f95(%rip),%rax
		0x89, 0xff, // mov %edi,%edi
		0xc3, // ret
	}
	var disps []int64
	for pc := 0; pc < len(code); {
		inst, err := decodeX86(code[pc:])
		if err != nil || inst.Len == 0 {
			t.Fatalf("at %d: %v (length %d)", pc, err, inst.Len)
		}
		pc += inst.Len
		for _, a := range inst.Args {
			if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.RIP {
				disps = append(disps, m.Disp)
			}
		}
	}
	if len(disps) != 1 || disps[0] != 0x2c4f95 {
		t.Errorf("RIP-relative displacements %#x, want [0x2c4f95]", disps)
	}
}
