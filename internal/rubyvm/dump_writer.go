package rubyvm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/rbscope/rbscope/internal/heap"
)

// flush writes the collected JSON once there is enough of it (or all of
// it when final).
func (d *dumper) flush(final bool) error {
	if len(d.buf) == 0 || (!final && len(d.buf) < dumpFlush) {
		return nil
	}
	n, err := d.w.Write(d.buf)
	d.stats.Bytes += int64(n)
	d.buf = d.buf[:0]
	if err != nil {
		return fmt.Errorf("writing the dump: %w", err)
	}
	return nil
}

// ref adds a reference if val is a heap object other than the class.
//
// In a heap that holds together every VALUE an object holds is a live
// object; a word that is not (memory torn by a running process, or a
// corrupt or hostile one) is left out, so that garbage costs no output.
func (d *dumper) ref(val uint64) {
	if val != d.klass && d.live(val) {
		d.refs = append(d.refs, val)
	}
}

// refWords adds the references among n VALUEs at addr, read in chunks.
func (d *dumper) refWords(addr uint64, n uint64) error {
	if n > maxDumpElems {
		return errTorn
	}
	for n > 0 {
		k := min(n, dumpChunk)
		b, err := d.read(addr, int(k*8))
		if err != nil {
			return err
		}
		for i := 0; i < len(b); i += 8 {
			d.ref(binary.LittleEndian.Uint64(b[i:]))
		}
		addr += k * 8
		n -= k
	}
	return nil
}

// refSlotWords adds the references among n VALUEs at off in the slot.
func (d *dumper) refSlotWords(slot []byte, off int64, n uint64) error {
	if off < 0 || n > uint64(len(slot)) || off+int64(n)*8 > int64(len(slot)) {
		return errTorn
	}
	for i := uint64(0); i < n; i++ {
		d.ref(le64(slot, off+int64(i)*8))
	}
	return nil
}

// appendAddr appends "0x..." (with the quotes).
func appendAddr(b []byte, a uint64) []byte {
	b = append(b, '"', '0', 'x')
	b = strconv.AppendUint(b, a, 16)
	return append(b, '"')
}

// appendAddrs appends addresses separated by ", ".
func appendAddrs(b []byte, addrs []uint64) []byte {
	for i, a := range addrs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendAddr(b, a)
	}
	return b
}

// key appends `, "name":`, the start of a field.
func (d *dumper) key(name string) {
	d.buf = append(d.buf, ", \""...)
	d.buf = append(d.buf, name...)
	d.buf = append(d.buf, "\":"...)
}

func (d *dumper) field(name string, n uint64) {
	d.key(name)
	d.buf = strconv.AppendUint(d.buf, n, 10)
}

func (d *dumper) flag(name string) {
	d.key(name)
	d.buf = append(d.buf, "true"...)
}

func (d *dumper) strField(name, val string) {
	d.key(name)
	d.buf = appendJSONString(d.buf, []byte(val))
}

func (d *dumper) addrField(name string, a uint64) {
	d.key(name)
	d.buf = appendAddr(d.buf, a)
}

// appendJSONString appends s as a JSON string: the escapes dump_all uses,
// \u00XX for the other control characters, and invalid UTF-8 bytes as
// \u00XX of their value (so that the line stays valid JSON).
func appendJSONString(b []byte, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\\':
				b = append(b, '\\', '\\')
			case c == '"':
				b = append(b, '\\', '"')
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// dumpRoot is one ROOT line.
type dumpRoot struct {
	name string
	refs []uint64
}

func (d *dumper) rootLine(name string, refs []uint64) {
	d.buf = append(d.buf, `{"type":"ROOT", "root":"`...)
	d.buf = append(d.buf, name...)
	d.buf = append(d.buf, `", "references":[`...)
	d.buf = appendAddrs(d.buf, refs)
	d.buf = append(d.buf, ']')
	if d.stats.Roots == 0 {
		d.buf = append(d.buf, heap.DumpedByField...)
	}
	d.buf = append(d.buf, "}\n"...)
	d.stats.Roots++
}

// appendCG appends f as C's printf("%#g") does (dump_all prints Floats so
// since 3.0): six significant digits, trailing zeros and the decimal point
// kept; with alt false as "%g" does (2.7), without them.
func appendCG(b []byte, f float64, alt bool) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "nan"...)
	case math.IsInf(f, 1):
		return append(b, "inf"...)
	case math.IsInf(f, -1):
		return append(b, "-inf"...)
	}
	const prec = 6
	e := strconv.AppendFloat(nil, f, 'e', prec-1, 64)
	i := bytes.LastIndexByte(e, 'e')
	x, _ := strconv.Atoi(string(e[i+1:]))
	var out []byte
	if x < -4 || x >= prec {
		out = e
	} else {
		out = strconv.AppendFloat(nil, f, 'f', prec-1-x, 64)
	}
	if !alt {
		mant, exp := out, []byte(nil)
		if j := bytes.LastIndexByte(out, 'e'); j >= 0 {
			mant, exp = out[:j], out[j:]
		}
		if bytes.IndexByte(mant, '.') >= 0 {
			mant = bytes.TrimRight(mant, "0")
			mant = bytes.TrimSuffix(mant, []byte("."))
		}
		out = append(append([]byte(nil), mant...), exp...)
	}
	return append(b, out...)
}
