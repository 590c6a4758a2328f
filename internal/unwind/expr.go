package unwind

import (
	"fmt"

	"github.com/rbscope/rbscope/internal/target"
)

// DWARF expression operations the CFI of x86_64 code uses: register-based
// addresses (signal frames), PLT stubs' CFA, and some arithmetic.
const (
	opDeref      = 0x06
	opConst1u    = 0x08
	opConst1s    = 0x09
	opConst2u    = 0x0a
	opConst2s    = 0x0b
	opConst4u    = 0x0c
	opConst4s    = 0x0d
	opConst8u    = 0x0e
	opConst8s    = 0x0f
	opConstu     = 0x10
	opConsts     = 0x11
	opDup        = 0x12
	opDrop       = 0x13
	opAnd        = 0x1a
	opMinus      = 0x1c
	opOr         = 0x21
	opPlus       = 0x22
	opPlusUconst = 0x23
	opShl        = 0x24
	opShr        = 0x25
	opGe         = 0x2a
	opLt         = 0x2d
	opLit0       = 0x30
	opLit31      = 0x4f
	opBreg0      = 0x70
	opBreg31     = 0x8f
)

// maxExprStack bounds an expression's stack (its length bounds its steps:
// there are no branches among the operations evaluated).
const maxExprStack = 64

// evalExpr evaluates a DWARF expression over regs and the target's memory.
// With cfa set, the CFA is pushed first (DW_CFA_expression and
// DW_CFA_val_expression); without, the stack starts empty
// (DW_CFA_def_cfa_expression). It returns the value on top at the end.
func evalExpr(expr []byte, regs *Regs, mem target.Reader, cfa *uint64) (uint64, error) {
	var st []uint64
	if cfa != nil {
		st = append(st, *cfa)
	}
	pop := func() (uint64, error) {
		if len(st) == 0 {
			return 0, fmt.Errorf("%w: expression stack empty", ErrBadCFI)
		}
		v := st[len(st)-1]
		st = st[:len(st)-1]
		return v, nil
	}
	i := 0
	uleb := func() (uint64, error) {
		var v uint64
		for shift := uint(0); i < len(expr) && shift < 64; shift += 7 {
			b := expr[i]
			i++
			v |= uint64(b&0x7f) << shift
			if b&0x80 == 0 {
				return v, nil
			}
		}
		return 0, fmt.Errorf("%w: bad LEB128 in an expression", ErrBadCFI)
	}
	sleb := func() (int64, error) {
		var v int64
		var shift uint
		for i < len(expr) && shift < 64 {
			b := expr[i]
			i++
			v |= int64(b&0x7f) << shift
			shift += 7
			if b&0x80 == 0 {
				if shift < 64 && b&0x40 != 0 {
					v |= -1 << shift
				}
				return v, nil
			}
		}
		return 0, fmt.Errorf("%w: bad LEB128 in an expression", ErrBadCFI)
	}
	fixed := func(n int, signed bool) (uint64, error) {
		if i+n > len(expr) {
			return 0, fmt.Errorf("%w: truncated expression", ErrBadCFI)
		}
		var v uint64
		for k := n - 1; k >= 0; k-- {
			v = v<<8 | uint64(expr[i+k])
		}
		i += n
		if signed && n < 8 {
			shift := uint(64 - 8*n)
			v = uint64(int64(v<<shift) >> shift)
		}
		return v, nil
	}
	for i < len(expr) {
		if len(st) > maxExprStack {
			return 0, fmt.Errorf("%w: expression stack too deep", ErrBadCFI)
		}
		op := expr[i]
		i++
		var err error
		switch {
		case op >= opLit0 && op <= opLit31:
			st = append(st, uint64(op-opLit0))
		case op >= opBreg0 && op <= opBreg31:
			var off int64
			if off, err = sleb(); err != nil {
				return 0, err
			}
			v, ok := regs.get(uint64(op - opBreg0))
			if !ok {
				return 0, fmt.Errorf("%w: register %d in an expression", ErrUnreadable, op-opBreg0)
			}
			st = append(st, v+uint64(off))
		case op >= opConst1u && op <= opConst8s:
			size := 1 << ((op - opConst1u) / 2) // 1u 1s 2u 2s 4u 4s 8u 8s
			var v uint64
			if v, err = fixed(size, (op-opConst1u)%2 == 1); err != nil {
				return 0, err
			}
			st = append(st, v)
		case op == opConstu:
			var v uint64
			if v, err = uleb(); err != nil {
				return 0, err
			}
			st = append(st, v)
		case op == opConsts:
			var v int64
			if v, err = sleb(); err != nil {
				return 0, err
			}
			st = append(st, uint64(v))
		case op == opPlusUconst:
			var c, v uint64
			if c, err = uleb(); err != nil {
				return 0, err
			}
			if v, err = pop(); err != nil {
				return 0, err
			}
			st = append(st, v+c)
		case op == opDup:
			if len(st) == 0 {
				return 0, fmt.Errorf("%w: expression stack empty", ErrBadCFI)
			}
			st = append(st, st[len(st)-1])
		case op == opDrop:
			if _, err = pop(); err != nil {
				return 0, err
			}
		case op == opDeref:
			var a uint64
			if a, err = pop(); err != nil {
				return 0, err
			}
			v, rerr := read8(mem, a)
			if rerr != nil {
				return 0, fmt.Errorf("%w: %v", ErrUnreadable, rerr)
			}
			st = append(st, v)
		case op == opAnd || op == opMinus || op == opOr || op == opPlus || op == opShl || op == opShr || op == opGe || op == opLt:
			var b, a uint64
			if b, err = pop(); err != nil {
				return 0, err
			}
			if a, err = pop(); err != nil {
				return 0, err
			}
			st = append(st, binop(op, a, b))
		default:
			return 0, fmt.Errorf("%w: expression operation %#x", ErrBadCFI, op)
		}
	}
	return pop()
}

func binop(op byte, a, b uint64) uint64 {
	switch op {
	case opAnd:
		return a & b
	case opMinus:
		return a - b
	case opOr:
		return a | b
	case opPlus:
		return a + b
	case opShl:
		return a << (b & 63)
	case opShr:
		return a >> (b & 63)
	case opGe:
		if int64(a) >= int64(b) {
			return 1
		}
		return 0
	case opLt:
		if int64(a) < int64(b) {
			return 1
		}
	}
	return 0
}
