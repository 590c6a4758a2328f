package rubyvm

import (
	"encoding/binary"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// Object shapes (Ruby 3.2+): where the tree of them and its list lie.

// ShapeTree returns the address of the object shapes' tree (Ruby 3.2+),
// or 0: 4.0 keeps it in the global rb_shape_tree, earlier Rubies behind
// rb_shape_tree_ptr. A stripped libruby does not export
// rb_shape_tree_ptr; the exported rb_shape_get_shape_by_id loads it first
// thing.
func (v *VM) ShapeTree() uint64 {
	if tree := v.locate("rb_shape_tree"); tree != 0 {
		return tree
	}
	c := v.locate("rb_shape_tree_ptr")
	if c == 0 {
		return 0
	}
	tree, err := v.m.u64(c)
	if err != nil {
		return 0
	}
	return tree
}

// ShapeList returns the shape tree's shape_list, or 0.
func (v *VM) ShapeList() uint64 {
	l, _ := v.shapeListIn(v.ShapeTree())
	return l
}

// shapeListIn reads the shape list of the shape tree at tree, checking
// that its root shape has no instance variables.
func (v *VM) shapeListIn(tree uint64) (uint64, bool) {
	L := v.Layout
	if tree == 0 || tree&7 != 0 {
		return 0, false
	}
	l, err := v.m.u64(at(tree, L.ShapeTreeList))
	if err != nil || l == 0 || l&7 != 0 {
		return 0, false
	}
	root, err := v.m.read(l, int(L.ShapeSize))
	if err != nil || AttrIndex(L, root, L.ShapeNextIVIndex) != 0 {
		return 0, false // the root shape has no instance variables
	}
	return l, true
}

// AttrIndex reads an attr_index_t of a shape at off.
func AttrIndex(L *layout.Layout, b []byte, off int64) uint64 {
	if off < 0 {
		return 0
	}
	switch L.AttrIndexSize {
	case 1:
		return uint64(b[off])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[off:]))
	}
	return uint64(le32(b, off))
}
