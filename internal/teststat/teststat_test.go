package teststat

import (
	"math"
	"testing"
)

// TestZ checks the quantiles against the normal distribution's tail: Z(k)
// leaves FalseFailures/k outside ±Z, and grows with k.
func TestZ(t *testing.T) {
	prev := 0.0
	for _, k := range []int{1, 2, 10, 100, 1000} {
		z := Z(k)
		if tail := math.Erfc(z / math.Sqrt2); math.Abs(tail-FalseFailures/float64(k)) > 1e-3*FalseFailures/float64(k) {
			t.Errorf("Z(%d) = %.4f leaves %.3g outside, want %.3g", k, z, tail, FalseFailures/float64(k))
		}
		if z <= prev {
			t.Errorf("Z(%d) = %.4f, not above Z of fewer checks (%.4f)", k, z, prev)
		}
		prev = z
	}
	if z := Z(1); math.Abs(z-3.8906) > 1e-3 {
		t.Errorf("Z(1) = %.4f, want 3.8906", z)
	}
}

// TestShareAndCount checks the tolerances' scale: a share's shrinks as
// the square root of its samples, and neither is ever 0.
func TestShareAndCount(t *testing.T) {
	if a, b := Share(0.3, 100, 1), Share(0.3, 400, 1); math.Abs(a/b-2) > 1e-9 {
		t.Errorf("Share on 100 and 400 samples: %.4f and %.4f, want a ratio of 2", a, b)
	}
	if Share(0, 100, 1) <= 0 || Share(1, 100, 1) <= 0 || Count(0, 1) <= 0 {
		t.Error("a tolerance of 0")
	}
	if got, want := Count(100, 1), Z(1)*10; math.Abs(got-want) > 1e-9 {
		t.Errorf("Count(100, 1) = %.4f, want %.4f", got, want)
	}
}

// TestWindowLogs reads the host's times over a window.
func TestWindowLogs(t *testing.T) {
	w := Watch(t)
	h := w.Log()
	if h.Busy < 0 || h.Busy > 1 || h.Steal < 0 {
		t.Errorf("host over a window: %+v", h)
	}
}
