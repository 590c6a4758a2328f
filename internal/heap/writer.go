package heap

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf8"
)

// The writer's half of the dump_all format: what rbscope's heap dump
// appends to its lines, spelled as ObjectSpace.dump_all spells it, beside
// the Reader that reads it back. Each function appends to b and returns
// it, so that the caller keeps one buffer for many lines.

// DumpedByField is what rbscope's writer puts in its first ROOT line.
const DumpedByField = `, "dumped_by":"` + DumpedBy + `"`

// AppendEndLine appends the line that ends a dump of rbscope's own,
// after lines lines.
func AppendEndLine(b []byte, lines uint64) []byte {
	b = append(b, `{"type":"ROOT", "root":"`+EndRoot+`", "references":[], "lines":`...)
	b = strconv.AppendUint(b, lines, 10)
	return append(b, "}\n"...)
}

// AppendRootLine appends the ROOT line of the root name holding refs;
// the first ROOT line of a dump carries DumpedByField.
func AppendRootLine(b []byte, name string, refs []uint64, first bool) []byte {
	b = append(b, `{"type":"ROOT", "root":"`...)
	b = append(b, name...)
	b = append(b, `", "references":[`...)
	b = AppendAddrs(b, refs)
	b = append(b, ']')
	if first {
		b = append(b, DumpedByField...)
	}
	return append(b, "}\n"...)
}

// AppendAddr appends "0x..." (with the quotes).
func AppendAddr(b []byte, a uint64) []byte {
	b = append(b, '"', '0', 'x')
	b = strconv.AppendUint(b, a, 16)
	return append(b, '"')
}

// AppendAddrs appends addresses separated by ", ".
func AppendAddrs(b []byte, addrs []uint64) []byte {
	for i, a := range addrs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = AppendAddr(b, a)
	}
	return b
}

// AppendKey appends `, "name":`, the start of a field.
func AppendKey(b []byte, name string) []byte {
	b = append(b, ", \""...)
	b = append(b, name...)
	return append(b, "\":"...)
}

// AppendUintField appends the field name with the number n.
func AppendUintField(b []byte, name string, n uint64) []byte {
	return strconv.AppendUint(AppendKey(b, name), n, 10)
}

// AppendFlag appends the field name with the value true.
func AppendFlag(b []byte, name string) []byte {
	return append(AppendKey(b, name), "true"...)
}

// AppendStringField appends the field name with the string val.
func AppendStringField(b []byte, name, val string) []byte {
	return AppendJSONString(AppendKey(b, name), []byte(val))
}

// AppendAddrField appends the field name with the address a.
func AppendAddrField(b []byte, name string, a uint64) []byte {
	return AppendAddr(AppendKey(b, name), a)
}

// AppendJSONString appends s as a JSON string: the escapes dump_all uses,
// \u00XX for the other control characters, and invalid UTF-8 bytes as
// \u00XX of their value (so that the line stays valid JSON).
func AppendJSONString(b []byte, s []byte) []byte {
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

// AppendFloat appends f as C's printf("%#g") does (dump_all prints Floats
// so since 3.0): six significant digits, trailing zeros and the decimal
// point kept; with alt false as "%g" does (2.7), without them.
func AppendFloat(b []byte, f float64, alt bool) []byte {
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
