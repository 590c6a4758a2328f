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
