package engine

import (
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
