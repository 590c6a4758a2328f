package crash

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzNoteCatcher streams random bytes, in random chunk sizes, through the
// note catcher as the crash handler does with a core from a dying (perhaps
// hostile) process: it must keep at most its bounds and never panic.
func FuzzNoteCatcher(f *testing.F) {
	// An ELF64 core header whose one PT_NOTE points past the headers.
	seed := make([]byte, 4096)
	copy(seed, "\x7fELF\x02\x01\x01")
	binary.LittleEndian.PutUint16(seed[16:], 4)      // ET_CORE
	binary.LittleEndian.PutUint16(seed[18:], 62)     // EM_X86_64
	binary.LittleEndian.PutUint32(seed[20:], 1)      // EV_CURRENT
	binary.LittleEndian.PutUint64(seed[32:], 64)     // e_phoff
	binary.LittleEndian.PutUint16(seed[52:], 64)     // e_ehsize
	binary.LittleEndian.PutUint16(seed[54:], 56)     // e_phentsize
	binary.LittleEndian.PutUint16(seed[56:], 1)      // e_phnum
	binary.LittleEndian.PutUint32(seed[64:], 4)      // PT_NOTE
	binary.LittleEndian.PutUint64(seed[64+8:], 200)  // p_offset
	binary.LittleEndian.PutUint64(seed[64+32:], 300) // p_filesz
	f.Add(seed, uint16(7))
	f.Add([]byte("\x7fELF"), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint16) {
		var c noteCatcher
		step := int(chunk)%4096 + 1
		for r := bytes.NewReader(data); r.Len() > 0; {
			b := make([]byte, min(step, r.Len()))
			r.Read(b)
			c.Write(b)
		}
		if len(c.head) > headerBytes || c.total > notesPrefix {
			t.Fatalf("kept %d header and %d note bytes", len(c.head), c.total)
		}
		c.threads()
	})
}
