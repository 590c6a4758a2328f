package procfs

import (
	"bufio"
	"strings"
	"testing"
)

// TestParseMaps: addresses, offset, permissions and paths of a maps file,
// a path with a space and a deleted file's suffix kept whole; a corrupt
// line is refused.
func TestParseMaps(t *testing.T) {
	const maps = `55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1234 /usr/bin/ruby3.1
7f00aa000000-7f00aa100000 r-xp 00020000 fe:01 99 /usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.7
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7f00ab000000-7f00ab001000 rw-p 00000000 00:00 0
7f00ac000000-7f00ac001000 r--p 00000000 fe:01 77 /tmp/a file (deleted)
`
	got, err := ParseMaps(bufio.NewScanner(strings.NewReader(maps)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d mappings, want 5", len(got))
	}
	if got[1].Start != 0x7f00aa000000 || got[1].Offset != 0x20000 || got[1].Perms != "r-xp" || !strings.HasSuffix(got[1].Path, "libruby-3.1.so.3.1.7") {
		t.Errorf("libruby mapping parsed as %+v", got[1])
	}
	if got[3].Path != "" || got[2].Path != "[stack]" || got[4].Path != "/tmp/a file (deleted)" {
		t.Errorf("paths parsed as %q %q %q", got[2].Path, got[3].Path, got[4].Path)
	}
	if _, err := ParseMaps(bufio.NewScanner(strings.NewReader("zz-yy r--p 0 0 0\n"))); err == nil {
		t.Error("a corrupt maps line was accepted")
	}
}
