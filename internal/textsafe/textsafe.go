// Package textsafe makes text that came from a target safe to print on a
// terminal or to put in a mail header: a hostile process chooses its thread
// names, file paths, method names and command line, and escape sequences in
// them would reach the terminal of whoever reads rbscope's output.
package textsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Clean returns s with every byte that is not printable text written as an
// escape: control characters (ESC, CR, LF, TAB, DEL, the C1 controls) and
// bytes that are not UTF-8 as \xNN, other unprintable runes (bidirectional
// overrides, format characters) as \uNNNN, and the backslash as \\ so that
// an escape cannot be faked. Printable text, spaces included, is unchanged.
func Clean(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r != ' ' && !unicode.IsPrint(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Header returns s fit for a mail header's value: cleaned as Clean does, so
// no CR or LF can start another header.
func Header(s string) string { return Clean(s) }
