// Package heap reads heap dumps in the JSON-lines format of Ruby's
// ObjectSpace.dump_all (one JSON object per line) and analyses them: what
// is new in one dump against another (Diff), how the roots reach an object
// (Paths) and which objects keep the most memory alive (Dominators).
//
// Reader streams the records of a dump; Load builds a compact Graph of it
// (a few dozen bytes per object: interned class names, references as
// integer indexes, no raw JSON kept).
package heap

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Record is one line of a dump. A Reader reuses its Record: References and
// Value are only valid until the next call to Next; the strings are interned
// and stay valid.
type Record struct {
	// Address is the object's address; zero for ROOT lines.
	Address uint64
	// Type is the object type: STRING, ARRAY, OBJECT, CLASS, ..., or ROOT.
	Type string
	// Root names the root set of a ROOT line: vm, machine_context,
	// global_tbl, ...
	Root string
	// Class is the address of the object's class, zero if it has none
	// (IMEMO, hidden objects).
	Class      uint64
	References []uint64
	// Conservative lists the references found by a conservative scan
	// (rbscope's "conservative_references": words that point at an object
	// in memory whose layout is not known, which may be stale).
	Conservative []uint64
	Memsize      uint64
	// Name is a CLASS or MODULE's name (absent for anonymous ones).
	Name string
	// RealClassName is what a singleton class's instances answer to
	// obj.class (dumped for singleton classes instead of a name).
	RealClassName string
	// Value is a STRING or SYMBOL's contents as dumped (HasValue tells
	// whether the line had one).
	Value    []byte
	HasValue bool
	// Bytesize, Length (ARRAY, STRUCT), Size (HASH) and Ivars (OBJECT)
	// are zero when absent.
	Bytesize, Length, Size, Ivars uint64
	ImemoType                     string
	// Struct is a DATA object's type name.
	Struct string
	// File, Line and Generation say where and when the object was allocated
	// when allocation tracing was on (ObjectSpace.trace_object_allocations).
	File       string
	Line       uint64
	Generation uint64
	// InstanceVariables are the instance variables by name of an object
	// or class in rbscope's dumps ("instance_variables", which dump_all
	// does not write), in order; read only by a Reader told to
	// (KeepInstanceVariables).
	InstanceVariables []Ivar
	// DumpedBy is a ROOT line's "dumped_by" (DumpedBy on rbscope's own
	// dumps); Lines its "lines" (on the EndRoot line).
	DumpedBy string
	Lines    uint64
}

// The ends of rbscope's own dumps, by which a reader tells a dump cut
// short from a whole one even when the cut fell between two lines: the
// first line, a ROOT line, carries "dumped_by":"rbscope"; the last is a
// ROOT line named EndRoot, with no references, whose "lines" counts the
// lines before it. Readers of dump_all's format take it for a root that
// holds nothing (ROOT lines have no address and are no object).
const (
	// DumpedBy is the "dumped_by" of rbscope's dumps.
	DumpedBy = "rbscope"
	// EndRoot names the ROOT line that ends rbscope's dumps.
	EndRoot = "rbscope_end"
)

// Ivar is one instance variable: its name and its value, the address of
// an object or, for an immediate, Address 0 and Value as Ruby inspects it
// (5, nil, :sym, 1.5).
type Ivar struct {
	Name    string
	Address uint64
	Value   string
}

// maxIvarsKept bounds the instance variables a Record keeps of one line.
const maxIvarsKept = 1 << 16

func (r *Record) reset() {
	refs, cons, val, ivs := r.References[:0], r.Conservative[:0], r.Value[:0], r.InstanceVariables[:0]
	*r = Record{References: refs, Conservative: cons, Value: val, InstanceVariables: ivs}
}

// Reader reads the records of a dump_all file one line at a time.
type Reader struct {
	name   string
	br     *bufio.Reader
	line   int
	long   []byte
	rec    Record
	intern map[string]string
	p      parser
	// off is where the next line starts in the input, last where the
	// line last read did.
	off, last int64
	ivars     bool
	// records counts the records read; ours says the first was
	// rbscope's, ended that its EndRoot line was read.
	records     uint64
	ours, ended bool
}

// KeepInstanceVariables makes the Reader read "instance_variables" into
// Record.InstanceVariables (left out otherwise: the loading of a whole
// dump has no use for them).
func (r *Reader) KeepInstanceVariables() { r.ivars = true }

// Offset returns the byte offset in the input of the line last read.
func (r *Reader) Offset() int64 { return r.last }

// NewReader returns a Reader of r; name (the file name) prefixes errors.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{
		name:   name,
		br:     bufio.NewReaderSize(r, 1<<20),
		intern: make(map[string]string),
	}
}

// Line returns the number of the line last read (1-based).
func (r *Reader) Line() int { return r.line }

// Error is a malformed line of a dump.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s line %d: %s", e.File, e.Line, e.Msg) }

// Next returns the next record, or io.EOF after the last one. Blank lines
// are skipped. A malformed line is an *Error naming the file and line. A
// dump of rbscope's own must end in its EndRoot line, which Next checks
// and does not return: a dump without it, or with other lines than it
// counts, is cut short (an *Error); so is one whose lines go on after it.
func (r *Reader) Next() (*Record, error) {
	for {
		line, err := r.readLine()
		if err == io.EOF && r.ours && !r.ended {
			return nil, &Error{File: r.name, Line: r.line, Msg: fmt.Sprintf("cut short after %d lines: a dump rbscope wrote ends in a ROOT line %q, and this one has none (a copy that stopped early, or a full disk): dump the process again", r.records, EndRoot)}
		}
		if err != nil {
			return nil, err
		}
		r.last = r.off
		r.off += int64(len(line))
		r.line++
		if blank(line) {
			continue
		}
		r.rec.reset()
		r.p = parser{buf: line, rec: &r.rec, intern: r.intern, ivars: r.ivars}
		if msg := r.p.parseLine(); msg != "" {
			return nil, &Error{File: r.name, Line: r.line, Msg: msg}
		}
		if r.ended {
			return nil, &Error{File: r.name, Line: r.line, Msg: fmt.Sprintf("a line after the ROOT line %q that ends the dump: two dumps in one file?", EndRoot)}
		}
		if r.rec.Type == "ROOT" && r.rec.Root == EndRoot {
			if r.rec.Lines != r.records {
				return nil, &Error{File: r.name, Line: r.line, Msg: fmt.Sprintf("cut: the dump's last line says %d lines came before it, and %d did", r.rec.Lines, r.records)}
			}
			r.ended = true
			continue
		}
		if r.records == 0 && r.rec.Type == "ROOT" && r.rec.DumpedBy == DumpedBy {
			r.ours = true
		}
		r.records++
		return &r.rec, nil
	}
}

// blank tells whether a line holds only JSON whitespace.
func blank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// MaxLine bounds one line of a dump: one object, its longest string value
// included, escaped.
const MaxLine = 256 << 20

func (r *Reader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == nil || (err == io.EOF && len(line) > 0) {
		return line, nil
	}
	if err == io.EOF {
		return nil, io.EOF
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	r.long = append(r.long[:0], line...)
	for {
		if len(r.long) > MaxLine {
			return nil, fmt.Errorf("%s: a line longer than %d MiB: not a heap dump (ObjectSpace.dump_all writes one object per line)", r.name, MaxLine>>20)
		}
		line, err = r.br.ReadSlice('\n')
		r.long = append(r.long, line...)
		if err == nil || err == io.EOF {
			return r.long, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
	}
}

// parser decodes one line. It accepts exactly the JSON that encoding/json
// accepts (FuzzReader checks this) and decodes strings as it does.
type parser struct {
	buf    []byte
	pos    int
	rec    *Record
	intern map[string]string
	scr    []byte // scratch for decoding escaped strings
	ivars  bool   // read instance_variables
}

// errSyntax marks a JSON syntax error; the message is encoding/json's.
const errSyntax = "\x00syntax"

func (p *parser) syntaxError() string {
	var v any
	if err := json.Unmarshal(p.buf, &v); err != nil {
		return "invalid JSON: " + err.Error()
	}
	return fmt.Sprintf("invalid JSON at column %d", p.pos+1) // not reached if the parser agrees with encoding/json
}

func (p *parser) parseLine() string {
	msg := p.object()
	if msg == "" {
		p.ws()
		if p.pos != len(p.buf) {
			msg = errSyntax
		}
	}
	if msg == errSyntax {
		return p.syntaxError()
	}
	if msg != "" {
		// A schema error: make sure the line is at least valid JSON, so
		// that a syntax error later in the line is reported as such.
		if !json.Valid(p.buf) {
			return p.syntaxError()
		}
		return "not dump_all JSON: " + msg
	}
	rec := p.rec
	if rec.Type == "" {
		return "not dump_all JSON: no type"
	}
	if rec.Type != "ROOT" && rec.Address == 0 {
		return "not dump_all JSON: no address"
	}
	return ""
}

func (p *parser) ws() {
	for p.pos < len(p.buf) {
		switch p.buf[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// object parses the top-level object.
func (p *parser) object() string {
	p.ws()
	if p.pos >= len(p.buf) {
		return errSyntax
	}
	if p.buf[p.pos] != '{' {
		if !p.skipValue() {
			return errSyntax
		}
		return "not an object"
	}
	p.pos++
	return p.members('}', func() string {
		key, ok := p.str()
		if !ok {
			return errSyntax
		}
		if len(p.scr) > 0 && len(key) > 0 && &key[0] == &p.scr[0] {
			key = append([]byte(nil), key...) // decoded into scratch: keep it from the value's decoding
		}
		if !p.colon() {
			return errSyntax
		}
		return p.field(key)
	})
}

// members parses the members of an object or array up to its closing
// bracket (the opening one read): item parses one member (an object's is
// key, colon and value) and returns errSyntax, a schema error or "".
// members returns errSyntax, else the first schema error, else "".
func (p *parser) members(closing byte, item func() string) string {
	p.ws()
	if p.pos < len(p.buf) && p.buf[p.pos] == closing {
		p.pos++
		return ""
	}
	schema := ""
	for {
		p.ws()
		msg := item()
		if msg == errSyntax {
			return msg
		}
		if schema == "" {
			schema = msg
		}
		p.ws()
		if p.pos >= len(p.buf) {
			return errSyntax
		}
		switch p.buf[p.pos] {
		case ',':
			p.pos++
		case closing:
			p.pos++
			return schema
		default:
			return errSyntax
		}
	}
}

// colon skips the colon after an object's key and the spaces around it.
func (p *parser) colon() bool {
	p.ws()
	if p.pos >= len(p.buf) || p.buf[p.pos] != ':' {
		return false
	}
	p.pos++
	p.ws()
	return true
}

func (p *parser) isNull() bool {
	if bytes.HasPrefix(p.buf[p.pos:], []byte("null")) {
		p.pos += 4
		return true
	}
	return false
}

// field parses the value of key into the record.
func (p *parser) field(key []byte) string {
	rec := p.rec
	switch string(key) {
	case "address", "class":
		s, ok, msg := p.strField(key)
		if !ok {
			return msg
		}
		a, err := parseAddress(s)
		if err != nil {
			return fmt.Sprintf("bad %s %q", key, s)
		}
		if key[0] == 'a' {
			rec.Address = a
		} else {
			rec.Class = a
		}
	case "type", "root", "name", "real_class_name", "imemo_type", "struct", "file", "dumped_by":
		s, ok, msg := p.strField(key)
		if !ok {
			return msg
		}
		v := p.internBytes(s)
		switch string(key) {
		case "type":
			rec.Type = v
		case "root":
			rec.Root = v
		case "name":
			rec.Name = v
		case "real_class_name":
			rec.RealClassName = v
		case "imemo_type":
			rec.ImemoType = v
		case "struct":
			rec.Struct = v
		case "file":
			rec.File = v
		case "dumped_by":
			rec.DumpedBy = v
		}
	case "value":
		s, ok, msg := p.strField(key)
		if !ok {
			return msg
		}
		rec.Value = append(rec.Value[:0], s...)
		rec.HasValue = true
	case "memsize", "bytesize", "length", "size", "ivars", "line", "generation", "lines":
		if p.isNull() {
			return ""
		}
		n, msg := p.uint()
		if msg != "" {
			if msg == errSyntax {
				return msg
			}
			return string(key) + " " + msg
		}
		switch string(key) {
		case "memsize":
			rec.Memsize = n
		case "bytesize":
			rec.Bytesize = n
		case "length":
			rec.Length = n
		case "size":
			rec.Size = n
		case "ivars":
			rec.Ivars = n
		case "line":
			rec.Line = n
		case "generation":
			rec.Generation = n
		case "lines":
			rec.Lines = n
		}
	case "references":
		rec.References = rec.References[:0]
		if p.isNull() {
			return ""
		}
		return p.addresses("references", &rec.References)
	case "instance_variables":
		if !p.ivars || p.isNull() {
			if !p.skipValue() {
				return errSyntax
			}
			return ""
		}
		return p.instanceVariables()
	case "conservative_references":
		rec.Conservative = rec.Conservative[:0]
		if p.isNull() {
			return ""
		}
		return p.addresses("conservative_references", &rec.Conservative)
	default:
		if !p.skipValue() {
			return errSyntax
		}
	}
	return ""
}

// strField parses the value of a string field: ok is false for null
// (msg "") and on an error (msg says which).
func (p *parser) strField(key []byte) (s []byte, ok bool, msg string) {
	if p.isNull() {
		return nil, false, ""
	}
	s, ok, isStr := p.strValue()
	if !ok {
		return nil, false, errSyntax
	}
	if !isStr {
		return nil, false, string(key) + " is not a string"
	}
	return s, true, ""
}

// addresses parses a list of addresses (the field key) into dst.
func (p *parser) addresses(key string, dst *[]uint64) string {
	if p.pos >= len(p.buf) || p.buf[p.pos] != '[' {
		if !p.skipValue() {
			return errSyntax
		}
		return key + " is not a list"
	}
	p.pos++
	return p.members(']', func() string {
		s, ok, isStr := p.strValue()
		if !ok {
			return errSyntax
		}
		if !isStr {
			return key + ": not a string"
		}
		a, err := parseAddress(s)
		if err != nil {
			return fmt.Sprintf("bad reference %q", s)
		}
		*dst = append(*dst, a)
		return ""
	})
}

// instanceVariables parses "instance_variables": an object from each
// name to a value, an address ("0x...") or an immediate's inspect.
func (p *parser) instanceVariables() string {
	const key = "instance_variables"
	if p.pos >= len(p.buf) || p.buf[p.pos] != '{' {
		if !p.skipValue() {
			return errSyntax
		}
		return key + " is not an object"
	}
	p.pos++
	rec := p.rec
	return p.members('}', func() string {
		name, ok := p.str()
		if !ok {
			return errSyntax
		}
		iv := Ivar{Name: string(name)}
		if !p.colon() {
			return errSyntax
		}
		s, ok, isStr := p.strValue()
		if !ok {
			return errSyntax
		}
		if !isStr {
			return key + ": a value is not a string"
		}
		if bytes.HasPrefix(s, []byte("0x")) {
			a, err := parseAddress(s)
			if err != nil {
				return fmt.Sprintf("%s: bad address %q", key, s)
			}
			iv.Address = a
		} else {
			iv.Value = string(s)
		}
		if len(rec.InstanceVariables) < maxIvarsKept {
			rec.InstanceVariables = append(rec.InstanceVariables, iv)
		}
		return ""
	})
}

func (p *parser) internBytes(b []byte) string {
	if s, ok := p.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.intern) < 1<<20 { // file names and class names; bounded all the same
		p.intern[s] = s
	}
	return s
}

// parseAddress parses "0x7f3fa78f2058".
func parseAddress(b []byte) (uint64, error) {
	if len(b) < 3 || b[0] != '0' || (b[1] != 'x' && b[1] != 'X') || len(b) > 18 {
		return 0, errors.New("bad address")
	}
	var a uint64
	for _, c := range b[2:] {
		d, ok := unhex(c)
		if !ok {
			return 0, errors.New("bad address")
		}
		a = a<<4 | uint64(d)
	}
	if a == 0 {
		return 0, errors.New("null address")
	}
	return a, nil
}

// strValue parses any value: ok is false on a syntax error, isStr tells
// whether it was a string (returned decoded, valid until the next string).
func (p *parser) strValue() (s []byte, ok, isStr bool) {
	if p.pos < len(p.buf) && p.buf[p.pos] == '"' {
		s, ok = p.str()
		return s, ok, true
	}
	return nil, p.skipValue(), false
}

// str parses a string at pos, decoding it as encoding/json does (invalid
// UTF-8 and lone surrogates become U+FFFD). Without escapes or non-ASCII
// bytes it returns a slice of the line.
func (p *parser) str() ([]byte, bool) {
	if p.pos >= len(p.buf) || p.buf[p.pos] != '"' {
		return nil, false
	}
	p.pos++
	start := p.pos
	buf := p.buf
	i := start
	for i < len(buf) {
		c := buf[i]
		if c == '"' {
			p.pos = i + 1
			return buf[start:i], true
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		i++
	}
	// Slow path: decode into scratch.
	out := append(p.scr[:0], buf[start:i]...)
	for i < len(buf) {
		c := buf[i]
		switch {
		case c == '"':
			p.pos = i + 1
			p.scr = out
			return out, true
		case c < 0x20:
			return nil, false
		case c == '\\':
			i++
			if i >= len(buf) {
				return nil, false
			}
			switch buf[i] {
			case '"', '\\', '/':
				out = append(out, buf[i])
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(buf, i+1)
				if !ok {
					return nil, false
				}
				i += 4
				if utf16.IsSurrogate(r) {
					// A pair decodes to one rune; anything else is U+FFFD.
					if i+6 < len(buf) && buf[i+1] == '\\' && buf[i+2] == 'u' {
						if r2, ok := hex4(buf, i+3); ok {
							if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
								out = utf8.AppendRune(out, dec)
								i += 7
								continue
							}
						}
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, false
			}
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(buf[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, buf[i:i+size]...)
			}
			i += size
		}
	}
	return nil, false
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		d, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// unhex returns the value of a hexadecimal digit.
func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// uint parses a non-negative integer.
func (p *parser) uint() (uint64, string) {
	start := p.pos
	if p.pos >= len(p.buf) {
		return 0, errSyntax
	}
	c := p.buf[p.pos]
	if c != '-' && (c < '0' || c > '9') {
		if !p.skipValue() {
			return 0, errSyntax
		}
		return 0, "is not a number"
	}
	if !p.number() {
		return 0, errSyntax
	}
	n, err := strconv.ParseUint(string(p.buf[start:p.pos]), 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("is not a non-negative integer: %s", p.buf[start:p.pos])
	}
	return n, ""
}

// number skips a JSON number.
func (p *parser) number() bool {
	b, i := p.buf, p.pos
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return false
	}
	if b[i] == '0' {
		i++
	} else if b[i] >= '1' && b[i] <= '9' {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	} else {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	p.pos = i
	return true
}

// skipValue skips any JSON value, checking its syntax.
func (p *parser) skipValue() bool {
	return p.skipDepth(0)
}

func (p *parser) skipDepth(depth int) bool {
	if p.pos >= len(p.buf) {
		return false
	}
	c := p.buf[p.pos]
	if (c == '{' || c == '[') && depth+2 > 10000 { // encoding/json's nesting limit (the line's object is level 1)
		return false
	}
	switch {
	case c == '"':
		return p.skipString()
	case c == '{':
		p.pos++
		return p.members('}', func() string {
			if !p.skipString() || !p.colon() || !p.skipDepth(depth+1) {
				return errSyntax
			}
			return ""
		}) == ""
	case c == '[':
		p.pos++
		return p.members(']', func() string {
			if !p.skipDepth(depth + 1) {
				return errSyntax
			}
			return ""
		}) == ""
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return p.number()
	}
}

func (p *parser) literal(s string) bool {
	if bytes.HasPrefix(p.buf[p.pos:], []byte(s)) {
		p.pos += len(s)
		return true
	}
	return false
}

// skipString skips a string, checking its escapes.
func (p *parser) skipString() bool {
	b := p.buf
	if p.pos >= len(b) || b[p.pos] != '"' {
		return false
	}
	i := p.pos + 1
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			i++
			if i >= len(b) {
				return false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if _, ok := hex4(b, i+1); !ok {
					return false
				}
				i += 5
			default:
				return false
			}
		default:
			i++
		}
	}
	return false
}
