package transform

import "time"

// SetTestPanic makes reading or writing the field named key panic with
// value, until the returned function is called.
func SetTestPanic(key string, value any) (restore func()) {
	testPanic = func(k string) {
		if k == key {
			panic(value)
		}
	}
	return func() { testPanic = nil }
}

// SetTestTicks makes w poll at each value sent on ticks instead of every
// interval, and send on polled once each poll is over; call it before
// Start.
func (w *Watcher) SetTestTicks(ticks <-chan time.Time, polled chan<- struct{}) {
	w.ticks, w.polled = ticks, polled
}
