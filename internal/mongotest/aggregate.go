package mongotest

import (
	"sort"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// stage is one compiled aggregation stage over materialized documents.
type stage interface {
	apply(docs []bson.D) ([]bson.D, error)
}

type stageFunc func(docs []bson.D) ([]bson.D, error)

func (f stageFunc) apply(docs []bson.D) ([]bson.D, error) { return f(docs) }

func mapStage(fn func(d bson.D) (bson.D, error)) stage {
	return stageFunc(func(docs []bson.D) ([]bson.D, error) {
		out := make([]bson.D, 0, len(docs))
		for _, d := range docs {
			r, err := fn(d)
			if err != nil {
				return nil, err
			}
			if r != nil {
				out = append(out, r)
			}
		}
		return out, nil
	})
}

func compilePipeline(pipeline bson.A, ec *evalCtx) ([]stage, error) {
	var stages []stage
	for _, st := range pipeline {
		sd, ok := st.(bson.D)
		if !ok || len(sd) != 1 {
			return nil, cmdErrf(40323, "Location40323", "A pipeline stage specification object must contain exactly one field.")
		}
		s, err := compileStage(sd[0].Key, sd[0].Value, ec)
		if err != nil {
			return nil, err
		}
		stages = append(stages, s)
	}
	return stages, nil
}

func runStages(stages []stage, docs []bson.D) ([]bson.D, error) {
	var err error
	for _, s := range stages {
		docs, err = s.apply(docs)
		if err != nil {
			return nil, err
		}
	}
	return docs, nil
}

func compileStage(name string, spec any, ec *evalCtx) (stage, error) {
	switch name {
	case "$match":
		d, ok := spec.(bson.D)
		if !ok {
			return nil, cmdErrf(15959, "Location15959", "the match filter must be an expression in an object")
		}
		m, err := compileFilter(d, ec)
		if err != nil {
			return nil, err
		}
		return stageFunc(func(docs []bson.D) ([]bson.D, error) {
			out := docs[:0:0]
			for _, d := range docs {
				if m.matches(d) {
					out = append(out, d)
				}
			}
			if err := ec.takeErr(); err != nil {
				return nil, err
			}
			return out, nil
		}), nil
	case "$sort":
		d, ok := spec.(bson.D)
		if !ok {
			return nil, cmdErrf(15973, "Location15973", "the $sort key specification must be an object")
		}
		keys, err := parseSort(d)
		if err != nil {
			return nil, err
		}
		return stageFunc(func(docs []bson.D) ([]bson.D, error) {
			sortDocs(docs, keys)
			return docs, nil
		}), nil
	case "$limit", "$skip":
		n, ok := toInt64(spec)
		if !ok || n < 0 || (name == "$limit" && n == 0) {
			return nil, cmdErrf(15958, "Location15958", "the %s must be positive", name[1:])
		}
		return stageFunc(func(docs []bson.D) ([]bson.D, error) {
			if name == "$limit" {
				if int64(len(docs)) > n {
					docs = docs[:n]
				}
				return docs, nil
			}
			if int64(len(docs)) <= n {
				return nil, nil
			}
			return docs[n:], nil
		}), nil
	case "$project":
		d, ok := spec.(bson.D)
		if !ok || len(d) == 0 {
			return nil, cmdErrf(51272, "Location51272", "$project specification must be an object with at least one field")
		}
		p, err := compileProjection(d, ec, false)
		if err != nil {
			return nil, err
		}
		return mapStage(p), nil
	case "$addFields", "$set":
		d, ok := spec.(bson.D)
		if !ok {
			return nil, cmdErrf(40272, "Location40272", "%s specification stage must be an object", name)
		}
		af, err := compileAddFields(d, ec)
		if err != nil {
			return nil, err
		}
		return mapStage(af), nil
	case "$unset":
		var paths [][]string
		switch x := spec.(type) {
		case string:
			paths = append(paths, splitPath(x))
		case bson.A:
			for _, p := range x {
				s, ok := p.(string)
				if !ok {
					return nil, cmdErrf(31120, "Location31120", "$unset specification must be a string or an array containing only string values")
				}
				paths = append(paths, splitPath(s))
			}
		default:
			return nil, cmdErrf(31002, "Location31002", "$unset specification must be a string or an array")
		}
		return mapStage(func(d bson.D) (bson.D, error) {
			out := cloneShallow(d)
			for _, p := range paths {
				out = removePathEverywhere(out, p)
			}
			return out, nil
		}), nil
	case "$replaceRoot", "$replaceWith":
		var ex any = spec
		if name == "$replaceRoot" {
			d, _ := spec.(bson.D)
			nr, ok := docGet(d, "newRoot")
			if !ok {
				return nil, cmdErrf(40231, "Location40231", "no newRoot specified for the $replaceRoot stage")
			}
			ex = nr
		}
		c, err := ec.compileExpr(ex)
		if err != nil {
			return nil, err
		}
		return mapStage(func(d bson.D) (bson.D, error) {
			v, err := c.eval(d)
			if err != nil {
				return nil, err
			}
			nd, ok := v.(bson.D)
			if !ok {
				return nil, cmdErrf(40228, "Location40228", "'newRoot' expression must evaluate to an object, but resulting value was: %s. Type of resulting value: '%s'.", formatValue(v), typeName(v))
			}
			return nd, nil
		}), nil
	case "$count":
		field, ok := spec.(string)
		if !ok || field == "" || strings.HasPrefix(field, "$") || strings.Contains(field, ".") {
			return nil, cmdErrf(40156, "Location40156", "the count field must be a non-empty string")
		}
		return stageFunc(func(docs []bson.D) ([]bson.D, error) {
			if len(docs) == 0 {
				return nil, nil
			}
			return []bson.D{{{Key: field, Value: int32(len(docs))}}}, nil
		}), nil
	case "$group":
		d, ok := spec.(bson.D)
		if !ok {
			return nil, cmdErrf(15947, "Location15947", "a group's fields must be specified in an object")
		}
		return compileGroup(d, ec)
	case "$unwind":
		return compileUnwind(spec)
	case "$lookup":
		return compileLookup(spec, ec)
	case "$sortByCount":
		g, err := compileGroup(bson.D{{Key: "_id", Value: spec}, {Key: "count", Value: bson.D{{Key: "$sum", Value: int32(1)}}}}, ec)
		if err != nil {
			return nil, err
		}
		keys := []sortKey{{parts: []string{"count"}, dir: -1}}
		return stageFunc(func(docs []bson.D) ([]bson.D, error) {
			docs, err := g.apply(docs)
			if err != nil {
				return nil, err
			}
			sortDocs(docs, keys)
			return docs, nil
		}), nil
	}
	return nil, cmdErrf(40324, "Location40324", "Unrecognized pipeline stage name: '%s'", name)
}

func cloneShallow(d bson.D) bson.D {
	return append(make(bson.D, 0, len(d)), d...)
}

func removePathEverywhere(d bson.D, parts []string) bson.D {
	if len(parts) == 1 {
		return removeField(cloneShallow(d), parts[0])
	}
	v, ok := docGet(d, parts[0])
	if !ok {
		return d
	}
	switch x := v.(type) {
	case bson.D:
		return setField(cloneShallow(d), parts[0], removePathEverywhere(x, parts[1:]))
	case bson.A:
		na := make(bson.A, len(x))
		for i, e := range x {
			if ed, ok := e.(bson.D); ok {
				na[i] = removePathEverywhere(ed, parts[1:])
			} else {
				na[i] = e
			}
		}
		return setField(cloneShallow(d), parts[0], na)
	}
	return d
}

type sortKey struct {
	parts []string
	dir   int
}

func parseSort(d bson.D) ([]sortKey, error) {
	if len(d) == 0 {
		return nil, nil
	}
	var keys []sortKey
	for _, e := range d {
		n, ok := toInt64(e.Value)
		if !ok || (n != 1 && n != -1) {
			if md, isDoc := e.Value.(bson.D); isDoc && len(md) == 1 && md[0].Key == "$meta" {
				continue
			}
			return nil, cmdErrf(15975, "Location15975", "$sort key ordering must be 1 (for ascending) or -1 (for descending)")
		}
		keys = append(keys, sortKey{parts: splitPath(e.Key), dir: int(n)})
	}
	return keys, nil
}

// sortValue is the key a document sorts by for one sort field: for arrays
// the smallest element ascending, the largest descending (MongoDB's
// multikey sort rule); missing sorts as null.
func sortValue(d bson.D, k sortKey) any {
	vals := resolvePath(d, k.parts)
	var best any
	found := false
	consider := func(v any) {
		if !found || (k.dir > 0 && compareValues(v, best) < 0) || (k.dir < 0 && compareValues(v, best) > 0) {
			best, found = v, true
		}
	}
	for _, v := range vals {
		if arr, ok := v.(bson.A); ok {
			if len(arr) == 0 {
				consider(bson.Undefined{})
			}
			for _, e := range arr {
				consider(e)
			}
			continue
		}
		consider(v)
	}
	if !found {
		return nil
	}
	if _, ok := best.(bson.Undefined); ok {
		return nil
	}
	return best
}

func compareBySort(a, b bson.D, keys []sortKey) int {
	for _, k := range keys {
		c := compareValues(sortValue(a, k), sortValue(b, k))
		if c != 0 {
			return c * k.dir
		}
	}
	return 0
}

func sortDocs(docs []bson.D, keys []sortKey) {
	if len(keys) == 0 {
		return
	}
	type item struct {
		d    bson.D
		vals []any
	}
	items := make([]item, len(docs))
	for i, d := range docs {
		vals := make([]any, len(keys))
		for j, k := range keys {
			vals[j] = sortValue(d, k)
		}
		items[i] = item{d, vals}
	}
	sort.SliceStable(items, func(i, j int) bool {
		for n, k := range keys {
			c := compareValues(items[i].vals[n], items[j].vals[n])
			if c != 0 {
				return c*k.dir < 0
			}
		}
		return false
	})
	for i := range items {
		docs[i] = items[i].d
	}
}

// ---- $addFields / $set ----

type afField struct {
	parts []string
	fn    exprFn
}

// compileAddFields follows add_fields_projection_executor: nested object
// specs merge into existing sub-documents, dotted paths create them, a path
// through an array applies to each element, a missing result removes the
// field, and replaced fields keep their position.
func compileAddFields(spec bson.D, ec *evalCtx) (func(bson.D) (bson.D, error), error) {
	var fields []afField
	var walk func(prefix []string, d bson.D) error
	walk = func(prefix []string, d bson.D) error {
		for _, e := range d {
			if strings.HasPrefix(e.Key, "$") {
				return cmdErrf(16410, "Location16410", "FieldPath field names may not start with '$'. Consider using $getField or $setField.")
			}
			parts := append(append([]string{}, prefix...), splitPath(e.Key)...)
			if sub, ok := e.Value.(bson.D); ok && len(sub) == 0 {
				return emptyObjectErr(parts)
			}
			if sub, ok := e.Value.(bson.D); ok && len(sub) > 0 && !strings.HasPrefix(sub[0].Key, "$") {
				if err := walk(parts, sub); err != nil {
					return err
				}
				continue
			}
			fn, err := ec.compile(e.Value, nil)
			if err != nil {
				return err
			}
			fields = append(fields, afField{parts, fn})
		}
		return nil
	}
	if err := walk(nil, spec); err != nil {
		return nil, err
	}
	return func(d bson.D) (bson.D, error) {
		e := &env{root: d, cur: d}
		vals := make([]any, len(fields))
		for i, f := range fields {
			v, err := f.fn(e)
			if err != nil {
				return nil, err
			}
			vals[i] = v
		}
		out := cloneShallow(d)
		for i, f := range fields {
			out = addFieldAt(out, f.parts, vals[i]).(bson.D)
		}
		return out, nil
	}, nil
}

func addFieldAt(cur any, parts []string, v any) any {
	switch x := cur.(type) {
	case bson.D:
		x = cloneShallow(x)
		if len(parts) == 1 {
			if isMissing(v) {
				return removeField(x, parts[0])
			}
			return setField(x, parts[0], v)
		}
		child, ok := docGet(x, parts[0])
		switch child.(type) {
		case bson.D, bson.A:
		default:
			if isMissing(v) && !ok {
				return x
			}
			child = bson.D{}
		}
		return setField(x, parts[0], addFieldAt(child, parts[1:], v))
	case bson.A:
		na := make(bson.A, len(x))
		for i, e := range x {
			switch e.(type) {
			case bson.D, bson.A:
				na[i] = addFieldAt(e, parts, v)
			default:
				na[i] = addFieldAt(bson.D{}, parts, v)
			}
		}
		return na
	}
	return addFieldAt(bson.D{}, parts, v)
}

// emptyObjectErr is ProjectionSpecValidator::parseNestedObject's refusal of
// {a: {}} in $project/$addFields/$set (wrap the value in $literal instead).
func emptyObjectErr(path []string) error {
	return cmdErrf(40180, "Location40180", "an empty object is not a valid value. Found empty object at path %s", strings.Join(path, "."))
}

// ---- projection ----

type projNode struct {
	children map[string]*projNode
	order    []string
	include  bool   // leaf inclusion
	exclude  bool   // leaf exclusion
	fn       exprFn // computed
	slice    []int64
}

func (n *projNode) child(k string) *projNode {
	if n.children == nil {
		n.children = map[string]*projNode{}
	}
	c := n.children[k]
	if c == nil {
		c = &projNode{}
		n.children[k] = c
		n.order = append(n.order, k)
	}
	return c
}

// compileProjection handles find projections and $project: inclusion or
// exclusion (not both, except _id), computed fields, and $slice in find.
func compileProjection(spec bson.D, ec *evalCtx, isFind bool) (func(bson.D) (bson.D, error), error) {
	root := &projNode{}
	idMode := 0 // 0 default include, 1 include, -1 exclude
	inclusion, exclusion := false, false
	var walk func(n *projNode, prefix string, d bson.D, top bool) error
	walk = func(n *projNode, prefix string, d bson.D, top bool) error {
		for _, e := range d {
			parts := splitPath(e.Key)
			leaf := n
			for _, p := range parts {
				leaf = leaf.child(p)
			}
			isID := top && e.Key == "_id"
			switch v := e.Value.(type) {
			case bool, int32, int64, float64:
				if truthy(v) {
					leaf.include = true
					if isID {
						idMode = 1
					} else {
						inclusion = true
					}
				} else {
					leaf.exclude = true
					if isID {
						idMode = -1
					} else {
						exclusion = true
					}
				}
				continue
			case bson.D:
				if len(v) > 0 && strings.HasPrefix(v[0].Key, "$") {
					if isFind && v[0].Key == "$slice" {
						switch s := v[0].Value.(type) {
						case bson.A:
							if len(s) == 2 {
								a, _ := toInt64(s[0])
								b, _ := toInt64(s[1])
								leaf.slice = []int64{a, b}
							}
						default:
							a, _ := toInt64(s)
							leaf.slice = []int64{a}
						}
						continue
					}
					break
				}
				if len(v) == 0 {
					return emptyObjectErr(splitPath(prefix + e.Key))
				}
				if err := walk(leaf, prefix+e.Key+".", v, false); err != nil {
					return err
				}
				continue
			}
			fn, err := ec.compile(e.Value, nil)
			if err != nil {
				return err
			}
			leaf.fn = fn
			if isID {
				idMode = 1
			} else {
				inclusion = true
			}
		}
		return nil
	}
	if err := walk(root, "", spec, true); err != nil {
		return nil, err
	}
	if inclusion && exclusion {
		return nil, cmdErrf(31254, "Location31254", "Cannot do exclusion on field in inclusion projection")
	}
	if !inclusion && !exclusion && idMode == 1 {
		inclusion = true
	}
	if inclusion {
		return func(d bson.D) (bson.D, error) {
			e := &env{root: d, cur: d}
			out, err := projectInclude(d, root, e, true, idMode != -1)
			if err != nil {
				return nil, err
			}
			return out.(bson.D), nil
		}, nil
	}
	return func(d bson.D) (bson.D, error) {
		return projectExclude(d, root).(bson.D), nil
	}, nil
}

func projectInclude(v any, n *projNode, e *env, top, keepID bool) (any, error) {
	switch x := v.(type) {
	case bson.D:
		out := bson.D{}
		if top && keepID {
			if id, ok := docGet(x, "_id"); ok {
				if c := n.children["_id"]; c == nil || c.fn == nil {
					out = append(out, bson.E{Key: "_id", Value: id})
				}
			}
		}
		for _, f := range x {
			if top && f.Key == "_id" {
				continue
			}
			c := n.children[f.Key]
			if c == nil || c.fn != nil || c.exclude {
				continue
			}
			if c.include {
				out = append(out, bson.E{Key: f.Key, Value: applySlice(f.Value, c)})
				continue
			}
			if len(c.slice) > 0 {
				out = append(out, bson.E{Key: f.Key, Value: applySlice(f.Value, c)})
				continue
			}
			if c.children != nil {
				switch f.Value.(type) {
				case bson.D, bson.A:
					sub, err := projectInclude(f.Value, c, e, false, true)
					if err != nil {
						return nil, err
					}
					out = append(out, bson.E{Key: f.Key, Value: sub})
				}
			}
		}
		// computed fields, in spec order
		for _, k := range n.order {
			c := n.children[k]
			if c.fn != nil {
				val, err := c.fn(e)
				if err != nil {
					return nil, err
				}
				if !isMissing(val) {
					if top && k == "_id" {
						out = append(bson.D{{Key: "_id", Value: val}}, out...)
					} else {
						out = setField(out, k, val)
					}
				}
			} else if c.children != nil && hasComputed(c) {
				if _, ok := docGet(x, k); !ok {
					sub, err := projectInclude(bson.D{}, c, e, false, true)
					if err != nil {
						return nil, err
					}
					out = append(out, bson.E{Key: k, Value: sub})
				}
			}
		}
		return out, nil
	case bson.A:
		out := bson.A{}
		for _, el := range x {
			switch el.(type) {
			case bson.D, bson.A:
				sub, err := projectInclude(el, n, e, false, true)
				if err != nil {
					return nil, err
				}
				out = append(out, sub)
			}
		}
		return out, nil
	}
	return v, nil
}

func hasComputed(n *projNode) bool {
	if n.fn != nil {
		return true
	}
	for _, c := range n.children {
		if hasComputed(c) {
			return true
		}
	}
	return false
}

func applySlice(v any, n *projNode) any {
	arr, ok := v.(bson.A)
	if !ok || len(n.slice) == 0 {
		return v
	}
	l := int64(len(arr))
	if len(n.slice) == 1 {
		k := n.slice[0]
		if k >= 0 {
			return arr[:min64(k, l)]
		}
		return arr[l-min64(-k, l):]
	}
	skip, lim := n.slice[0], n.slice[1]
	if skip < 0 {
		skip += l
		if skip < 0 {
			skip = 0
		}
	}
	if skip > l {
		skip = l
	}
	return arr[skip:min64(skip+lim, l)]
}

func projectExclude(v any, n *projNode) any {
	switch x := v.(type) {
	case bson.D:
		out := bson.D{}
		for _, f := range x {
			c := n.children[f.Key]
			if c == nil {
				out = append(out, f)
				continue
			}
			if c.exclude {
				continue
			}
			if len(c.slice) > 0 {
				out = append(out, bson.E{Key: f.Key, Value: applySlice(f.Value, c)})
				continue
			}
			out = append(out, bson.E{Key: f.Key, Value: projectExclude(f.Value, c)})
		}
		return out
	case bson.A:
		out := bson.A{}
		for _, el := range x {
			out = append(out, projectExclude(el, n))
		}
		return out
	}
	return v
}

// ---- $group ----

type accumulator struct {
	field string
	op    string
	fn    exprFn
}

func compileGroup(spec bson.D, ec *evalCtx) (stage, error) {
	idV, ok := docGet(spec, "_id")
	if !ok {
		return nil, cmdErrf(15955, "Location15955", "a group specification must include an _id")
	}
	idFn, err := ec.compile(idV, nil)
	if err != nil {
		return nil, err
	}
	var accs []accumulator
	for _, e := range spec {
		if e.Key == "_id" {
			continue
		}
		d, ok := e.Value.(bson.D)
		if !ok || len(d) != 1 {
			return nil, cmdErrf(40234, "Location40234", "The field '%s' must be an accumulator object", e.Key)
		}
		op := d[0].Key
		switch op {
		case "$sum", "$avg", "$min", "$max", "$first", "$last", "$push", "$addToSet", "$count":
		default:
			return nil, cmdErrf(15952, "Location15952", "unknown group operator '%s'", op)
		}
		arg := d[0].Value
		if op == "$count" {
			op, arg = "$sum", int32(1)
		}
		fn, err := ec.compile(arg, nil)
		if err != nil {
			return nil, err
		}
		accs = append(accs, accumulator{e.Key, op, fn})
	}
	type group struct {
		id    any
		vals  []any
		count []int64
		seen  []bool
	}
	return stageFunc(func(docs []bson.D) ([]bson.D, error) {
		groups := map[string]*group{}
		var order []*group
		for _, d := range docs {
			e := &env{root: d, cur: d}
			id, err := idFn(e)
			if err != nil {
				return nil, err
			}
			if isMissing(id) {
				id = nil
			}
			k := string(appendKey(nil, id))
			g := groups[k]
			if g == nil {
				g = &group{id: id, vals: make([]any, len(accs)), count: make([]int64, len(accs)), seen: make([]bool, len(accs))}
				for i, a := range accs {
					switch a.op {
					case "$sum":
						g.vals[i] = int32(0)
					case "$push", "$addToSet":
						g.vals[i] = bson.A{}
					case "$avg":
						g.vals[i] = 0.0
					default:
						g.vals[i] = nil
					}
				}
				groups[k] = g
				order = append(order, g)
			}
			for i, a := range accs {
				v, err := a.fn(e)
				if err != nil {
					return nil, err
				}
				switch a.op {
				case "$sum":
					if isNumber(v) {
						s, err := addValues([]any{g.vals[i], v})
						if err != nil {
							return nil, err
						}
						g.vals[i] = s
					}
				case "$avg":
					if isNumber(v) {
						g.vals[i] = g.vals[i].(float64) + toFloat(v)
						g.count[i]++
					}
				case "$min", "$max":
					if isNullish(v) {
						continue
					}
					if !g.seen[i] || (a.op == "$min" && compareValues(v, g.vals[i]) < 0) || (a.op == "$max" && compareValues(v, g.vals[i]) > 0) {
						g.vals[i] = v
						g.seen[i] = true
					}
				case "$first":
					if !g.seen[i] {
						if isMissing(v) {
							v = nil
						}
						g.vals[i], g.seen[i] = v, true
					}
				case "$last":
					if isMissing(v) {
						v = nil
					}
					g.vals[i] = v
				case "$push":
					if !isMissing(v) {
						g.vals[i] = append(g.vals[i].(bson.A), v)
					}
				case "$addToSet":
					if isMissing(v) {
						continue
					}
					arr := g.vals[i].(bson.A)
					dup := false
					for _, x := range arr {
						if compareValues(x, v) == 0 {
							dup = true
							break
						}
					}
					if !dup {
						g.vals[i] = append(arr, v)
					}
				}
			}
		}
		out := make([]bson.D, 0, len(order))
		for _, g := range order {
			d := bson.D{{Key: "_id", Value: g.id}}
			for i, a := range accs {
				v := g.vals[i]
				if a.op == "$avg" {
					if g.count[i] == 0 {
						v = nil
					} else {
						v = v.(float64) / float64(g.count[i])
					}
				}
				d = append(d, bson.E{Key: a.field, Value: v})
			}
			out = append(out, d)
		}
		return out, nil
	}), nil
}

func compileUnwind(spec any) (stage, error) {
	var path, idxField string
	preserve := false
	switch x := spec.(type) {
	case string:
		path = x
	case bson.D:
		p, _ := docGet(x, "path")
		path, _ = p.(string)
		pr, _ := docGet(x, "preserveNullAndEmptyArrays")
		preserve = truthy(pr)
		ia, _ := docGet(x, "includeArrayIndex")
		idxField, _ = ia.(string)
	}
	if !strings.HasPrefix(path, "$") || len(path) < 2 {
		return nil, cmdErrf(28818, "Location28818", "path option to $unwind stage should be prefixed with a '$': %s", path)
	}
	parts := splitPath(path[1:])
	return stageFunc(func(docs []bson.D) ([]bson.D, error) {
		var out []bson.D
		for _, d := range docs {
			v, ok := getAt(d, parts)
			arr, isArr := v.(bson.A)
			switch {
			case isArr && len(arr) > 0:
				for i, el := range arr {
					nd, _ := setPath(deepCopy(d).(bson.D), parts, el)
					if idxField != "" {
						nd = setField(nd, idxField, int64(i))
					}
					out = append(out, nd)
				}
			case !ok || v == nil || (isArr && len(arr) == 0):
				if preserve {
					nd := d
					if isArr {
						nd = unsetPath(deepCopy(d).(bson.D), parts)
					}
					if idxField != "" {
						nd = setField(cloneShallow(nd), idxField, nil)
					}
					out = append(out, nd)
				}
			default:
				nd := d
				if idxField != "" {
					nd = setField(cloneShallow(nd), idxField, nil)
				}
				out = append(out, nd)
			}
		}
		return out, nil
	}), nil
}

// compileLookup is $lookup's equality form (from, localField, foreignField,
// as): each document gets, at as, the array of from's documents whose
// foreignField equals its localField. As on mongod an array on either side
// matches element by element, and a missing or null localField matches a
// missing or null foreignField (the manual's $lookup "Equality Match with a
// Single Join Condition"). The pipeline forms are not supported.
func compileLookup(spec any, ec *evalCtx) (stage, error) {
	d, ok := spec.(bson.D)
	if !ok {
		return nil, cmdErrf(40319, "Location40319", "the $lookup stage specification must be an object, but found %s", typeName(spec))
	}
	var from, local, foreign, as string
	for _, e := range d {
		s, isStr := e.Value.(string)
		switch e.Key {
		case "from", "localField", "foreignField", "as":
			if !isStr {
				return nil, cmdErrf(4570, "Location4570", "$lookup argument '%s: %s' must be a string, is type %s", e.Key, formatValue(e.Value), typeName(e.Value))
			}
		case "pipeline", "let":
			return nil, cmdErrf(2, "BadValue", "mongotest supports $lookup with localField and foreignField only, not %s", e.Key)
		default:
			return nil, cmdErrf(9, "FailedToParse", "unknown argument to $lookup: %s", e.Key)
		}
		switch e.Key {
		case "from":
			from = s
		case "localField":
			local = s
		case "foreignField":
			foreign = s
		case "as":
			as = s
		}
	}
	if from == "" || local == "" || foreign == "" || as == "" {
		return nil, cmdErrf(9, "FailedToParse", "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified, and 'from' and 'as'")
	}
	if ec == nil || ec.foreign == nil {
		return nil, cmdErrf(2, "BadValue", "$lookup is not supported here")
	}
	return stageFunc(func(docs []bson.D) ([]bson.D, error) {
		others := ec.foreign(from)
		out := make([]bson.D, 0, len(docs))
		for _, doc := range docs {
			keys := resolvePath(doc, splitPath(local))
			var flat []any
			for _, k := range keys {
				if a, ok := k.(bson.A); ok {
					flat = append(flat, a...)
				}
				flat = append(flat, k)
			}
			if len(flat) == 0 {
				flat = []any{nil}
			}
			matches := bson.A{}
			for _, o := range others {
				vals := resolvePath(o, splitPath(foreign))
				var fvals []any
				for _, v := range vals {
					if a, ok := v.(bson.A); ok {
						fvals = append(fvals, a...)
					}
					fvals = append(fvals, v)
				}
				if len(fvals) == 0 {
					fvals = []any{nil}
				}
				if lookupMatch(flat, fvals) {
					matches = append(matches, o)
				}
			}
			out = append(out, setField(cloneShallow(doc), as, matches))
		}
		return out, nil
	}), nil
}

func lookupMatch(keys, vals []any) bool {
	isNull := func(v any) bool {
		switch v.(type) {
		case nil, bson.Null, bson.Undefined, missingT:
			return true
		}
		return false
	}
	for _, k := range keys {
		for _, v := range vals {
			if isNull(k) || isNull(v) {
				if isNull(k) && isNull(v) {
					return true
				}
				continue
			}
			if canonType(k) == canonType(v) && compareValues(k, v) == 0 {
				return true
			}
		}
	}
	return false
}
