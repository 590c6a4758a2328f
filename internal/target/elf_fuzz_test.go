package target

import (
	"bytes"
	"testing"
)

// FuzzReadELFHeaders parses random bytes as a core's ELF headers, as rbscope
// core and the crash handler do with files a hostile process may shape.
func FuzzReadELFHeaders(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x3e\x00\x01\x00\x00\x00"))
	f.Add([]byte("\x7fELF\x01\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := ReadELFHeaders(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, p := range ef.Progs {
			_ = p.Open()
		}
	})
}
