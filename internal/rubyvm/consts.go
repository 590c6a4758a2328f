package rubyvm

// The rb_id_table: Ruby's table from an ID to a value, which holds a
// class's constants and methods and the global variables.

// maxIDTable bounds the capacity of an rb_id_table read (the global
// variable table, constant tables).
const maxIDTable = 1 << 20

// idTableItems reads the items of the rb_id_table at the address held in
// tblAddr.
func (v *VM) idTableItems(tblAddr uint64) ([]byte, int, bool) {
	tbl, err := v.m.u64(tblAddr)
	if err != nil {
		return nil, 0, false
	}
	return v.IDTable(tbl)
}

// IDTable reads the items of the rb_id_table at tbl: capa items of
// IDItemSize bytes, a zero key marking a free one (none in an empty
// table). Ruby keeps capa a power of two.
func (v *VM) IDTable(tbl uint64) ([]byte, int, bool) {
	L := v.Layout
	if tbl == 0 {
		return nil, 0, false
	}
	head, err := v.m.read(tbl, int(L.IDTableItems)+8)
	if err != nil {
		return nil, 0, false
	}
	capa := int(int32(le32(head, L.IDTableCapa)))
	items := le64(head, L.IDTableItems)
	if capa == 0 {
		return nil, 0, true
	}
	if capa < 0 || capa > maxIDTable || capa&(capa-1) != 0 || items == 0 {
		return nil, 0, false
	}
	raw, err := v.m.read(items, capa*int(L.IDItemSize))
	if err != nil {
		return nil, 0, false
	}
	return raw, capa, true
}
