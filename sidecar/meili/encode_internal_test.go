package meili

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/meilistream/meilistream/sidecar/sink"
)

// TestABodyIsSizedToItsDocuments: a batch's request body is made as large
// as its documents' JSON, not 768 bytes a document: a body is held while
// its request is on its way, and counts in a reindex's live heap.
func TestABodyIsSizedToItsDocuments(t *testing.T) {
	for bodies.Get() != nil {
		// an empty pool: the body is made for this batch
	}
	writes := make([]sink.Write, 1000)
	positions := make([]int, len(writes))
	for i := range writes {
		writes[i] = sink.Write{Doc: json.RawMessage(fmt.Sprintf(`{"id":"id%04d","n":%d}`, i, i))}
		positions[i] = i
	}
	want := jsonBytes(writes, positions) + 2
	var room, size int
	c := &chunker{max: DefaultMaxPayloadBytes, single: DefaultMaxPayloadBytes, hint: len(writes), bytes: jsonBytes(writes, positions), send: func(body []byte, _ []int) error {
		room, size = cap(body), len(body)
		return nil
	}}
	for _, i := range positions {
		if err := c.addDoc(i, writes[i].Doc); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	if size != want-1 || room < size || room > want {
		t.Errorf("a body of %d bytes in a buffer of %d, want %d bytes in at most %d", size, room, want-1, want)
	}
}
