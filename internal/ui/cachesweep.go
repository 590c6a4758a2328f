package ui

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// CacheLimits bound what rbscope ui keeps in its cache directory: heap
// dumps and recordings taken from live processes, files dropped on the
// page, indexes of dumps whose own directory is not writable, comparisons
// of dumps. A file is removed once older than MaxAge, and the oldest go
// while the parts together hold more than MaxBytes; a zero limit is no
// limit. A file the server has open (or the index of one) is never
// removed, nor one written in the last minute (it may be being written).
type CacheLimits struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// cacheParts are the cache directory's subdirectories that rbscope ui
// writes, the only places it removes files from.
var cacheParts = []string{"heap-index", "heap-pairs", "dropped", "live"}

// cacheGrace is how recent a file's last change keeps it.
const cacheGrace = time.Minute

// cachedFile is one regular file of a cache part.
type cachedFile struct {
	path string
	size int64
	mod  time.Time
}

// sweepCache applies lim to the parts of the cache directory dir at now,
// sparing the files inUse says are open; it returns how many files it
// removed and their bytes. Only regular files are looked at (a symbolic
// link or a directory someone put there stays).
func sweepCache(dir string, lim CacheLimits, now time.Time, inUse func(string) bool) (removed int, freed int64, err error) {
	if dir == "" || lim.MaxAge <= 0 && lim.MaxBytes <= 0 {
		return 0, 0, nil
	}
	var files []cachedFile
	var total int64
	for _, part := range cacheParts {
		ents, rerr := os.ReadDir(filepath.Join(dir, part))
		if rerr != nil {
			if !os.IsNotExist(rerr) && err == nil {
				err = fmt.Errorf("cache directory: %w", rerr)
			}
			continue
		}
		for _, e := range ents {
			info, ierr := e.Info() // lstat: a link is not followed
			if ierr != nil || !info.Mode().IsRegular() {
				continue
			}
			files = append(files, cachedFile{path: filepath.Join(dir, part, e.Name()), size: info.Size(), mod: info.ModTime()})
			total += info.Size()
		}
	}
	slices.SortFunc(files, func(a, b cachedFile) int { return a.mod.Compare(b.mod) })
	for _, f := range files {
		old := lim.MaxAge > 0 && now.Sub(f.mod) > lim.MaxAge
		over := lim.MaxBytes > 0 && total > lim.MaxBytes
		if !old && !over {
			continue
		}
		if now.Sub(f.mod) < cacheGrace || inUse(f.path) {
			continue
		}
		if rerr := os.Remove(f.path); rerr != nil {
			if err == nil {
				err = fmt.Errorf("cache directory: %w", rerr)
			}
			continue
		}
		removed++
		freed += f.size
		total -= f.size
	}
	return removed, freed, err
}

// sweepCache applies the server's cache limits, sparing the files it has
// open and their indexes, and logs what it removed.
func (s *Server) sweepCache() {
	dir := s.opts.CacheDir
	if dir == "" {
		return
	}
	open := map[string]bool{}
	for _, f := range s.snapshot() {
		for _, p := range append([]string{f.Path}, indexPaths(f.Path, dir)...) {
			if abs, err := filepath.Abs(p); err == nil {
				open[abs] = true
			}
		}
	}
	inUse := func(p string) bool {
		abs, err := filepath.Abs(p)
		return err != nil || open[abs]
	}
	n, freed, err := sweepCache(dir, s.opts.CacheLimits, time.Now(), inUse)
	if n > 0 {
		fmt.Fprintf(s.opts.Log, "rbscope ui: removed %d files (%.1f MB) from %s, past the cache limits (--cache-max-age, --cache-max-mb)\n", n, float64(freed)/1e6, dir)
	}
	if err != nil {
		fmt.Fprintf(s.opts.Log, "rbscope ui: %v\n", err)
	}
}
