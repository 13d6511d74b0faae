package meili

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// An answer whose length is given is read into one buffer of that length,
// not into one grown (and copied) to it.
func TestAnAnswerOfAGivenLengthIsReadIntoOneBuffer(t *testing.T) {
	body := bytes.Repeat([]byte(`{"id":"1","title":"x"},`), 1<<16) // 1.5 MB
	const runs = 20
	bodies := make([]io.ReadCloser, runs+1) // AllocsPerRun runs once more to warm up
	for i := range bodies {
		bodies[i] = io.NopCloser(bytes.NewReader(body))
	}
	resp := &http.Response{ContentLength: int64(len(body))}
	var got []byte
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		resp.Body = bodies[i]
		i++
		b, tooLarge, err := readAnswer(resp)
		if err != nil || tooLarge {
			t.Fatalf("readAnswer: tooLarge %v, err %v", tooLarge, err)
		}
		got = b
	})
	if !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes, not the %d sent", len(got), len(body))
	}
	if allocs != 1 {
		t.Fatalf("%v allocations per answer, want the one buffer", allocs)
	}
}

func TestAnAnswersLengthIsBoundedAndKept(t *testing.T) {
	small := []byte(`{"results":[]}`)
	for _, c := range []struct {
		name     string
		length   int64
		body     []byte
		tooLarge bool
		fails    bool
	}{
		{"a length over the bound is refused unread", maxAnswer + 1, small, true, false},
		{"a hostile length is refused unread", 1 << 40, small, true, false},
		{"a body shorter than its length is not an answer", int64(len(small)) + 10, small, false, true},
		{"an empty body of length 0 is read", 0, nil, false, false},
		{"a body without a length is read to its end", -1, small, false, false},
		{"a body without a length is cut past the bound", -1, make([]byte, maxAnswer+1), true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, tooLarge, err := readAnswer(&http.Response{ContentLength: c.length, Body: io.NopCloser(bytes.NewReader(c.body))})
			if tooLarge != c.tooLarge || (err != nil) != c.fails {
				t.Fatalf("tooLarge %v, err %v", tooLarge, err)
			}
			if !c.tooLarge && !c.fails && !bytes.Equal(b, c.body) {
				t.Fatalf("read %q", b)
			}
		})
	}
}

// A server's Content-Length reaches readAnswer as the transport read it:
// one far over the bound is refused before a byte of the body is read.
func TestAHostileContentLengthFromTheWireIsRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
			return
		}
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.FormatInt(1<<40, 10)+"\r\n\r\n{}")
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != 1<<40 {
		t.Fatalf("the transport gave length %d", resp.ContentLength)
	}
	b, tooLarge, err := readAnswer(resp)
	if !tooLarge || err != nil || b != nil {
		t.Fatalf("readAnswer = %d bytes, tooLarge %v, err %v", len(b), tooLarge, err)
	}
	first := make([]byte, 1)
	if n, _ := resp.Body.Read(first); n != 1 || first[0] != '{' {
		t.Fatalf("the body was read: next %q", first[:n])
	}
}
