package heapdump

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// object appends the line of the object in slot at addr, if it is live.
func (d *dumper) object(addr uint64, slot []byte) {
	L := d.L
	flags := le64(slot, L.RBasicFlags)
	typ := flags & d.tmask
	if typ == d.tNone || typ == d.tZombie || typ == d.tMoved {
		return
	}
	mark := len(d.buf)
	if err := d.encode(addr, slot, flags, typ); err != nil {
		d.buf = d.buf[:mark]
		d.stats.Skipped++
		return
	}
	d.stats.Objects++
}

// partial counts an object of type typeName at addr written partially
// for reason.
func (d *dumper) partial(addr uint64, typeName, reason string) {
	if d.stats.Partial == nil {
		d.stats.Partial = map[string]uint64{}
		d.stats.PartialTypes = map[string]uint64{}
		d.stats.FirstPartial = addr
	}
	d.stats.PartialTypes[typeName]++
	if _, ok := d.stats.Partial[reason]; !ok && len(d.stats.Partial) >= maxPartialReasons {
		reason = "other reasons"
	}
	d.stats.Partial[reason]++
	d.stats.PartialTotal++
}

// decodeSafely runs decodeBody, turning a panic into an error: a decoder
// that meets memory it did not expect costs its object, not the dump.
func (d *dumper) decodeSafely(addr uint64, slot []byte, flags, typ uint64) (memsize uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			d.stats.Panicked++
			err = fmt.Errorf("decoder failed: %v", r)
		}
	}()
	if d.opt.failDecode != nil && d.opt.failDecode(addr) {
		panic(fmt.Sprintf("injected failure at %#x", addr))
	}
	memsize, err = d.decodeBody(addr, slot, flags, typ)
	if raw, ok := d.genIVRaw[addr]; ok && err == nil {
		d.genericIvarNames(flags, raw)
	}
	return memsize, err
}

// encode appends one object line.
func (d *dumper) encode(addr uint64, slot []byte, flags, typ uint64) error {
	L := d.L
	v := d.v
	d.refs = d.refs[:0]
	d.cons = d.cons[:0]
	d.weak = d.weak[:0]
	d.klass = le64(slot, L.RBasicKlass)
	if typ == d.tImemo || typ == d.tNode {
		d.klass = 0
	}
	tn := v.TypeName(int64(typ))
	if len(tn) > 8 && tn[:8] == "UNKNOWN_" {
		return errTorn
	}
	d.buf = append(d.buf, `{"address":`...)
	d.buf = heap.AppendAddr(d.buf, addr)
	d.buf = append(d.buf, `, "type":"`...)
	d.buf = append(d.buf, tn...)
	d.buf = append(d.buf, '"')
	if d.shapeList != 0 {
		d.field("shape_id", flags>>uint64(L.ShapeFlagShift))
		d.field("slot_size", uint64(len(slot)))
	}
	if d.klass != 0 {
		d.addrField("class", d.klass)
	}
	if flags&uint64(L.FlFreeze) != 0 {
		d.flag("frozen")
	}
	body := len(d.buf)
	memsize, err := d.decodeSafely(addr, slot, flags, typ)
	if err != nil {
		// What the decoder appended may stop mid-field: keep the header
		// and the references found so far, and say why.
		d.buf = d.buf[:body]
		reason := err.Error()
		if errors.Is(err, errTorn) {
			reason = "its memory could not be read or did not hold together"
		}
		d.partial(addr, tn, reason)
		d.strField("partial", reason)
		memsize = uint64(len(slot))
	}
	d.refs = append(d.refs, d.genIV[addr]...)
	cons := consOnly(d.refs, d.cons)
	if len(d.refs)+len(cons) > 0 {
		d.buf = append(d.buf, `, "references":[`...)
		d.buf = heap.AppendAddrs(d.buf, d.refs)
		if len(d.refs) > 0 && len(cons) > 0 {
			d.buf = append(d.buf, ", "...)
		}
		d.buf = heap.AppendAddrs(d.buf, cons)
		d.buf = append(d.buf, ']')
	}
	if len(cons) > 0 {
		d.buf = append(d.buf, `, "conservative_references":[`...)
		d.buf = heap.AppendAddrs(d.buf, cons)
		d.buf = append(d.buf, ']')
	}
	if len(d.weak) > 0 {
		d.buf = append(d.buf, `, "weak_references":[`...)
		d.buf = heap.AppendAddrs(d.buf, d.weak)
		d.buf = append(d.buf, ']')
	}
	d.field("memsize", memsize)
	d.buf = append(d.buf, "}\n"...)
	return nil
}

// decodeBody appends what an object's type holds beyond the header, and
// returns its memsize.
func (d *dumper) decodeBody(addr uint64, slot []byte, flags, typ uint64) (uint64, error) {
	L := d.L
	memsize := uint64(len(slot))
	var err error
	switch int64(typ) {
	case L.TString:
		memsize, err = d.str(slot, flags, memsize)
	case L.TSymbol:
		err = d.symbol(slot)
	case L.TArray:
		memsize, err = d.array(slot, flags, memsize)
	case L.THash:
		memsize, err = d.hash(slot, flags, memsize)
	case L.TObject:
		memsize, err = d.robject(slot, flags, memsize)
	case L.TStruct:
		memsize, err = d.rstruct(slot, flags, memsize)
	case L.TClass, L.TModule, L.TIClass:
		err = d.class(addr, slot, flags, int64(typ))
	case L.TFloat:
		d.key("value")
		d.buf = append(d.buf, '"')
		d.buf = heap.AppendFloat(d.buf, math.Float64frombits(le64(slot, L.RFloatValue)), L.DumpFloatAltForm == 1)
		d.buf = append(d.buf, '"')
	case L.TRational:
		d.ref(le64(slot, L.RRationalNum))
		d.ref(le64(slot, L.RRationalDen))
	case L.TComplex:
		d.ref(le64(slot, L.RComplexReal))
		d.ref(le64(slot, L.RComplexImag))
	case L.TRegexp:
		d.ref(le64(slot, L.RRegexpSrc))
	case L.TMatch:
		d.ref(le64(slot, L.RMatchRegexp))
		d.ref(le64(slot, L.RMatchStr))
	case L.TData:
		d.data(slot)
	case L.TFile:
		if fptr := le64(slot, L.RFileFptr); L.RFileFptr >= 0 && fptr != 0 {
			// rb_io_t: its path, encodings' converters, ...
			d.scanMem(fptr, uint64(L.IOSize), d.refCons) //nolint:errcheck // an unreadable rb_io_t adds nothing
		}
	case L.TImemo:
		d.imemo(slot, flags)
	}
	return memsize, err
}

// Encoding indexes fixed in every Ruby (encindex.h).
var builtinEncodings = [...]struct {
	name    string
	compat  bool // ASCII-compatible
	termlen uint64
}{
	{"ASCII-8BIT", true, 1}, {"UTF-8", true, 1}, {"US-ASCII", true, 1},
	{"UTF-16BE", false, 2}, {"UTF-16LE", false, 2}, {"UTF-32BE", false, 4}, {"UTF-32LE", false, 4},
	{"UTF-16", false, 2}, {"UTF-32", false, 4}, {"UTF8-MAC", true, 1}, {"EUC-JP", true, 1}, {"Windows-31J", true, 1},
}

// strContent reads a String's length and bytes (nil when longer than the
// dump prints).
func (d *dumper) strContent(slot []byte, flags uint64) (length uint64, ptr uint64, err error) {
	L := d.L
	h := rubyvm.StrHeader(L, slot, flags)
	if !h.Embedded {
		return h.Length, h.Ptr, nil
	}
	length = h.Length
	if L.RStringEmbedAry+int64(length) > int64(len(slot)) {
		return 0, 0, errTorn
	}
	return length, 0, nil
}

// str appends a STRING's fields: embedded, fstring, shared, bytesize,
// value (for 7-bit contents in an ASCII-compatible encoding, as dump_all
// prints it), encoding; memsize adds a malloc'd buffer's capacity.
func (d *dumper) str(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	noEmbed := flags&uint64(L.RStringNoEmbed) != 0
	shared := noEmbed && flags&uint64(L.FlEltsShared) != 0
	if !noEmbed {
		d.flag("embedded")
	}
	if flags&uint64(L.RStringFstr) != 0 {
		d.flag("fstring")
	}
	enc := (flags & uint64(L.EncodingMask)) >> uint64(L.EncodingShift)
	if shared {
		d.flag("shared")
		d.ref(le64(slot, L.RStringShared))
	} else {
		if err := d.strValue(slot, flags, enc, !d.opt.RedactStrings); err != nil {
			return 0, err
		}
		if noEmbed {
			termlen := uint64(1)
			if enc < uint64(len(builtinEncodings)) {
				termlen = builtinEncodings[enc].termlen
			}
			if capa := le64(slot, L.RStringHeapCapa); capa < rubyvm.MaxOutOfSlot {
				memsize += capa + termlen
			}
		}
	}
	if enc != 0 && enc < uint64(len(builtinEncodings)) {
		d.strField("encoding", builtinEncodings[enc].name)
	}
	return memsize, nil
}

// strValue appends bytesize and, when dump_all would print it and withValue
// is set, value.
func (d *dumper) strValue(slot []byte, flags, enc uint64, withValue bool) error {
	L := d.L
	length, ptr, err := d.strContent(slot, flags)
	if err != nil {
		return err
	}
	if length > maxDumpString {
		return errTorn
	}
	d.field("bytesize", length)
	compat := enc >= uint64(len(builtinEncodings)) || builtinEncodings[enc].compat
	if !withValue || !compat || (length == 0 && d.newValue) {
		return nil
	}
	if length > 0 && flags&uint64(L.CoderangeMask) != 0 && flags&uint64(L.CoderangeMask) != uint64(L.Coderange7Bit) {
		return nil // known not to be 7-bit
	}
	var b []byte
	if flags&uint64(L.RStringNoEmbed) == 0 {
		b = slot[L.RStringEmbedAry : L.RStringEmbedAry+int64(length)]
	} else if length > 0 {
		if length > dumpChunk {
			// Probe the last byte before allocating for a long string: a
			// torn length must not cost gigabytes.
			if _, err := d.read(ptr+length-1, 1); err != nil {
				return err
			}
		}
		if b, err = d.read(ptr, int(length)); err != nil {
			return err
		}
	}
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return nil
		}
	}
	d.key("value")
	d.buf = heap.AppendJSONString(d.buf, b)
	return nil
}

// symbol appends a dynamic SYMBOL's name as dump_all does (its fstr's
// bytesize and value); a Symbol marks nothing.
func (d *dumper) symbol(slot []byte) error {
	fstr := le64(slot, d.L.RSymbolFstr)
	if !d.v.IsHeapObject(fstr) {
		return nil
	}
	b := d.slotAt(fstr)
	if b == nil {
		return nil
	}
	s := append([]byte(nil), b...)
	flags := le64(s, d.L.RBasicFlags)
	if int64(flags&d.tmask) != d.L.TString {
		return nil
	}
	return d.strValue(s, flags, (flags&uint64(d.L.EncodingMask))>>uint64(d.L.EncodingShift), true)
}

// array appends length, shared, embedded and the elements (or the shared
// root) as references.
func (d *dumper) array(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	h := rubyvm.AryHeader(L, slot, flags)
	n := h.Length
	if h.Embedded {
		d.field("length", n)
		d.flag("embedded")
		return memsize, d.refSlotWords(slot, h.Off, n)
	}
	if n > maxDumpElems {
		return 0, errTorn
	}
	d.field("length", n)
	if flags&uint64(L.FlEltsShared) != 0 {
		if n > 0 {
			d.flag("shared")
		}
		d.ref(le64(slot, L.RArraySharedRoot))
		return memsize, nil
	}
	memsize += d.v.OutOfSlot(uint64(L.TArray), flags, slot)
	if n == 0 {
		return memsize, nil
	}
	return memsize, d.refWords(h.Ptr, n)
}

// hash appends size, default (a default proc) and the keys and values,
// then ifnone, as references.
func (d *dumper) hash(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	ifnone := le64(slot, L.RHashIfnone)
	t, err := rubyvm.HashTableOf(L, slot, flags, d.read)
	if err != nil {
		return 0, tornUnlessBudget(err)
	}
	if t.ST != nil {
		head := append([]byte(nil), t.ST...)
		d.field("size", le64(head, L.StNumEntries))
		if flags&uint64(L.RHashProcDefault) != 0 {
			d.addrField("default", ifnone)
		}
		if err := d.stEntries(head, true); err != nil {
			return 0, err
		}
	} else {
		d.field("size", t.Size)
		if flags&uint64(L.RHashProcDefault) != 0 {
			d.addrField("default", ifnone)
		}
		if t.ARApart {
			memsize += uint64(L.ARTablePairs + L.ARTableMax*16)
		}
		undef := uint64(L.Qundef)
		for i := uint64(0); i < t.Bound && t.AR != nil; i++ {
			k := le64(t.AR, int64(i*16))
			if k == undef {
				continue
			}
			d.ref(k)
			d.ref(le64(t.AR, int64(i*16+8)))
		}
	}
	d.ref(ifnone)
	return memsize, nil
}

// stEntries adds the live entries of the st_table whose head is given:
// keys and values (or only values).
func (d *dumper) stEntries(head []byte, keys bool) error {
	return d.stEach(head, func(key, rec uint64) {
		if keys {
			d.ref(key)
		}
		d.ref(rec)
	})
}

// stEach calls fn with the key and record of each live entry of the
// st_table whose head is given, reading the entries in chunks; fn must not
// read memory (the chunk is the dumper's scratch buffer).
func (d *dumper) stEach(head []byte, fn func(key, rec uint64)) error {
	return tornUnlessBudget(rubyvm.StEach(d.L, head, maxDumpElems/3, dumpChunk/3, d.read, fn))
}

// tornUnlessBudget is err as the dumper tells it: errTorn for memory that
// could not be read or did not hold together, errReadBudget as it is.
func tornUnlessBudget(err error) error {
	if err == nil || errors.Is(err, errReadBudget) {
		return err
	}
	return errTorn
}

// stPairs returns the live entries of the st_table whose address is held
// at ptr (key, record pairs), for tables whose entries lead to more reads.
func (d *dumper) stPairs(ptr uint64) [][2]uint64 {
	b, err := d.read(ptr, 8)
	if err != nil {
		return nil
	}
	return d.stPairsAt(binary.LittleEndian.Uint64(b))
}

// stPairsAt returns the live entries of the st_table at tbl.
func (d *dumper) stPairsAt(tbl uint64) [][2]uint64 {
	if tbl == 0 {
		return nil
	}
	h, err := d.read(tbl, int(d.L.StEntries)+8)
	if err != nil {
		return nil
	}
	var pairs [][2]uint64
	d.stEach(append([]byte(nil), h...), func(key, rec uint64) { pairs = append(pairs, [2]uint64{key, rec}) }) //nolint:errcheck // a torn table gives what was read
	return pairs
}

// maxShapeID bounds the shape ids read from objects, which may be torn:
// Ruby 3.3 has room for 2^19 shapes (SHAPE_BUFFER_SIZE); the bound leaves
// headroom for later versions.
const maxShapeID = 1 << 24

// shape returns what the dump needs of shape id.
func (d *dumper) shape(id uint64) shapeInfo {
	if s, ok := d.shapes[id]; ok {
		return s
	}
	L := d.L
	var s shapeInfo
	index := shapeIndex(L, id)
	if d.shapeList != 0 && index < maxShapeID {
		if b, err := d.read(d.shapeList+index*uint64(L.ShapeSize), int(L.ShapeSize)); err == nil {
			s = shapeInfo{
				ivs:  rubyvm.AttrIndex(L, b, L.ShapeNextIVIndex),
				capa: rubyvm.AttrIndex(L, b, L.ShapeCapacity),
				tooComplex: int64(b[L.ShapeType]) == L.ShapeTooComplex ||
					(L.ShapeIDFlTooComplex > 0 && id&uint64(L.ShapeIDFlTooComplex) != 0),
				ok: true,
			}
		}
	}
	if len(d.shapes) < 1<<20 {
		d.shapes[id] = s
	}
	return s
}

// shapeIndex returns the index in the shape list of a shape ID (4.0 keeps
// flags and a heap index in its high bits).
func shapeIndex(L *layout.Layout, id uint64) uint64 {
	var high uint64
	if L.ShapeIDFlagsMask > 0 {
		high |= uint64(L.ShapeIDFlagsMask)
	}
	if L.ShapeIDHeapIndexMask > 0 {
		high |= uint64(L.ShapeIDHeapIndexMask)
	}
	return id &^ high
}

// objectEmbedded reports whether an object's ivars are in its slot.
func objectEmbedded(L *layout.Layout, flags uint64) (bool, error) {
	switch {
	case L.RObjectHeapFlag > 0:
		return flags&uint64(L.RObjectHeapFlag) == 0, nil
	case L.RObjectEmbedFlag > 0:
		return flags&uint64(L.RObjectEmbedFlag) != 0, nil
	}
	return false, errNoEmbedFlag
}

// errNoEmbedFlag: the layout says neither how an object's ivars are
// embedded nor how they are not.
var errNoEmbedFlag = errors.New("the layout has neither ROBJECT_EMBED nor ROBJECT_HEAP")

// robject appends embedded and ivars and the instance variables as
// references.
func (d *dumper) robject(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	embedded, err := objectEmbedded(L, flags)
	if err != nil {
		return 0, err
	}
	var n uint64
	if d.shapeList != 0 {
		if embedded {
			d.flag("embedded")
		}
		s := d.shape(flags >> uint64(L.ShapeFlagShift))
		if !s.ok {
			return 0, errTorn
		}
		if s.tooComplex {
			tbl := le64(slot, L.RObjectHeapIVPtr)
			b, err := d.read(tbl, int(L.StEntries)+8)
			if err != nil {
				return 0, err
			}
			head := append([]byte(nil), b...)
			d.field("ivars", le64(head, L.StNumEntries))
			d.flag("too_complex_shape")
			if err := d.stEntries(head, false); err != nil {
				return 0, err
			}
			d.ivarTable(head)
			return memsize, nil
		}
		n = s.ivs
		if !embedded {
			memsize += s.capa * 8
		}
	} else if L.RObjectHeapNumIV < 0 {
		return 0, errTorn // a Ruby with shapes whose shape table was not found
	} else if embedded {
		n = uint64(L.RObjectEmbedLenMax)
	} else {
		n = uint64(le32(slot, L.RObjectHeapNumIV))
		memsize += n * 8
	}
	d.field("ivars", n)
	if embedded {
		err = d.refSlotWords(slot, L.RObjectEmbedAry, n)
	} else {
		err = d.refWords(le64(slot, L.RObjectHeapIVPtr), n)
	}
	if err != nil {
		return 0, err
	}
	d.objectIvars(slot, flags, n, embedded)
	return memsize, nil
}

// rstruct appends the members of a STRUCT as references.
func (d *dumper) rstruct(slot []byte, flags, memsize uint64) (uint64, error) {
	L := d.L
	if n := (flags & uint64(L.RStructEmbedLenMask)) >> uint64(L.RStructEmbedLenShift); n != 0 {
		return memsize, d.refSlotWords(slot, L.RStructEmbedAry, n)
	}
	n := le64(slot, L.RStructHeapLen)
	if n > maxDumpElems {
		return 0, errTorn
	}
	memsize += n * 8
	return memsize, d.refWords(le64(slot, L.RStructHeapPtr), n)
}

// class appends a CLASS, MODULE or ICLASS's superclass, name and the
// references decoded (see Write).
func (d *dumper) class(addr uint64, slot []byte, flags uint64, typ int64) (err error) {
	L := d.L
	v := d.v
	var subErr error // the subclass walk's, which the rest does not wait for
	defer func() {
		if err == nil {
			err = subErr
		}
	}()
	super := le64(slot, L.RClassSuper)
	singleton := flags&uint64(L.FlSingleton) != 0
	ext, err := v.ClassExt(addr)
	if err != nil {
		ext = 0
	}
	if typ == L.TClass && singleton && L.ClassExtAttached >= 0 && ext != 0 {
		if a, err := v.Word(at(ext, L.ClassExtAttached)); err == nil {
			d.ref(a)
		}
	}
	if d.v.IsHeapObject(super) {
		d.addrField("superclass", super)
		d.ref(super)
	}
	if typ != L.TIClass && d.klass != 0 {
		n, ok := d.names[addr]
		if !ok {
			if !singleton {
				n.name = v.ClassName(addr)
			}
			if n.name == "" {
				if r := v.ObjectClassName(addr); r != "" && r[0] != '#' {
					n.real = r
				}
			}
			d.names[addr] = n
		}
		if n.name != "" {
			d.strField("name", n.name)
		} else if n.real != "" {
			d.strField("real_class_name", n.real)
		}
		if singleton {
			d.flag("singleton")
		}
	}
	d.methodTable(slot, ext)
	d.classCaches(ext)
	subErr = d.subclasses(ext)
	if ext == 0 {
		return nil // 3.1: a class without extension marks only its superclass
	}
	if typ == L.TIClass {
		if L.ClassExtIncluder >= 0 && d.shapeList != 0 {
			if inc, err := v.Word(at(ext, L.ClassExtIncluder)); err == nil {
				d.ref(inc)
			}
		}
		return nil
	}
	// instance variables
	if L.ClassExtIVPtr >= 0 {
		if s := d.shape(flags >> uint64(L.ShapeFlagShift)); s.ok && !s.tooComplex && s.ivs > 0 {
			if ivptr, err := v.Word(at(ext, L.ClassExtIVPtr)); err == nil && ivptr != 0 {
				if err := d.refWords(ivptr, s.ivs); err != nil {
					return err
				}
				if names, ok := d.shapeIvars(flags >> uint64(L.ShapeFlagShift)); ok && s.ivs <= maxIvars && d.readIvals(ivptr, s.ivs) {
					d.ivarsByIndex(names, d.ivals)
				}
			}
		}
	} else if L.ClassExtIVTbl >= 0 {
		if tbl, err := v.Word(at(ext, L.ClassExtIVTbl)); err == nil && tbl != 0 {
			b, err := d.read(tbl, int(L.StEntries)+8)
			if err != nil {
				return err
			}
			head := append([]byte(nil), b...)
			if err := d.stEntries(head, false); err != nil {
				return err
			}
			d.ivarTable(head)
		}
	}
	// constants
	if tbl, err := v.Word(at(ext, L.ClassExtConstTbl)); err == nil && tbl != 0 {
		if err := d.constants(tbl); err != nil {
			return err
		}
	}
	if L.ClassExtClassPath >= 0 {
		if p, err := v.Word(at(ext, L.ClassExtClassPath)); err == nil {
			d.ref(p)
		}
	}
	return nil
}

// constants adds the value and file of every entry of a constant table
// (an rb_id_table of rb_const_entry_t pointers).
func (d *dumper) constants(tbl uint64) error {
	L := d.L
	raw, capa, ok := d.v.IDTable(tbl)
	if !ok {
		return errTorn
	}
	rubyvm.IDTableEach(L, raw, capa, func(_, ce uint64) {
		b, err := d.read(ce, int(max(L.ConstEntryValue, L.ConstEntryFile))+8)
		if err != nil {
			return
		}
		val, file := le64(b, L.ConstEntryValue), le64(b, L.ConstEntryFile)
		d.ref(val)
		d.ref(file)
	})
	return nil
}

// shapeLines writes a SHAPE line for every object shape, as dump_all does
// (3.3+): id, parent_id (not for a root), depth, shape_type, edge_name
// (an instance variable's), edges and memsize (the shape and its table of
// edges, unless it has a single child kept in place).
func (d *dumper) shapeLines() error {
	L := d.L
	if L.ShapeTreeNextID < 0 || L.ShapeParentID < 0 || L.ShapeEdges < 0 {
		return nil
	}
	tree := d.v.ShapeTree()
	if tree == 0 {
		return nil
	}
	b, err := d.read(at(tree, L.ShapeTreeNextID), 4)
	if err != nil {
		return nil
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if n > maxShapeID {
		return nil
	}
	size := uint64(L.ShapeSize)
	all, err := d.read(d.shapeList, int(n*size))
	if err != nil {
		return nil
	}
	shapes := append([]byte(nil), all...)
	shape := func(id uint64) []byte { return shapes[id*size : (id+1)*size] }
	for id := uint64(0); id < n; id++ {
		s := shape(id)
		typ := int64(s[L.ShapeType])
		d.buf = append(d.buf, `{"address":`...)
		d.buf = heap.AppendAddr(d.buf, d.shapeList+id*size)
		d.buf = append(d.buf, `, "type":"SHAPE"`...)
		d.field("id", id)
		if typ != L.ShapeRoot {
			d.field("parent_id", uint64(le32(s, L.ShapeParentID)))
		}
		depth := uint64(1)
		for p := uint64(le32(s, L.ShapeParentID)); p < n && depth <= n; p = uint64(le32(shape(p), L.ShapeParentID)) {
			depth++
		}
		d.field("depth", depth)
		name := ""
		switch typ {
		case L.ShapeRoot:
			name = "ROOT"
		case L.ShapeIvar:
			name = "IVAR"
		case L.ShapeFrozen:
			name = "FROZEN"
		case L.ShapeTObject:
			name = "T_OBJECT"
		case L.ShapeTooComplex:
			name = "OBJ_TOO_COMPLEX"
		case L.ShapeObjID:
			name = "OBJ_ID"
		}
		d.strField("shape_type", name)
		if typ == L.ShapeIvar {
			id := le64(s, L.ShapeEdgeName)
			ivar, err := d.v.IDName(id)
			if err != nil {
				ivar = "ID_INTERNAL(" + strconv.FormatUint(id>>uint64(L.IDScopeShift), 10) + ")"
			}
			d.buf = append(d.buf, `,"edge_name":`...) // sic: dump_all writes no space here
			d.buf = heap.AppendJSONString(d.buf, []byte(ivar))
		}
		edges, memsize := uint64(0), size
		switch e := le64(s, L.ShapeEdges); {
		case e == 0:
		case e&uint64(L.ShapeSingleChild) != 0: // a single child in place of a table
			edges = 1
		default:
			if h, err := d.read(e, int(max(L.IDTableNum, L.IDTableCapa)+4)); err == nil {
				edges = uint64(le32(h, L.IDTableNum))
				memsize += uint64(L.IDTableSize) + uint64(le32(h, L.IDTableCapa))*uint64(L.IDItemSize)
			}
		}
		d.field("edges", edges)
		d.field("memsize", memsize)
		d.buf = append(d.buf, "}\n"...)
		d.stats.Shapes++
		if err := d.flush(false); err != nil {
			return err
		}
	}
	return nil
}
