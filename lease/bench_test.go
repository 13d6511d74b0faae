package lease_test

import (
	"testing"

	"github.com/meilistream/meilistream/lease"
)

// BenchmarkConfirm measures one renewal round trip (what Keep does every
// TTL/3 and the engine before each destructive step).
func BenchmarkConfirm(b *testing.B) {
	e := newEnv(b)
	l := e.acquire(e.manager("a:1:x", lease.Options{}), "job")
	ctx := ctxT(b)
	for b.Loop() {
		if err := l.Confirm(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireRelease measures taking a free lease and giving it up.
func BenchmarkAcquireRelease(b *testing.B) {
	e := newEnv(b)
	m := e.manager("a:1:x", lease.Options{})
	ctx := ctxT(b)
	for b.Loop() {
		l, err := m.Acquire(ctx, "job")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
