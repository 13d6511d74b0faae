package lease

import "time"

// SetClock replaces the process clock of m (scheduling and the holder's own
// give-up rule), so tests can skew it.
func SetClock(m *Manager, now func() time.Time) { m.now = now }

// Nonce exposes a lease's private nonce so tests can check it never leaks.
func Nonce(l *Lease) string { return l.nonce }
