package meili

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
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
