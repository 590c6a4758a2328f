package binary_test

import (
	"debug/dwarf"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	rbinary "github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
)

// TestDebugSourceAgrees opens the C library of a live process, whose
// static functions are named only in its separate debug file (Debian's
// libc6-dbg), and checks that Symbol, FunctionAt and DWARF read the one
// debug source chosen: each static function of the debug file's .symtab
// (read here with debug/elf) is found by name at its address, named by
// address, and is the subprogram DWARF places there.
func TestDebugSourceAgrees(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	tg, err := target.Attach(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	var maps []target.Mapping
	var libc string
	for i := 0; libc == ""; i++ {
		if maps, err = tg.Mappings(); err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if filepath.Base(m.Path) == "libc.so.6" {
				libc = m.Path
			}
		}
		if libc == "" && i > 1000 {
			t.Fatal("setup: sleep maps no libc.so.6")
		}
	}
	im, err := rbinary.Open(tg, maps, libc)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	id := im.BuildID()
	debugPath := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	if _, err := os.Stat(debugPath); err != nil {
		testruby.Missing(t, "the C library's debug file %s (apt-get install libc6-dbg)", debugPath)
	}
	src := im.DebugSource()
	if src.DebugFile != debugPath || src.DWARF != debugPath || len(src.Symbols) == 0 || src.Symbols[0] != ".symtab of "+debugPath {
		t.Fatalf("debug source %+v, want symbols and DWARF from %s", src, debugPath)
	}

	ef, err := elf.Open(debugPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	// Static functions with a unique name and address of their own.
	byName, byAddr := map[string]int{}, map[uint64]int{}
	for _, s := range syms {
		byName[s.Name]++
		byAddr[s.Value]++
	}
	var static []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) == elf.STB_LOCAL && s.Size > 0 && s.Value != 0 &&
			byName[s.Name] == 1 && byAddr[s.Value] == 1 {
			static = append(static, s)
		}
	}
	if len(static) < 100 {
		t.Fatalf("setup: %d static functions in %s", len(static), debugPath)
	}
	sort.Slice(static, func(i, j int) bool { return static[i].Value < static[j].Value })

	d := im.DWARF()
	if d == nil {
		t.Fatalf("no DWARF, though the debug source says %s", src.DWARF)
	}
	sampled, inDWARF := 0, 0
	for i := 0; i < len(static); i += len(static) / 100 {
		s := static[i]
		sampled++
		addr, size, err := im.Symbol(s.Name)
		if err != nil || addr != s.Value+im.Bias || size != s.Size {
			t.Errorf("Symbol(%s) = %#x, %d, %v; the debug file's .symtab says %#x+%#x, %d", s.Name, addr, size, err, s.Value, im.Bias, s.Size)
		}
		name, start, _, ok := im.FunctionAt(s.Value + im.Bias + s.Size/2)
		if !ok || name != s.Name || start != s.Value {
			t.Errorf("FunctionAt(%s+%d) = %q at %#x (%v)", s.Name, s.Size/2, name, start, ok)
		}
		if dn, found := subprogramAt(t, d, s.Value); found {
			inDWARF++
			if dn != s.Name {
				t.Errorf("DWARF names the subprogram at %#x %q, the symbols %q", s.Value, dn, s.Name)
			}
		}
	}
	t.Logf("%d static functions sampled, %d of them subprograms in the DWARF", sampled, inDWARF)
	if inDWARF < 20 {
		t.Errorf("only %d of the static functions sampled are subprograms in the DWARF", inDWARF)
	}
}

// subprogramAt returns the name of the subprogram whose low pc is pc in the
// compilation unit that covers pc.
func subprogramAt(t *testing.T, d *dwarf.Data, pc uint64) (string, bool) {
	r := d.Reader()
	cu, err := r.SeekPC(pc)
	if err != nil || cu == nil {
		return "", false
	}
	for {
		e, err := r.Next()
		if err != nil || e == nil || e.Tag == dwarf.TagCompileUnit {
			return "", false
		}
		if e.Tag != dwarf.TagSubprogram {
			continue
		}
		if low, ok := e.Val(dwarf.AttrLowpc).(uint64); ok && low == pc {
			name, _ := e.Val(dwarf.AttrName).(string)
			return name, name != ""
		}
	}
}
