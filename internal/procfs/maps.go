package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one region of an address space, as /proc/PID/maps shows it.
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp" and the like
	Offset     uint64 // file offset of Start
	Inode      uint64
	Dev        uint64 // device of the inode, as stat's st_dev (0 when unknown)
	Path       string // backing file, or "[heap]", "[stack]", "" for anonymous
}

// Contains reports whether addr lies inside the mapping.
func (m Mapping) Contains(addr uint64) bool { return addr >= m.Start && addr < m.End }

// ReadMapsFile reads the maps file at path (under a mount of /proc), at
// most limit bytes of it: a process makes its maps file as long as it
// likes.
func ReadMapsFile(path string, limit int64) ([]Mapping, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) == limit { // the mappings past it are left out, and a line cut short
		b = b[:bytes.LastIndexByte(b, '\n')+1]
	}
	return ParseMaps(bufio.NewScanner(bytes.NewReader(b)))
}

// ReadMaps reads the mappings of process pid (its maps file, whole: the
// mappings of a process rbscope reads; see ReadMapsFile for a bound).
// Its error is the open's as the os package gives it (os.ErrPermission,
// os.ErrNotExist) or the parse's.
func ReadMaps(pid int) ([]Mapping, error) {
	f, err := os.Open(filepath.Join(taskDir(pid, 0), "maps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMaps(bufio.NewScanner(f))
}

// ParseMaps parses the text format of /proc/PID/maps. A path may hold
// spaces (kept as one path); a mapping whose file was removed keeps the
// kernel's " (deleted)" suffix.
func ParseMaps(sc *bufio.Scanner) ([]Mapping, error) {
	var maps []Mapping
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("bad maps line %q", sc.Text())
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		inode, err4 := strconv.ParseUint(fields[4], 10, 64)
		major, minor, _ := strings.Cut(fields[3], ":")
		maj, err5 := strconv.ParseUint(major, 16, 32)
		mnr, err6 := strconv.ParseUint(minor, 16, 32)
		if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
			return nil, fmt.Errorf("bad maps line %q: %w", sc.Text(), err)
		}
		m := Mapping{Start: start, End: end, Perms: fields[1], Offset: off, Inode: inode, Dev: unix.Mkdev(uint32(maj), uint32(mnr))}
		if len(fields) > 5 {
			m.Path = strings.Join(fields[5:], " ")
		}
		maps = append(maps, m)
	}
	return maps, sc.Err()
}
