package engine

import (
	"math"
	"sort"

	"go.mongodb.org/mongo-driver/v2/bson"
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
