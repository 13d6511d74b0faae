package meili

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// writesConn records each Write it is given.
type writesConn struct {
	net.Conn
	writes []int
	buf    bytes.Buffer
}

func (c *writesConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, len(p))
	return c.buf.Write(p)
}

// A batch body goes to the connection in one write; any other body is
// copied as the transport would, and both arrive whole.
func TestBodyConnWritesABatchBodyAtOnce(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640 000 bytes, 20 copies' worth of 32 KB
	tb := &trackedBody{closed: make(chan struct{})}
	tb.Reset(body)
	wc := &writesConn{}
	n, err := bodyConn{wc}.ReadFrom(io.LimitReader(tb, int64(len(body))))
	if err != nil || n != int64(len(body)) || !bytes.Equal(wc.buf.Bytes(), body) {
		t.Fatalf("wrote %d bytes, err %v, same %v", n, err, bytes.Equal(wc.buf.Bytes(), body))
	}
	if len(wc.writes) != 1 {
		t.Fatalf("%d writes: %v", len(wc.writes), wc.writes)
	}

	other := strings.Repeat("x", 100000)
	wc = &writesConn{}
	n, err = bodyConn{wc}.ReadFrom(io.LimitReader(strings.NewReader(other), int64(len(other))))
	if err != nil || n != int64(len(other)) || wc.buf.String() != other {
		t.Fatalf("other body: wrote %d bytes, err %v", n, err)
	}
	if len(wc.writes) < 2 {
		t.Fatalf("another body is copied through a buffer: %v", wc.writes)
	}
}

// An upload's deadline grows with its size: RequestTimeout, plus the time
// the body takes at UploadRate.
func TestUploadDeadlineGrowsWithItsSize(t *testing.T) {
	o := Options{RequestTimeout: time.Second, UploadRate: 1 << 20}.withDefaults()
	for n, want := range map[int]time.Duration{0: time.Second, 1 << 20: 2 * time.Second, 64 << 20: 65 * time.Second} {
		if got := o.uploadTimeout(n); got != want {
			t.Errorf("%d bytes: %s, want %s", n, got, want)
		}
	}
	if d := (Options{}).withDefaults(); d.RequestTimeout != DefaultRequestTimeout || d.MaxPayloadBytes != DefaultMaxPayloadBytes ||
		d.MaxPayloadBytes >= 100_000_000 {
		t.Errorf("defaults %+v", d)
	}
}

// The depth of a document counts containers only, never brackets inside
// strings, escaped quotes included.
func TestJSONDepth(t *testing.T) {
	for in, want := range map[string]int{
		`1`:                                0,
		`{}`:                               1,
		`{"a":[1,{"b":[]}]}`:               4,
		`{"a":"[[[[{{{{"}`:                 1,
		`{"a":"\"[[[[","b":"\\","c":[[]]}`: 3,
		`{"a":"\\\"{{{{\\"}`:               1,
	} {
		if got := jsonDepth([]byte(in)); got != want {
			t.Errorf("%s: depth %d, want %d", in, got, want)
		}
	}
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	if depthOver([]byte(deep), 128) != 200 || depthOver([]byte(deep), 200) != 0 {
		t.Error("depthOver of 200 levels")
	}
	brackets := `{"a":"` + strings.Repeat("[", 300) + `"}`
	if depthOver([]byte(brackets), 128) != 0 {
		t.Error("brackets in a string counted as depth")
	}
}

// Retry-After is read in seconds or as an HTTP date, and capped.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"":                              0,
		"7":                             7 * time.Second,
		"-3":                            0,
		"soon":                          0,
		"999999999":                     maxRetryAfter,
		"Fri, 02 Jan 2026 03:04:35 GMT": 30 * time.Second,
		"Fri, 02 Jan 2026 03:00:00 GMT": 0,
	} {
		if got := parseRetryAfter(h, now); got != want {
			t.Errorf("%q: %s, want %s", h, got, want)
		}
	}
}

// A message is cut on a rune boundary, never inside a UTF-8 character.
func TestCutKeepsUTF8(t *testing.T) {
	s := strings.Repeat("é", 10) // 20 bytes
	for n := 0; n <= 21; n++ {
		if got := cut(s, n); !utf8.ValidString(got) {
			t.Fatalf("cut at %d: %q", n, got)
		}
	}
}
