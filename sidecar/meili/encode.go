package meili

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/meilistream/meilistream/jobdef"
	"github.com/meilistream/meilistream/sidecar/sink"
)

// MaxDocumentDepth is how deeply a document sent to Meilisearch may nest,
// the document itself counted as one level. Meilisearch reads a JSON array
// of documents without a depth limit (serde_json skips each document as a
// raw value, de.rs ignore_value), but indexing parses each searchable or
// faceted top-level field into a serde_json Value (milli's
// tokenize_document.rs and facet_document.rs, serde_json::to_value of the
// field's RawValue, which parses it with from_str), under serde_json's
// recursion limit of 128: a field's value may hold 127 nested containers.
// A deeper one fails the whole batch of tasks with an internal error
// ("recursion limit exceeded"), which names no document; the sink refuses
// such a document before sending it.
const MaxDocumentDepth = 128

// Per-document refusal codes of the sink's own (DocFailure.Code), beside
// Meilisearch's.
const (
	// CodeTooDeep: the document nests deeper than MaxDocumentDepth.
	CodeTooDeep = "document_too_deep"
	// CodeNotJSON: the document could not be rendered as JSON.
	CodeNotJSON = "not_json"
	// CodePayloadTooLarge is Meilisearch's own code, also given to a
	// document larger alone than Options.MaxPayloadBytes.
	CodePayloadTooLarge = "payload_too_large"
)

// depthOver returns the depth of the JSON value b when it is over limit,
// else 0. A value with no more than limit brackets cannot be deeper,
// whatever they are; counting them (vectorized) is cheaper than walking
// the value, which only values with many brackets need.
func depthOver(b []byte, limit int) int {
	if bytes.Count(b, []byte{'{'})+bytes.Count(b, []byte{'['}) <= limit {
		return 0
	}
	if d := jsonDepth(b); d > limit {
		return d
	}
	return 0
}

// jsonDepth returns how deeply the containers of the JSON value b nest (0
// for a scalar, 1 for {"a":1}), reading strings as opaque. b is valid JSON.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for {
				j := bytes.IndexByte(b[i+1:], '"')
				if j < 0 {
					return deepest
				}
				i += j + 1
				// A quote after an odd number of backslashes is escaped.
				k := i - 1
				for b[k] == '\\' {
					k--
				}
				if (i-1-k)%2 == 0 {
					break
				}
			}
		case '{', '[':
			if depth++; depth > deepest {
				deepest = depth
			}
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// chunker renders writes of a batch as JSON arrays of at most max bytes,
// handing each array, with the positions of the writes it holds, to send.
// A write that cannot go in any array is refused on its own (failed).
type chunker struct {
	max    int   // the largest array to send
	single int64 // a document larger alone than this is refused unsent
	send   func(body []byte, positions []int) error
	failed []sink.DocFailure

	buf       []byte
	positions []int
	hint      int // how many writes may come: the capacity of positions
	// bytes is what the writes to come take as JSON, when known (0: about
	// 768 bytes a write): the first array's buffer is made that large.
	bytes int
}

// addDoc appends document doc (position pos) as rendered by
// jobdef.AppendJSON.
func (c *chunker) addDoc(pos int, doc any) error {
	if c.buf == nil {
		c.start()
	}
	mark := len(c.buf)
	if len(c.positions) > 0 {
		c.buf = append(c.buf, ',')
	}
	start := len(c.buf)
	var err error
	if c.buf, err = jobdef.AppendJSON(c.buf, doc); err != nil {
		c.buf = c.buf[:mark]
		c.failed = append(c.failed, sink.DocFailure{Writes: []int{pos}, Code: CodeNotJSON, Message: err.Error()})
		return nil
	}
	if d := depthOver(c.buf[start:], MaxDocumentDepth); d > 0 {
		c.buf = c.buf[:mark]
		c.failed = append(c.failed, sink.DocFailure{Writes: []int{pos}, Code: CodeTooDeep, Message: fmt.Sprintf(
			"the document nests %d levels deep (the document counted); Meilisearch indexes at most %d: it parses each field under serde_json's recursion limit, and a deeper one fails the whole batch",
			d, MaxDocumentDepth)})
		return nil
	}
	return c.placed(mark, start, pos)
}

// addID appends the id (a string) of a delete at pos.
func (c *chunker) addID(pos int, id string) error {
	if c.buf == nil {
		c.start()
	}
	mark := len(c.buf)
	if len(c.positions) > 0 {
		c.buf = append(c.buf, ',')
	}
	start := len(c.buf)
	c.buf, _ = jobdef.AppendJSON(c.buf, id)
	return c.placed(mark, start, pos)
}

// placed keeps the value just appended at buf[start:] (the array was
// mark bytes long before it), or refuses it when alone it is over the
// single limit, or sends the array without it and starts the next one
// with it when it does not fit.
func (c *chunker) placed(mark, start, pos int) error {
	n := len(c.buf) - start
	if int64(n)+2 > c.single {
		c.buf = c.buf[:mark]
		c.failed = append(c.failed, sink.DocFailure{Writes: []int{pos}, Code: CodePayloadTooLarge, Message: fmt.Sprintf(
			"the document is %d bytes, more than the %d bytes one request to Meilisearch may carry", n, c.single)})
		return nil
	}
	if len(c.buf)+1 > c.max && len(c.positions) > 0 {
		next := takeBody(max(min(c.max, 256<<10), n+2))
		next = append(next, '[')
		next = append(next, c.buf[start:]...)
		c.buf = c.buf[:mark]
		if err := c.flush(); err != nil {
			releaseBody(next)
			return err
		}
		c.buf = next
		c.positions = make([]int, 0, c.hint)
	}
	c.positions = append(c.positions, pos)
	return nil
}

func (c *chunker) start() {
	// What the writes take, or about 768 bytes a document, as far as one
	// request goes.
	n := c.bytes + 2
	if c.bytes == 0 {
		n = max(c.hint, 1) * 768
	}
	c.buf = append(takeBody(min(c.max+1, n, maxPooledBody)), '[')
	c.positions = make([]int, 0, c.hint)
}

// flush sends the array being built, if it holds anything; send owns the
// body from then on.
func (c *chunker) flush() error {
	if len(c.positions) == 0 {
		if c.buf != nil {
			releaseBody(c.buf)
		}
		c.buf = nil
		return nil
	}
	body, positions := append(c.buf, ']'), c.positions
	c.buf, c.positions = nil, nil
	return c.send(body, positions)
}

// bodies holds the buffers request bodies are encoded into (*[]byte), so a
// batch does not allocate (and the runtime zero and later return to the
// kernel) a body of hundreds of kilobytes each time.
var bodies sync.Pool

// maxPooledBody is the largest body buffer kept for reuse.
const maxPooledBody = 32 << 20

func takeBody(n int) []byte {
	if p, ok := bodies.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]byte, 0, n)
}

// releaseBody gives buf back for reuse; the caller no longer uses it.
func releaseBody(buf []byte) {
	if cap(buf) > maxPooledBody || cap(buf) == 0 {
		return
	}
	bodies.Put(&buf)
}
