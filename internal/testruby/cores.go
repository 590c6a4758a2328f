package testruby

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// CoreCache is the directory under which stored cores are decompressed,
// once: $RBSCOPE_CORE_CACHE, default /var/cache/rbscope.
func CoreCache() string {
	if d := os.Getenv("RBSCOPE_CORE_CACHE"); d != "" {
		return d
	}
	return "/var/cache/rbscope"
}

// EnvOr returns the environment variable name, or def when it is unset.
func EnvOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// UnpackCore decompresses a .gz or .zst core into dir, once (again only
// when the source is newer), and returns its path. The decompressed file
// appears under its name only whole. Any other file is returned as is.
func UnpackCore(t testing.TB, src, dir string) string {
	t.Helper()
	base := filepath.Base(src)
	name := strings.TrimSuffix(strings.TrimSuffix(base, ".gz"), ".zst")
	dst := filepath.Join(dir, name)
	if st, err := os.Stat(dst); err == nil && st.Size() > 0 {
		if sst, err := os.Stat(src); err == nil && !st.ModTime().Before(sst.ModTime()) {
			return dst // unpacked after the source was last written
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("no cache directory for decompressed cores: %v", err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var r io.Reader
	switch {
	case strings.HasSuffix(base, ".gz"):
		zr, err := gzip.NewReader(in)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		r = zr
	case strings.HasSuffix(base, ".zst"):
		zr, err := zstd.NewReader(in)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		defer zr.Close()
		r = zr
	default:
		return src
	}
	tmp, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		t.Skipf("cannot write decompressed cores to %s: %v", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		t.Fatalf("decompressing %s: %v", src, err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		t.Fatal(err)
	}
	return dst
}
