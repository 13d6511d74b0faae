package mongotest

import (
	"sort"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// update kinds, which decide the change event (reference note §5.4).
const (
	updOperators = iota
	updReplacement
	updPipeline
)

// compiledUpdate is one update statement's `u`.
type compiledUpdate struct {
	kind        int
	ops         bson.D // operator document
	replacement bson.D
	pipeline    []stage
	// positional: a path of ops holds the positional $, resolved per
	// document by at.
	positional bool
}

func compileUpdate(u any, ec *evalCtx) (*compiledUpdate, error) {
	switch x := u.(type) {
	case bson.A:
		var stages []stage
		for _, st := range x {
			sd, ok := st.(bson.D)
			if !ok || len(sd) != 1 {
				return nil, cmdErrf(9, "FailedToParse", "A pipeline stage specification object must contain exactly one field.")
			}
			switch sd[0].Key {
			case "$addFields", "$set", "$project", "$unset", "$replaceRoot", "$replaceWith":
			default:
				return nil, cmdErrf(72, "InvalidOptions", "%s is not allowed to be used within an update", sd[0].Key)
			}
			s, err := compileStage(sd[0].Key, sd[0].Value, ec)
			if err != nil {
				return nil, err
			}
			stages = append(stages, s)
		}
		return &compiledUpdate{kind: updPipeline, pipeline: stages}, nil
	case bson.D:
		if len(x) > 0 && strings.HasPrefix(x[0].Key, "$") {
			for _, op := range x {
				switch op.Key {
				case "$set", "$unset", "$inc", "$mul", "$min", "$max", "$rename", "$setOnInsert",
					"$push", "$addToSet", "$pull", "$pullAll", "$pop", "$currentDate":
				default:
					return nil, cmdErrf(9, "FailedToParse", "Unknown modifier: %s. Expected a valid update modifier or pipeline-style update specified as an array", op.Key)
				}
				if _, ok := op.Value.(bson.D); !ok {
					return nil, cmdErrf(9, "FailedToParse", "Modifiers operate on fields but we found type %s instead. For example: {$mod: {<field>: ...}} not {%s: %s}", typeName(op.Value), op.Key, formatValue(op.Value))
				}
			}
			if err := checkConflicts(x); err != nil {
				return nil, err
			}
			positional, err := checkPositional(x)
			if err != nil {
				return nil, err
			}
			return &compiledUpdate{kind: updOperators, ops: x, positional: positional}, nil
		}
		return &compiledUpdate{kind: updReplacement, replacement: x}, nil
	case nil:
		return &compiledUpdate{kind: updReplacement}, nil
	}
	return nil, cmdErrf(14, "TypeMismatch", "Update argument must be either an object or an array")
}

// checkPositional says whether an operator update uses the positional $,
// refusing the paths mongod refuses when it parses the update
// (src/mongo/db/update/update_object_node.cpp parseAndMerge: at most one
// $, not first; src/mongo/db/update/rename_node.cpp: no $ in a $rename).
func checkPositional(ops bson.D) (bool, error) {
	positional := false
	for _, op := range ops {
		for _, f := range op.Value.(bson.D) {
			paths := []string{f.Key}
			if to, ok := f.Value.(string); ok && op.Key == "$rename" {
				paths = append(paths, to)
			}
			for i, path := range paths {
				n, first := 0, false
				for j, p := range splitPath(path) {
					if p == "$" {
						n++
						first = first || j == 0
					}
				}
				switch {
				case n == 0:
					continue
				case op.Key == "$rename" && i == 0:
					return false, badValue("The source field for $rename may not be dynamic: %s", path)
				case op.Key == "$rename":
					return false, badValue("The destination field for $rename may not be dynamic: %s", path)
				case n > 1:
					return false, badValue("Too many positional (i.e. '$') elements found in path '%s'", path)
				case first:
					return false, badValue("Cannot have positional (i.e. '$') element in the first position in path '%s'", path)
				}
				positional = true
			}
		}
	}
	return positional, nil
}

// at is the update for one document whose filter matched at array
// position pos (matchPosition; "" when it matched no array element): each
// positional $ replaced by pos. Without a position mongod fails the update
// (update_object_node.cpp UpdateObjectNode::apply), an upsert's insert
// included (jstests/core/write/update/updatel.js).
func (cu *compiledUpdate) at(pos string) (*compiledUpdate, error) {
	if !cu.positional {
		return cu, nil
	}
	if pos == "" {
		return nil, badValue("The positional operator did not find the match needed from the query.")
	}
	ops := make(bson.D, len(cu.ops))
	for i, op := range cu.ops {
		fields := op.Value.(bson.D)
		nf := make(bson.D, len(fields))
		for j, f := range fields {
			parts := splitPath(f.Key)
			for k, p := range parts {
				if p == "$" {
					parts[k] = pos
				}
			}
			nf[j] = bson.E{Key: strings.Join(parts, "."), Value: f.Value}
		}
		ops[i] = bson.E{Key: op.Key, Value: nf}
	}
	c := *cu
	c.ops, c.positional = ops, false
	return &c, nil
}

// apply returns the updated document. old is the current document (already
// decoded; it may be modified). isInsert is true when building an upsert.
func (cu *compiledUpdate) apply(old bson.D, isInsert bool, ec *evalCtx) (bson.D, error) {
	id, hasID := docGet(old, "_id")
	var out bson.D
	var err error
	switch cu.kind {
	case updReplacement:
		// A replacement may not hold a top-level $-prefixed field, except
		// when an upsert inserts it: mongod validates that as an insert
		// (src/mongo/db/update/object_replace_executor.cpp refuses them
		// with 52; src/mongo/db/exec/upsert_stage.cpp allows them from
		// FCV 5.0).
		if !isInsert {
			for _, e := range cu.replacement {
				if strings.HasPrefix(e.Key, "$") {
					return nil, cmdErrf(52, "DollarPrefixedFieldName", "The dollar ($) prefixed field '%s' in '%s' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith.", e.Key, e.Key)
				}
			}
		}
		out = make(bson.D, 0, len(cu.replacement)+1)
		if hasID {
			out = append(out, bson.E{Key: "_id", Value: id})
		}
		for _, e := range cu.replacement {
			if e.Key == "_id" && hasID {
				if compareValues(e.Value, id) != 0 {
					return nil, immutableID()
				}
				// mongod stores the replacement's _id: an equal value of
				// another numeric type replaces the stored one.
				out[0].Value = deepCopy(e.Value)
				continue
			}
			out = append(out, bson.E{Key: e.Key, Value: deepCopy(e.Value)})
		}
	case updPipeline:
		out = old
		for _, st := range cu.pipeline {
			docs, err := st.apply([]bson.D{out})
			if err != nil {
				return nil, err
			}
			if len(docs) != 1 {
				return nil, cmdErrf(72, "InvalidOptions", "update pipeline produced no document")
			}
			out = docs[0]
		}
	default:
		out, err = applyOperators(old, cu.ops, isInsert, ec)
		if err != nil {
			return nil, err
		}
	}
	if hasID {
		nid, ok := docGet(out, "_id")
		if !ok && cu.kind != updReplacement {
			if isInsert {
				out = append(bson.D{{Key: "_id", Value: id}}, out...)
			} else {
				return nil, immutableID()
			}
		} else if ok && (canonType(nid) != canonType(id) || compareValues(nid, id) != 0) {
			// mongod's rule: the new _id compares equal to the old one
			// (compareWithBSONElement: int32 1, int64 1 and 1.0 are equal).
			return nil, immutableID()
		}
	}
	return idFirst(out), nil
}

func immutableID() error {
	return cmdErrf(66, "ImmutableField", "Performing an update on the path '_id' would modify the immutable field '_id'")
}

// idFirst moves _id to the front, as the server stores it.
func idFirst(d bson.D) bson.D {
	for i, e := range d {
		if e.Key == "_id" {
			if i == 0 {
				return d
			}
			out := make(bson.D, 0, len(d))
			out = append(out, e)
			out = append(out, d[:i]...)
			return append(out, d[i+1:]...)
		}
	}
	return d
}

// lessPath orders update paths component by component: lexicographically,
// numeric names numerically.
func lessPath(a, b string) bool {
	pa, pb := splitPath(a), splitPath(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] == pb[i] {
			continue
		}
		ai, aerr := strconv.Atoi(pa[i])
		bi, berr := strconv.Atoi(pb[i])
		if aerr == nil && berr == nil {
			return ai < bi
		}
		return pa[i] < pb[i]
	}
	return len(pa) < len(pb)
}

func applyOperators(doc bson.D, ops bson.D, isInsert bool, ec *evalCtx) (bson.D, error) {
	var err error
	// mongod 5.0+ builds one tree of all modifications and applies it in
	// field-name order (lexicographic; numeric names numerically), whatever
	// the operator, so new fields appear in that order.
	type mod struct {
		op string
		f  bson.E
	}
	var mods []mod
	for _, op := range ops {
		for _, f := range op.Value.(bson.D) {
			mods = append(mods, mod{op.Key, f})
		}
	}
	sort.SliceStable(mods, func(i, j int) bool { return lessPath(mods[i].f.Key, mods[j].f.Key) })
	for _, m := range mods {
		op := bson.E{Key: m.op}
		for _, f := range []bson.E{m.f} {
			parts := splitPath(f.Key)
			if err := checkPath(f.Key, parts); err != nil {
				return nil, err
			}
			switch op.Key {
			case "$set":
				doc, err = setPath(doc, parts, deepCopy(f.Value))
			case "$setOnInsert":
				if isInsert {
					doc, err = setPath(doc, parts, deepCopy(f.Value))
				}
			case "$unset":
				doc = unsetPath(doc, parts)
			case "$inc", "$mul":
				if !isNumber(f.Value) {
					return nil, cmdErrf(14, "TypeMismatch", "Cannot %s with non-numeric argument: {%s: %s}", op.Key[1:], f.Key, formatValue(f.Value))
				}
				cur, ok := getAt(doc, parts)
				var nv any
				if !ok {
					if op.Key == "$inc" {
						nv = f.Value
					} else {
						nv = mulNumbers(zeroLike(f.Value), f.Value)
					}
				} else {
					if !isNumber(cur) {
						return nil, cmdErrf(14, "TypeMismatch", "Cannot apply %s to a value of non-numeric type. {_id: %s} has the field '%s' of non-numeric type %s", op.Key, idOf(doc), parts[len(parts)-1], typeName(cur))
					}
					if op.Key == "$inc" {
						nv, err = addValues([]any{cur, f.Value})
					} else {
						nv = mulNumbers(cur, f.Value)
					}
					if err != nil {
						return nil, err
					}
				}
				doc, err = setPath(doc, parts, nv)
			case "$min", "$max":
				cur, ok := getAt(doc, parts)
				c := compareValues(f.Value, cur)
				if !ok || (op.Key == "$min" && c < 0) || (op.Key == "$max" && c > 0) {
					doc, err = setPath(doc, parts, deepCopy(f.Value))
				}
			case "$currentDate":
				var v any = ec.now
				if d, ok := f.Value.(bson.D); ok {
					if t, _ := docGet(d, "$type"); t == "timestamp" {
						v = ec.clusterTime
					}
				}
				doc, err = setPath(doc, parts, v)
			case "$rename":
				to, ok := f.Value.(string)
				if !ok {
					return nil, badValue("The 'to' field for $rename must be a string: %s: %s", f.Key, formatValue(f.Value))
				}
				if cur, ok := getAt(doc, parts); ok {
					doc = unsetPath(doc, parts)
					doc, err = setPath(doc, splitPath(to), cur)
				}
			case "$push", "$addToSet":
				doc, err = pushOp(doc, parts, f.Key, f.Value, op.Key == "$addToSet")
			case "$pull", "$pullAll":
				cur, ok := getAt(doc, parts)
				if !ok {
					continue
				}
				arr, isArr := cur.(bson.A)
				if !isArr {
					return nil, badValue("Cannot apply %s to a non-array value", op.Key)
				}
				var keep func(v any) bool
				if op.Key == "$pullAll" {
					list, ok := f.Value.(bson.A)
					if !ok {
						return nil, badValue("$pullAll requires an array argument but was given a %s", typeName(f.Value))
					}
					keep = func(v any) bool {
						for _, l := range list {
							if compareValues(l, v) == 0 {
								return false
							}
						}
						return true
					}
				} else if d, isOps := isOperatorDoc(f.Value); isOps {
					c, err := compileCond(d, ec)
					if err != nil {
						return nil, err
					}
					keep = func(v any) bool { return !c.onValues([]any{v}) }
				} else if d, isDoc := f.Value.(bson.D); isDoc {
					m, err := compileFilter(d, ec)
					if err != nil {
						return nil, err
					}
					keep = func(v any) bool {
						vd, ok := v.(bson.D)
						return !(ok && m.matches(vd))
					}
				} else {
					t := eqTest(f.Value)
					keep = func(v any) bool { return !t(v) }
				}
				out := bson.A{}
				for _, e := range arr {
					if keep(e) {
						out = append(out, e)
					}
				}
				doc, err = setPath(doc, parts, out)
			case "$pop":
				cur, ok := getAt(doc, parts)
				if !ok {
					continue
				}
				arr, isArr := cur.(bson.A)
				if !isArr {
					return nil, cmdErrf(14, "TypeMismatch", "Path '%s' contains an element of non-array type '%s'", f.Key, typeName(cur))
				}
				if len(arr) > 0 {
					if n, _ := toInt64(f.Value); n < 0 {
						arr = append(bson.A{}, arr[1:]...)
					} else {
						arr = append(bson.A{}, arr[:len(arr)-1]...)
					}
				}
				doc, err = setPath(doc, parts, arr)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return doc, nil
}

func checkPath(full string, parts []string) error {
	for _, p := range parts {
		if p == "" {
			return cmdErrf(56, "EmptyFieldName", "The update path '%s' contains an empty field name, which is not allowed.", full)
		}
	}
	return nil
}

func idOf(doc bson.D) string {
	id, _ := docGet(doc, "_id")
	return formatValue(id)
}

func zeroLike(v any) any {
	switch v.(type) {
	case int32:
		return int32(0)
	case int64:
		return int64(0)
	}
	return 0.0
}

func mulNumbers(a, b any) any {
	r, _ := arith("$multiply", []any{a, b})
	return r
}

func pushOp(doc bson.D, parts []string, path string, v any, unique bool) (bson.D, error) {
	items := bson.A{v}
	var slice *int64
	var position *int64
	var sortSpec any
	if d, ok := v.(bson.D); ok && len(d) > 0 && d[0].Key == "$each" {
		each, ok := d[0].Value.(bson.A)
		if !ok {
			return nil, badValue("The argument to $each in %s must be an array but it was of type: %s", map[bool]string{true: "$addToSet", false: "$push"}[unique], typeName(d[0].Value))
		}
		items = each
		for _, m := range d[1:] {
			switch m.Key {
			case "$slice":
				n, _ := toInt64(m.Value)
				slice = &n
			case "$position":
				n, _ := toInt64(m.Value)
				position = &n
			case "$sort":
				sortSpec = m.Value
			default:
				return nil, badValue("Unrecognized clause in $push: %s", m.Key)
			}
		}
	}
	cur, ok := getAt(doc, parts)
	var arr bson.A
	if ok {
		a, isArr := cur.(bson.A)
		if !isArr {
			return nil, badValue("The field '%s' must be an array but is of type %s in document {_id: %s}", parts[len(parts)-1], typeName(cur), idOf(doc))
		}
		arr = append(bson.A{}, a...)
	} else {
		arr = bson.A{}
	}
	if unique {
		for _, it := range items {
			found := false
			for _, e := range arr {
				if compareValues(e, it) == 0 {
					found = true
					break
				}
			}
			if !found {
				arr = append(arr, deepCopy(it))
			}
		}
	} else if position != nil {
		p := *position
		if p < 0 {
			p += int64(len(arr))
			if p < 0 {
				p = 0
			}
		}
		if p > int64(len(arr)) {
			p = int64(len(arr))
		}
		na := append(bson.A{}, arr[:p]...)
		for _, it := range items {
			na = append(na, deepCopy(it))
		}
		arr = append(na, arr[p:]...)
	} else {
		for _, it := range items {
			arr = append(arr, deepCopy(it))
		}
	}
	if sortSpec != nil {
		switch s := sortSpec.(type) {
		case bson.D:
			keys, err := parseSort(s)
			if err != nil {
				return nil, err
			}
			sort.SliceStable(arr, func(i, j int) bool {
				di, _ := arr[i].(bson.D)
				dj, _ := arr[j].(bson.D)
				return compareBySort(di, dj, keys) < 0
			})
		default:
			dir, _ := toInt64(s)
			sort.SliceStable(arr, func(i, j int) bool {
				c := compareValues(arr[i], arr[j])
				if dir < 0 {
					return c > 0
				}
				return c < 0
			})
		}
	}
	if slice != nil {
		n := *slice
		l := int64(len(arr))
		if n >= 0 && n < l {
			arr = arr[:n]
		} else if n < 0 && -n < l {
			arr = arr[l+n:]
		}
	}
	return setPath(doc, parts, arr)
}

// getAt returns the value at an exact path (numeric components index arrays).
func getAt(doc bson.D, parts []string) (any, bool) {
	var v any = doc
	for _, p := range parts {
		switch x := v.(type) {
		case bson.D:
			fv, ok := docGet(x, p)
			if !ok {
				return nil, false
			}
			v = fv
		case bson.A:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func setField(d bson.D, key string, v any) bson.D {
	for i := range d {
		if d[i].Key == key {
			d[i].Value = v
			return d
		}
	}
	return append(d, bson.E{Key: key, Value: v})
}

func removeField(d bson.D, key string) bson.D {
	for i := range d {
		if d[i].Key == key {
			return append(d[:i:i], d[i+1:]...)
		}
	}
	return d
}

// setPath sets a dotted path for update operators, creating sub-documents
// on the way (PathNotViable when a scalar is in the way).
func setPath(doc bson.D, parts []string, v any) (bson.D, error) {
	r, err := setIn(doc, parts, v, parts)
	if err != nil {
		return nil, err
	}
	return r.(bson.D), nil
}

func setIn(cur any, parts []string, v any, full []string) (any, error) {
	switch x := cur.(type) {
	case bson.D:
		if len(parts) == 1 {
			return setField(x, parts[0], v), nil
		}
		child, ok := docGet(x, parts[0])
		if !ok {
			child = bson.D{}
		}
		switch child.(type) {
		case bson.D, bson.A:
		default:
			if ok {
				return nil, cmdErrf(28, "PathNotViable", "Cannot create field '%s' in element {%s: %s}", parts[1], parts[0], formatValue(child))
			}
			child = bson.D{}
		}
		nc, err := setIn(child, parts[1:], v, full)
		if err != nil {
			return nil, err
		}
		return setField(x, parts[0], nc), nil
	case bson.A:
		i, err := strconv.Atoi(parts[0])
		if err != nil || i < 0 {
			return nil, cmdErrf(28, "PathNotViable", "Cannot create field '%s' in element {%s: %s}", parts[0], full[0], formatValue(x))
		}
		for len(x) <= i {
			x = append(x, nil)
		}
		if len(parts) == 1 {
			x[i] = v
			return x, nil
		}
		child := x[i]
		switch child.(type) {
		case bson.D, bson.A:
		case nil:
			child = bson.D{}
		default:
			return nil, cmdErrf(28, "PathNotViable", "Cannot create field '%s' in element {%s: %s}", parts[1], parts[0], formatValue(child))
		}
		nc, err := setIn(child, parts[1:], v, full)
		if err != nil {
			return nil, err
		}
		x[i] = nc
		return x, nil
	}
	return cur, nil
}

func unsetPath(doc bson.D, parts []string) bson.D {
	r := unsetIn(doc, parts)
	return r.(bson.D)
}

func unsetIn(cur any, parts []string) any {
	switch x := cur.(type) {
	case bson.D:
		if len(parts) == 1 {
			return removeField(x, parts[0])
		}
		child, ok := docGet(x, parts[0])
		if !ok {
			return x
		}
		return setField(x, parts[0], unsetIn(child, parts[1:]))
	case bson.A:
		i, err := strconv.Atoi(parts[0])
		if err != nil || i < 0 || i >= len(x) {
			return x
		}
		if len(parts) == 1 {
			// $unset of an array element sets it to null.
			x[i] = nil
			return x
		}
		x[i] = unsetIn(x[i], parts[1:])
		return x
	}
	return cur
}

// upsertSeed builds the document an upsert starts from: the equality
// predicates of the query (update_driver.cpp populateDocumentWithQueryFields);
// for a replacement only _id is taken.
func upsertSeed(q bson.D, replacement bool) (bson.D, error) {
	doc := bson.D{}
	var walk func(q bson.D) error
	walk = func(q bson.D) error {
		for _, e := range q {
			if e.Key == "$and" {
				arr, _ := e.Value.(bson.A)
				for _, a := range arr {
					if d, ok := a.(bson.D); ok {
						if err := walk(d); err != nil {
							return err
						}
					}
				}
				continue
			}
			if strings.HasPrefix(e.Key, "$") {
				continue
			}
			if replacement && e.Key != "_id" {
				continue
			}
			v := e.Value
			if ops, ok := isOperatorDoc(v); ok {
				eq, has := docGet(ops, "$eq")
				if !has || len(ops) != 1 {
					continue
				}
				v = eq
			}
			if _, isRe := v.(bson.Regex); isRe {
				continue
			}
			var err error
			doc, err = setPath(doc, splitPath(e.Key), deepCopy(v))
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(q); err != nil {
		return nil, err
	}
	return idFirst(doc), nil
}

// hasExpr reports whether a filter uses $expr anywhere ($expr is refused in
// upsert filters with 224 QueryFeatureNotAllowed, reference note §6.1).
func hasExpr(v any) bool {
	switch x := v.(type) {
	case bson.D:
		for _, e := range x {
			if e.Key == "$expr" || hasExpr(e.Value) {
				return true
			}
		}
	case bson.A:
		for _, e := range x {
			if hasExpr(e) {
				return true
			}
		}
	}
	return false
}

// updateDescription computes {updatedFields, removedFields, truncatedArrays}
// from the old and new documents, as the $v:2 delta would: nested changes as
// dotted paths, arrays as whole values.
// opsUpdateDescription is the updateDescription of an update by operators,
// as mongod logs it: each operator logs the path it names
// (update/v2_log_builder.cpp, read back by
// change_stream_document_diff_parser.cpp), so $set {a: {b: 3}} is
// updatedFields {a: {b: 3}} and $set {"a.b": 3} is {"a.b": 3}. A path whose
// parents did not exist is logged at the first one created ($set {"x.y": 1}
// on a document without x is {x: {y: 1}}); a value set to what it was is
// not logged (a no-op). $push appending to an existing array logs each new
// element ("arr.3"; push_node.cpp kArrayAppendUpdate), any other array
// operator the whole array. $unset and the source of $rename are
// removedFields.
func opsUpdateDescription(ops, old, nw bson.D) bson.D {
	type logged struct {
		path   string
		remove bool
	}
	var paths []logged
	for _, op := range ops {
		for _, f := range op.Value.(bson.D) {
			switch op.Key {
			case "$setOnInsert":
				// Applies only to inserts, which are insert events.
			case "$unset":
				paths = append(paths, logged{f.Key, true})
			case "$rename":
				to, _ := f.Value.(string)
				paths = append(paths, logged{f.Key, true}, logged{to, false})
			case "$push":
				parts := splitPath(f.Key)
				ov, ook := getAt(old, parts)
				nv, nok := getAt(nw, parts)
				oa, isOld := ov.(bson.A)
				na, isNew := nv.(bson.A)
				if ook && nok && isOld && isNew && len(na) > len(oa) && compareValues(oa, na[:len(oa)]) == 0 {
					for i := len(oa); i < len(na); i++ {
						paths = append(paths, logged{f.Key + "." + strconv.Itoa(i), false})
					}
					continue
				}
				paths = append(paths, logged{f.Key, false})
			default:
				paths = append(paths, logged{f.Key, false})
			}
		}
	}
	sort.SliceStable(paths, func(i, j int) bool { return lessPath(paths[i].path, paths[j].path) })
	updated := bson.D{}
	removed := bson.A{}
	covered := func(p string) bool {
		for _, e := range updated {
			if p == e.Key || strings.HasPrefix(p, e.Key+".") {
				return true
			}
		}
		return false
	}
	for _, l := range paths {
		parts := splitPath(l.path)
		ov, ook := getAt(old, parts)
		nv, nok := getAt(nw, parts)
		if l.remove {
			if ook && !nok {
				removed = append(removed, l.path)
			}
			continue
		}
		if !nok || covered(l.path) {
			continue
		}
		if ook && typeName(ov) == typeName(nv) && compareValues(ov, nv) == 0 {
			continue
		}
		// The first component the update created, if it created any.
		for k := 1; k < len(parts); k++ {
			if _, ok := getAt(old, parts[:k]); !ok {
				parts = parts[:k]
				nv, _ = getAt(nw, parts)
				break
			}
		}
		p := strings.Join(parts, ".")
		if !covered(p) {
			updated = append(updated, bson.E{Key: p, Value: nv})
		}
	}
	return bson.D{{Key: "updatedFields", Value: updated}, {Key: "removedFields", Value: removed}, {Key: "truncatedArrays", Value: bson.A{}}}
}

// updateDescription is the updateDescription of a pipeline update, read
// from its delta as mongod's change stream reads a $v:2 oplog diff
// (change_stream_document_diff_parser.cpp): removed fields, updated and
// inserted ones as dotted paths, array diffs as their elements' paths
// ("arr.3") and truncations (truncatedArrays {field, newSize}).
func updateDescription(old, nw bson.D) bson.D {
	updated := bson.D{}
	removed := bson.A{}
	truncated := bson.A{}
	var walk func(prefix string, diff bson.D)
	walk = func(prefix string, diff bson.D) {
		isArray := false
		if v, ok := docGet(diff, "a"); ok && v == true {
			isArray = true
		}
		for _, e := range diff {
			switch {
			case e.Key == "a":
			case isArray && e.Key == "l":
				n, _ := toInt64(e.Value)
				truncated = append(truncated, bson.D{{Key: "field", Value: strings.TrimSuffix(prefix, ".")}, {Key: "newSize", Value: int32(n)}})
			case isArray && strings.HasPrefix(e.Key, "u"):
				updated = append(updated, bson.E{Key: prefix + e.Key[1:], Value: e.Value})
			case isArray && strings.HasPrefix(e.Key, "s"):
				walk(prefix+e.Key[1:]+".", e.Value.(bson.D))
			case e.Key == "d":
				for _, f := range e.Value.(bson.D) {
					removed = append(removed, prefix+f.Key)
				}
			case e.Key == "u" || e.Key == "i":
				for _, f := range e.Value.(bson.D) {
					updated = append(updated, bson.E{Key: prefix + f.Key, Value: f.Value})
				}
			case strings.HasPrefix(e.Key, "s"):
				walk(prefix+e.Key[1:]+".", e.Value.(bson.D))
			}
		}
	}
	walk("", oplogDiff(old, nw))
	return bson.D{{Key: "updatedFields", Value: updated}, {Key: "removedFields", Value: removed}, {Key: "truncatedArrays", Value: truncated}}
}

// deltaSmaller applies mongod's rule for pipeline updates: the delta is
// logged only if it is smaller than the new document
// (document_diff_calculator.cpp computeOplogDiff, plus 15 bytes of metadata,
// update_oplog_entry_serialization.h); otherwise a full replacement is
// logged and the change event is a replace.
func deltaSmaller(old, nw bson.D, newSize int) bool {
	diff := oplogDiff(old, nw)
	return len(encodeDoc(diff))+15 < newSize
}

func oplogDiff(o, n bson.D) bson.D {
	var d, u, i bson.D
	var subs bson.D
	for _, e := range o {
		if _, ok := docGet(n, e.Key); !ok {
			d = append(d, bson.E{Key: e.Key, Value: false})
		}
	}
	for _, e := range n {
		ov, ok := docGet(o, e.Key)
		if !ok {
			i = append(i, e)
			continue
		}
		if sd, same, ok := subDiff(ov, e.Value); same {
			continue
		} else if ok {
			subs = append(subs, bson.E{Key: "s" + e.Key, Value: sd})
			continue
		}
		u = append(u, e)
	}
	var out bson.D
	if len(d) > 0 {
		out = append(out, bson.E{Key: "d", Value: d})
	}
	if len(u) > 0 {
		out = append(out, bson.E{Key: "u", Value: u})
	}
	if len(i) > 0 {
		out = append(out, bson.E{Key: "i", Value: i})
	}
	return append(out, subs...)
}

// subDiff compares a field's old and new values: same when equal; else a
// sub-diff when both are documents, or both arrays and the array diff is
// smaller than the new array (document_diff_calculator.cpp computeArrayDiff
// logs the whole array otherwise); else ok is false and the field is
// updated whole.
func subDiff(ov, nv any) (diff bson.D, same, ok bool) {
	if typeName(ov) == typeName(nv) && compareValues(ov, nv) == 0 {
		return nil, true, false
	}
	switch o := ov.(type) {
	case bson.D:
		if n, isDoc := nv.(bson.D); isDoc {
			return oplogDiff(o, n), false, true
		}
	case bson.A:
		n, isArr := nv.(bson.A)
		if !isArr {
			return nil, false, false
		}
		ad := bson.D{{Key: "a", Value: true}}
		if len(n) < len(o) {
			ad = append(ad, bson.E{Key: "l", Value: int32(len(n))})
		}
		for k, nel := range n {
			key := strconv.Itoa(k)
			if k >= len(o) {
				ad = append(ad, bson.E{Key: "u" + key, Value: nel})
				continue
			}
			if sd, same, ok := subDiff(o[k], nel); same {
				continue
			} else if ok {
				ad = append(ad, bson.E{Key: "s" + key, Value: sd})
				continue
			}
			ad = append(ad, bson.E{Key: "u" + key, Value: nel})
		}
		if len(appendElem(nil, "", ad)) < len(appendElem(nil, "", n)) {
			return ad, false, true
		}
	}
	return nil, false, false
}

// checkConflicts refuses an update whose paths overlap: mongod builds one
// tree of every modified path (UpdateObjectNode::parseAndMerge) and fails
// with 40 ConflictingUpdateOperators when a path equals another or is a
// prefix of it, whatever the operators ($rename counts both its source and
// its target; $setOnInsert counts even when not inserting).
func checkConflicts(ops bson.D) error {
	var seen []string
	add := func(p string) error {
		for _, q := range seen {
			short, long := q, p
			if len(p) < len(q) {
				short, long = p, q
			}
			if long == short || strings.HasPrefix(long, short+".") {
				return cmdErrf(40, "ConflictingUpdateOperators", "Updating the path '%s' would create a conflict at '%s'", p, short)
			}
		}
		seen = append(seen, p)
		return nil
	}
	for _, op := range ops {
		for _, f := range op.Value.(bson.D) {
			if err := add(f.Key); err != nil {
				return err
			}
			if op.Key == "$rename" {
				if to, ok := f.Value.(string); ok {
					if err := add(to); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
