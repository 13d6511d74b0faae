package transform

import (
	"context"
	"testing"
	"time"
)

// A runtime nobody used for idleRuntime is let go, and the next call
// makes one again: a quiet job holds no runtime.
func TestPoolLetsIdleRuntimesGo(t *testing.T) {
	defer func(d time.Duration) { idleRuntime = d }(idleRuntime)
	idleRuntime = time.Millisecond
	ctx := context.Background()
	made := 0
	p := newPool(2, func(context.Context) (*vm, error) {
		made++
		v := &vm{}
		v.start()
		return v, nil
	})
	v, err := p.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.put(v)
	for deadline := time.Now().Add(20 * time.Second); len(p.sem) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the idle runtime is still held")
		}
		time.Sleep(time.Millisecond)
	}
	if v, err = p.get(ctx); err != nil {
		t.Fatal(err)
	}
	if made != 2 || len(p.sem) != 1 {
		t.Fatalf("%d runtimes made, %d held; want 2 made, 1 held", made, len(p.sem))
	}
	p.discard(v)
}
