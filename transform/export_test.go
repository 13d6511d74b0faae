package transform

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
