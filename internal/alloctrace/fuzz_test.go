package alloctrace

import "testing"

// FuzzParseSites feeds random answers, as a hostile process could write
// them to the answer pipe, to the allocation report parser: an error or a
// report, never a panic.
func FuzzParseSites(f *testing.F) {
	f.Add([]byte("app.rb\x003\x00String\x0012\x00480\x00"))
	f.Add([]byte("\x00\x00\x00\x00\x00"))
	f.Add([]byte("a\x00-1\x00B\x0099999999999999999999\x00x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parseSites(data)
	})
}
