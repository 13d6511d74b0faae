package mongotest

import (
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The positional $ of an update ({$set: {"tags.$": v}}) stands for the
// array position at which the update's filter matched the document:
// mongod's MatchDetails elemMatchKey, recorded while the filter is matched
// (src/mongo/db/matcher/expression_leaf.cpp, PathMatchExpression::matches;
// src/mongo/db/matcher/path.cpp, BSONElementIterator). Its rules, kept here:
//   - a condition on a path records the position of the first value that
//     satisfies it, in mongod's order: the elements of an array found at
//     the path, then the array itself (which records nothing of its own);
//   - the position is in the outermost array the path crosses ("preferring
//     the outermost array offset", path.cpp), so {"a.b": 2} on
//     {a: [{b: [1, 2]}]} records 0;
//   - $elemMatch records the element that matched; an implicit or explicit
//     $and takes the last of its conditions that recorded one; $or the
//     first branch that matches; negations ($ne, $nin, $not, $nor) and
//     $expr record nothing.
//
// This is computed only for updates that use $, after the plain matcher
// has chosen the document.

// posVal is a value found at a path with the position, in the outermost
// array crossed on the way, of the element it came from (-1: none).
type posVal struct {
	v   any
	off int
}

// matchPosition returns the positional $ of filter on doc, "" when the
// filter records none.
func matchPosition(filter bson.D, doc bson.D, ec *evalCtx) string {
	pos, _ := andPosition(filter, doc, ec)
	return pos
}

func andPosition(filter bson.D, doc bson.D, ec *evalCtx) (string, bool) {
	pos, found := "", false
	for _, e := range filter {
		if p, ok := entryPosition(e.Key, e.Value, doc, ec); ok {
			pos, found = p, true
		}
	}
	return pos, found
}

func entryPosition(key string, val any, doc bson.D, ec *evalCtx) (string, bool) {
	switch key {
	case "$and":
		arr, _ := val.(bson.A)
		pos, found := "", false
		for _, a := range arr {
			if sd, ok := a.(bson.D); ok {
				if p, ok := andPosition(sd, doc, ec); ok {
					pos, found = p, true
				}
			}
		}
		return pos, found
	case "$or":
		arr, _ := val.(bson.A)
		for _, a := range arr {
			sd, ok := a.(bson.D)
			if !ok {
				continue
			}
			if p, err := compileAnd(sd, ec); err == nil && p(doc) {
				return andPosition(sd, doc, ec)
			}
		}
		return "", false
	}
	if len(key) > 0 && key[0] == '$' {
		return "", false
	}
	vals := positionsAt(doc, splitPath(key))
	ops, isOps := isOperatorDoc(val)
	if !isOps {
		return firstPosition(vals, eqTest(val))
	}
	regexOpts := ""
	if o, ok := docGet(ops, "$options"); ok {
		regexOpts, _ = o.(string)
	}
	pos, found := "", false
	for _, op := range ops {
		if p, ok := opPosition(op.Key, op.Value, regexOpts, vals, ec); ok {
			pos, found = p, true
		}
	}
	return pos, found
}

func opPosition(op string, q any, regexOpts string, vals []posVal, ec *evalCtx) (string, bool) {
	switch op {
	case "$eq", "$gt", "$gte", "$lt", "$lte", "$in", "$regex", "$mod":
		c, err := compileOp(op, q, regexOpts, ec)
		if err != nil || c == nil || c.leaf == nil {
			return "", false
		}
		return firstPosition(vals, c.leaf)
	case "$exists":
		if !truthy(q) {
			return "", false
		}
		return firstPosition(vals, func(v any) bool { return !isMissing(v) })
	case "$all":
		arr, _ := q.(bson.A)
		pos, found := "", false
		for _, a := range arr {
			var p string
			var ok bool
			if d, isOp := isOperatorDoc(a); isOp && d[0].Key == "$elemMatch" {
				p, ok = opPosition("$elemMatch", d[0].Value, "", vals, ec)
			} else {
				p, ok = firstPosition(vals, eqTest(a))
			}
			if ok {
				pos, found = p, true
			}
		}
		return pos, found
	case "$elemMatch":
		d, _ := q.(bson.D)
		test, err := elemMatchTest(d, ec)
		if err != nil {
			return "", false
		}
		for _, pv := range vals {
			arr, ok := pv.v.(bson.A)
			if !ok {
				continue
			}
			for i, e := range arr {
				if test(e) {
					if pv.off >= 0 {
						i = pv.off
					}
					return strconv.Itoa(i), true
				}
			}
		}
	}
	return "", false
}

// firstPosition applies test in mongod's order and returns the position of
// the first value that satisfies it; ok is false when that value has none.
func firstPosition(vals []posVal, test valTest) (string, bool) {
	for _, pv := range vals {
		if arr, isArr := pv.v.(bson.A); isArr {
			for i, e := range arr {
				if test(e) {
					if pv.off >= 0 {
						i = pv.off
					}
					return strconv.Itoa(i), true
				}
			}
		}
		if test(pv.v) {
			if pv.off >= 0 {
				return strconv.Itoa(pv.off), true
			}
			return "", false
		}
	}
	return "", false
}

// positionsAt is resolvePath keeping, for each value, the position in the
// outermost array it was reached through.
func positionsAt(doc bson.D, parts []string) []posVal {
	var out []posVal
	var walk func(v any, parts []string, off int)
	walk = func(v any, parts []string, off int) {
		if len(parts) == 0 {
			out = append(out, posVal{v, off})
			return
		}
		switch x := v.(type) {
		case bson.D:
			if fv, ok := docGet(x, parts[0]); ok {
				walk(fv, parts[1:], off)
			}
		case bson.A:
			at := func(i int) int {
				if off >= 0 {
					return off
				}
				return i
			}
			if i, err := strconv.Atoi(parts[0]); err == nil && i >= 0 {
				if i < len(x) {
					walk(x[i], parts[1:], at(i))
				}
				return
			}
			for i, e := range x {
				if ed, ok := e.(bson.D); ok {
					walk(ed, parts, at(i))
				}
			}
		}
	}
	walk(doc, parts, -1)
	return out
}
