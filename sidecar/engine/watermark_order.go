package engine

import (
	"context"
	"errors"
	"math"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// typeRank is MongoDB's canonical sort order of BSON types
// (https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/).
var typeRank = map[bson.Type]int{
	bson.TypeMinKey: 0, bson.TypeNull: 1, bson.TypeUndefined: 1,
	bson.TypeDouble: 2, bson.TypeInt32: 2, bson.TypeInt64: 2, bson.TypeDecimal128: 2,
	bson.TypeString: 3, bson.TypeSymbol: 3, bson.TypeEmbeddedDocument: 4, bson.TypeArray: 5,
	bson.TypeBinary: 6, bson.TypeObjectID: 7, bson.TypeBoolean: 8, bson.TypeDateTime: 9,
	bson.TypeTimestamp: 10, bson.TypeRegex: 11, bson.TypeDBPointer: 12, bson.TypeJavaScript: 13,
	bson.TypeCodeWithScope: 14, bson.TypeMaxKey: 15,
}

// laterTypes returns the type numbers ($type accepts them) of the types
// that sort after t.
func laterTypes(t bson.Type) bson.A {
	r, ok := typeRank[t]
	if !ok {
		return nil
	}
	var out bson.A
	for typ, rank := range typeRank {
		if rank > r && typ != bson.TypeArray { // an _id is never an array
			n := int32(typ)
			if typ == bson.TypeMinKey {
				n = -1
			}
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].(int32) < out[j].(int32) })
	return out
}

// sameBracketAfter is the filter on _id of the documents after last in
// MongoDB's order and of last's canonical type. It is {$gt: last} but
// after a NaN: NaN sorts below every other number, yet a query's $gt or
// $lt with a NaN on either side is false ("NaN is equal to NaN but
// otherwise always compares to false", ComparisonMatchExpression::
// matchesSingleElement, src/mongo/db/matcher/expression_leaf.cpp in
// mongodb/mongo), so {$gt: NaN} matches nothing and would skip every
// other number. The numbers after NaN are those >= -Infinity, a range of
// the _id index ending at +Infinity; NaN is one _id whatever its type
// (the index holds every NaN as one key), so none is left behind. After
// MinKey, {$gt: MinKey} matches every other type, in order, which is what
// sorts after it.
func sameBracketAfter(last bson.RawValue) bson.D {
	if isNaN(last) {
		return bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: math.Inf(-1)}}}}
	}
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: last}}}}
}

// isNaN says whether v is a NaN double or Decimal128.
func isNaN(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeDouble:
		f, ok := v.DoubleOK()
		return ok && math.IsNaN(f)
	case bson.TypeDecimal128:
		d, ok := v.Decimal128OK()
		return ok && d.IsNaN()
	}
	return false
}

// storedTypes are the $type codes of the types every server meilistream
// reads can hold. FerretDB 1.24 stores no others and refuses their codes
// (2 BadValue for undefined, DBPointer, JavaScript, symbol and JavaScript
// with scope; 238 NotImplemented for decimal, MinKey and MaxKey), so on
// such a server a laterTypes list without them leaves no document out.
var storedTypes = map[int32]bool{1: true, 2: true, 3: true, 4: true, 5: true, 7: true, 8: true, 9: true, 10: true, 11: true, 16: true, 17: true, 18: true}

// findTypes is coll.Find, asked once more with filter's $type lists cut to
// storedTypes when the server refuses a type code (BadValue or
// NotImplemented): a read after the last _id of a type (laterTypes) must
// not fail on a server that cannot hold the rarer types.
func findTypes(ctx context.Context, coll *mongo.Collection, filter bson.D, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error) {
	cur, err := coll.Find(ctx, filter, opts...)
	if err == nil || !typeCodeRefused(err) {
		return cur, err
	}
	cut, changed := withStoredTypes(filter)
	if !changed {
		return cur, err
	}
	return coll.Find(ctx, cut.(bson.D), opts...)
}

func typeCodeRefused(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && (se.HasErrorCode(2) || se.HasErrorCode(238))
}

// withStoredTypes is v with every $type list cut to storedTypes (an empty
// one becomes {$in: []}, which matches nothing); changed says whether a
// code was cut.
func withStoredTypes(v any) (any, bool) {
	switch x := v.(type) {
	case bson.D:
		out, changed := make(bson.D, 0, len(x)), false
		for _, e := range x {
			if codes, ok := e.Value.(bson.A); ok && e.Key == "$type" {
				kept := bson.A{}
				for _, c := range codes {
					if n, ok := c.(int32); !ok || storedTypes[n] {
						kept = append(kept, c)
					}
				}
				if len(kept) != len(codes) {
					changed = true
					if len(kept) == 0 {
						e = bson.E{Key: "$in", Value: bson.A{}}
					} else {
						e.Value = kept
					}
				}
				out = append(out, e)
				continue
			}
			val, ch := withStoredTypes(e.Value)
			changed = changed || ch
			out = append(out, bson.E{Key: e.Key, Value: val})
		}
		return out, changed
	case bson.A:
		out, changed := make(bson.A, len(x)), false
		for i, e := range x {
			var ch bool
			out[i], ch = withStoredTypes(e)
			changed = changed || ch
		}
		return out, changed
	}
	return v, false
}
