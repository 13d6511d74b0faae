package jobdef

import (
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/meilistream/meilistream/internal/clip"
	"github.com/meilistream/meilistream/internal/errs"
)

// EachElement calls fn for every element of a BSON document, in order.
func EachElement(raw []byte, fn func(key string, val bsoncore.Value) error) error {
	length, rem, ok := bsoncore.ReadLength(raw)
	if !ok || int(length) > len(raw) || length < 5 {
		return errs.New(errs.NotADocument, "", "malformed BSON document")
	}
	rem = raw[4 : length-1]
	for len(rem) > 0 {
		el, rest, ok := bsoncore.ReadElement(rem)
		if !ok {
			return errs.New(errs.NotADocument, "", "malformed BSON document")
		}
		key, err := el.KeyErr()
		if err != nil {
			return errs.New(errs.NotADocument, "", "malformed BSON document")
		}
		val, err := el.ValueErr()
		if err != nil {
			return errs.New(errs.NotADocument, "", "malformed BSON value at %q", clipText(key, maxKeyText))
		}
		if err := fn(key, val); err != nil {
			return err
		}
		rem = rest
	}
	return nil
}

// clipText shortens s to at most n bytes for an error message.
func clipText(s string, n int) string { return clip.Text(s, n, "…") }

// maxKeyText is the longest key or id an error message quotes.
const maxKeyText = 64
