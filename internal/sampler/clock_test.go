package sampler

import (
	"testing"
	"time"
)

// TestSampleClockPick: each instant falls in its own period, never before
// the time it is drawn at, one period after another, and the instants are
// spread over the whole period rather than on an even grid.
func TestSampleClockPick(t *testing.T) {
	const period = 10 * time.Millisecond
	start := time.Unix(1000, 0)
	c := &sampleClock{period: period, slot: start}
	var tenths [10]int
	now := start
	for i := 0; i < 2000; i++ {
		wait := c.pick(now)
		at := now.Add(wait)
		if wait < 0 || at.Before(c.slot) || !at.Before(c.slot.Add(period)) {
			t.Fatalf("draw %d: instant %v is outside its period [%v, %v) or before now %v", i, at, c.slot, c.slot.Add(period), now)
		}
		if off := c.slot.Sub(start); off%period != 0 {
			t.Fatalf("draw %d: period starts %v after the first, not a whole number of periods", i, off)
		}
		tenths[at.Sub(c.slot)*10/period]++
		now = at
		c.slot = c.slot.Add(period) // what next does
	}
	for i, n := range tenths {
		if n < 100 { // 200 expected in each tenth
			t.Errorf("instants in tenth %d of the period: %d of 2000 (%v)", i, n, tenths)
		}
	}
	// A sample that ran past the next period's end skips that period.
	c = &sampleClock{period: period, slot: start}
	late := start.Add(35 * time.Millisecond)
	at := late.Add(c.pick(late))
	if c.slot != start.Add(30*time.Millisecond) && c.slot != start.Add(40*time.Millisecond) || at.Before(late) {
		t.Errorf("after a late sample: period %v, instant %v (now %v)", c.slot.Sub(start), at.Sub(start), late.Sub(start))
	}
}

// TestSampleClockWait: wait returns true at the instant (not before), and
// false when done is closed or the end comes first; sleeping on the
// thread (nap) or on a runtime timer alike.
func TestSampleClockWait(t *testing.T) {
	for _, nap := range []bool{false, true} {
		c := &sampleClock{period: time.Second}
		c.at = time.Now().Add(30 * time.Millisecond)
		if !c.wait(nil, time.Time{}, nap) || time.Now().Before(c.at) {
			t.Errorf("nap %v: wait returned before the instant, or false", nap)
		}
		c.at = time.Now().Add(time.Hour)
		end := time.Now().Add(30 * time.Millisecond)
		if c.wait(nil, end, nap) || time.Now().Before(end) {
			t.Errorf("nap %v: wait with the end before the instant: true, or before the end", nap)
		}
		done := make(chan struct{})
		time.AfterFunc(30*time.Millisecond, func() { close(done) })
		if c.wait(done, time.Time{}, nap) {
			t.Errorf("nap %v: wait returned true with done closed and the instant an hour away", nap)
		}
		c.Stop()
	}
}
