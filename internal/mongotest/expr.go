package mongotest

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Aggregation expressions ($expr, pipeline stages, update pipelines).
// Semantics from src/mongo/db/pipeline/expression.cpp as summarised in the
// reference note §5.2: cross-type comparison order, coerceToBool truthiness,
// $add of a date and milliseconds is a date, $type of a missing field is
// "missing", $$NOW is fixed for a whole command.

// evalCtx carries what is constant for one command: $$NOW, $$CLUSTER_TIME,
// and the first evaluation error met inside a matcher.
type evalCtx struct {
	now         bson.DateTime
	clusterTime bson.Timestamp
	mu          sync.Mutex
	err         error
	// foreign reads the documents of another collection of the command's
	// database ($lookup's from); nil where no stage may read one.
	foreign func(coll string) []bson.D
	// noExpr refuses the expression operators FerretDB 1.24 lacks (see
	// Options.NoExpressions).
	noExpr bool
}

func (ec *evalCtx) setErr(err error) {
	ec.mu.Lock()
	if ec.err == nil {
		ec.err = err
	}
	ec.mu.Unlock()
}

func (ec *evalCtx) takeErr() error {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	err := ec.err
	ec.err = nil
	return err
}

type env struct {
	root bson.D
	cur  any
	vars map[string]any
}

type exprFn func(e *env) (any, error)

type compiled struct {
	fn exprFn
}

func (c *compiled) eval(root bson.D) (any, error) {
	return c.fn(&env{root: root, cur: root})
}

func (ec *evalCtx) compileExpr(v any) (*compiled, error) {
	fn, err := ec.compile(v, nil)
	if err != nil {
		return nil, err
	}
	return &compiled{fn: fn}, nil
}

func exprErr(code int32, format string, args ...any) error {
	return cmdErrf(code, fmt.Sprintf("Location%d", code), format, args...)
}

func (ec *evalCtx) compile(v any, scope []string) (exprFn, error) {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "$$") {
			return ec.compileVar(x[2:], scope)
		}
		if strings.HasPrefix(x, "$") {
			if len(x) == 1 {
				return nil, exprErr(16872, "'$' by itself is not a valid FieldPath")
			}
			parts := splitPath(x[1:])
			return func(e *env) (any, error) { return getPath(e.cur, parts), nil }, nil
		}
		return func(*env) (any, error) { return x, nil }, nil
	case bson.D:
		if len(x) > 0 && strings.HasPrefix(x[0].Key, "$") {
			if len(x) != 1 {
				return nil, exprErr(15983, "an expression specification must contain exactly one field, the name of the expression. Found %d fields in %s", len(x), formatValue(x))
			}
			if ec.noExpr && x[0].Key != "$sum" && x[0].Key != "$type" {
				return nil, cmdErrf(238, "NotImplemented", "The operator %s is not implemented yet", x[0].Key)
			}
			return ec.compileOp(x[0].Key, x[0].Value, scope)
		}
		type field struct {
			key string
			fn  exprFn
		}
		fields := make([]field, 0, len(x))
		for _, el := range x {
			if strings.HasPrefix(el.Key, "$") {
				return nil, exprErr(16410, "FieldPath field names may not start with '$'")
			}
			fn, err := ec.compile(el.Value, scope)
			if err != nil {
				return nil, err
			}
			fields = append(fields, field{el.Key, fn})
		}
		return func(e *env) (any, error) {
			out := make(bson.D, 0, len(fields))
			for _, f := range fields {
				val, err := f.fn(e)
				if err != nil {
					return nil, err
				}
				if !isMissing(val) {
					out = append(out, bson.E{Key: f.key, Value: val})
				}
			}
			return out, nil
		}, nil
	case bson.A:
		fns := make([]exprFn, len(x))
		for i, el := range x {
			fn, err := ec.compile(el, scope)
			if err != nil {
				return nil, err
			}
			fns[i] = fn
		}
		return func(e *env) (any, error) {
			out := make(bson.A, 0, len(fns))
			for _, fn := range fns {
				val, err := fn(e)
				if err != nil {
					return nil, err
				}
				if isMissing(val) {
					val = nil
				}
				out = append(out, val)
			}
			return out, nil
		}, nil
	}
	return func(*env) (any, error) { return v, nil }, nil
}

func (ec *evalCtx) compileVar(name string, scope []string) (exprFn, error) {
	parts := splitPath(name)
	base, rest := parts[0], parts[1:]
	var get func(e *env) any
	switch base {
	case "NOW":
		get = func(*env) any { return ec.now }
	case "CLUSTER_TIME":
		get = func(*env) any { return ec.clusterTime }
	case "ROOT":
		get = func(e *env) any { return e.root }
	case "CURRENT":
		get = func(e *env) any { return e.cur }
	case "REMOVE":
		get = func(*env) any { return missing }
	default:
		found := false
		for _, s := range scope {
			if s == base {
				found = true
			}
		}
		if !found {
			return nil, exprErr(17276, "Use of undefined variable: %s", base)
		}
		get = func(e *env) any {
			v, ok := e.vars[base]
			if !ok {
				return missing
			}
			return v
		}
	}
	if len(rest) == 0 {
		return func(e *env) (any, error) { return get(e), nil }, nil
	}
	return func(e *env) (any, error) { return getPath(get(e), rest), nil }, nil
}

// getPath evaluates a field path in expression semantics: a path through an
// array yields the array of the values found in its elements.
func getPath(v any, parts []string) any {
	for i, p := range parts {
		switch x := v.(type) {
		case bson.D:
			fv, ok := docGet(x, p)
			if !ok {
				return missing
			}
			v = fv
		case rawDoc:
			fv, ok := rawLookup(x, p)
			if !ok {
				return missing
			}
			v = fv
		case bson.A:
			out := make(bson.A, 0, len(x))
			for _, el := range x {
				r := getPath(el, parts[i:])
				if !isMissing(r) {
					out = append(out, r)
				}
			}
			return out
		default:
			return missing
		}
	}
	return v
}

// truthy is coerceToBool.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil, missingT, bson.Undefined, bson.Null:
		return false
	case bool:
		return x
	case int32:
		return x != 0
	case int64:
		return x != 0
	case int:
		return x != 0
	case float64:
		return x != 0
	case bson.Decimal128:
		return !x.IsZero()
	}
	return true
}

func isNullish(v any) bool {
	switch v.(type) {
	case nil, missingT, bson.Undefined, bson.Null:
		return true
	}
	return false
}

func (ec *evalCtx) args(op string, v any, scope []string, min, max int) ([]exprFn, error) {
	var raw bson.A
	if a, ok := v.(bson.A); ok {
		raw = a
	} else {
		raw = bson.A{v}
	}
	if (min >= 0 && len(raw) < min) || (max >= 0 && len(raw) > max) {
		if min == max {
			return nil, exprErr(16020, "Expression %s takes exactly %d arguments. %d were passed in.", op, min, len(raw))
		}
		return nil, exprErr(16020, "Expression %s takes at least %d arguments, and at most %d. %d were passed in.", op, min, max, len(raw))
	}
	fns := make([]exprFn, len(raw))
	for i, r := range raw {
		fn, err := ec.compile(r, scope)
		if err != nil {
			return nil, err
		}
		fns[i] = fn
	}
	return fns, nil
}

func evalAll(fns []exprFn, e *env) ([]any, error) {
	out := make([]any, len(fns))
	for i, fn := range fns {
		v, err := fn(e)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (ec *evalCtx) compileOp(op string, arg any, scope []string) (exprFn, error) {
	switch op {
	case "$literal":
		return func(*env) (any, error) { return arg, nil }, nil
	case "$cond":
		var ifA, thenA, elseA any
		switch x := arg.(type) {
		case bson.A:
			if len(x) != 3 {
				return nil, exprErr(16020, "Expression $cond takes exactly 3 arguments. %d were passed in.", len(x))
			}
			ifA, thenA, elseA = x[0], x[1], x[2]
		case bson.D:
			var has [3]bool
			for _, el := range x {
				switch el.Key {
				case "if":
					ifA, has[0] = el.Value, true
				case "then":
					thenA, has[1] = el.Value, true
				case "else":
					elseA, has[2] = el.Value, true
				default:
					return nil, exprErr(17083, "Unrecognized parameter to $cond: %s", el.Key)
				}
			}
			if !has[0] {
				return nil, exprErr(17080, "Missing 'if' parameter to $cond")
			}
			if !has[1] {
				return nil, exprErr(17081, "Missing 'then' parameter to $cond")
			}
			if !has[2] {
				return nil, exprErr(17082, "Missing 'else' parameter to $cond")
			}
		default:
			return nil, exprErr(16020, "Expression $cond takes exactly 3 arguments. 1 were passed in.")
		}
		fi, err := ec.compile(ifA, scope)
		if err != nil {
			return nil, err
		}
		ft, err := ec.compile(thenA, scope)
		if err != nil {
			return nil, err
		}
		fe, err := ec.compile(elseA, scope)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			c, err := fi(e)
			if err != nil {
				return nil, err
			}
			if truthy(c) {
				return ft(e)
			}
			return fe(e)
		}, nil
	case "$switch":
		d, ok := arg.(bson.D)
		if !ok {
			return nil, exprErr(40060, "$switch requires an object as an argument")
		}
		type branch struct{ c, t exprFn }
		var branches []branch
		var def exprFn
		for _, el := range d {
			switch el.Key {
			case "branches":
				arr, _ := el.Value.(bson.A)
				for _, b := range arr {
					bd, _ := b.(bson.D)
					caseV, _ := docGet(bd, "case")
					thenV, _ := docGet(bd, "then")
					fc, err := ec.compile(caseV, scope)
					if err != nil {
						return nil, err
					}
					ft, err := ec.compile(thenV, scope)
					if err != nil {
						return nil, err
					}
					branches = append(branches, branch{fc, ft})
				}
			case "default":
				fd, err := ec.compile(el.Value, scope)
				if err != nil {
					return nil, err
				}
				def = fd
			}
		}
		return func(e *env) (any, error) {
			for _, b := range branches {
				c, err := b.c(e)
				if err != nil {
					return nil, err
				}
				if truthy(c) {
					return b.t(e)
				}
			}
			if def == nil {
				return nil, exprErr(40066, "$switch could not find a matching branch for an input, and no default was specified.")
			}
			return def(e)
		}, nil
	case "$ifNull":
		fns, err := ec.args(op, arg, scope, 2, -1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			for _, fn := range fns[:len(fns)-1] {
				v, err := fn(e)
				if err != nil {
					return nil, err
				}
				if !isNullish(v) {
					return v, nil
				}
			}
			return fns[len(fns)-1](e)
		}, nil
	case "$and", "$or":
		fns, err := ec.args(op, arg, scope, 0, -1)
		if err != nil {
			return nil, err
		}
		isAnd := op == "$and"
		return func(e *env) (any, error) {
			for _, fn := range fns {
				v, err := fn(e)
				if err != nil {
					return nil, err
				}
				if truthy(v) != isAnd {
					return !isAnd, nil
				}
			}
			return isAnd, nil
		}, nil
	case "$not":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil {
				return nil, err
			}
			return !truthy(v), nil
		}, nil
	case "$eq", "$ne", "$lt", "$lte", "$gt", "$gte", "$cmp":
		fns, err := ec.args(op, arg, scope, 2, 2)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			vs, err := evalAll(fns, e)
			if err != nil {
				return nil, err
			}
			c := compareValues(vs[0], vs[1])
			switch op {
			case "$eq":
				return c == 0, nil
			case "$ne":
				return c != 0, nil
			case "$lt":
				return c < 0, nil
			case "$lte":
				return c <= 0, nil
			case "$gt":
				return c > 0, nil
			case "$gte":
				return c >= 0, nil
			}
			return int32(c), nil
		}, nil
	case "$add":
		fns, err := ec.args(op, arg, scope, 0, -1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			vs, err := evalAll(fns, e)
			if err != nil {
				return nil, err
			}
			return addValues(vs)
		}, nil
	case "$subtract":
		fns, err := ec.args(op, arg, scope, 2, 2)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			vs, err := evalAll(fns, e)
			if err != nil {
				return nil, err
			}
			return subtractValues(vs[0], vs[1])
		}, nil
	case "$multiply", "$divide", "$mod":
		min, max := 0, -1
		if op != "$multiply" {
			min, max = 2, 2
		}
		fns, err := ec.args(op, arg, scope, min, max)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			vs, err := evalAll(fns, e)
			if err != nil {
				return nil, err
			}
			return arith(op, vs)
		}, nil
	case "$abs":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil || isNullish(v) {
				return nil, err
			}
			switch x := v.(type) {
			case int32:
				if x < 0 {
					return -int64(x), nil
				}
				return x, nil
			case int64:
				if x < 0 {
					return -x, nil
				}
				return x, nil
			case float64:
				return math.Abs(x), nil
			}
			return nil, exprErr(28765, "$abs only supports numeric types, not %s", typeName(v))
		}, nil
	case "$type":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil {
				return nil, err
			}
			return typeName(v), nil
		}, nil
	case "$isArray":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			_, ok := v.(bson.A)
			return ok, err
		}, nil
	case "$concatArrays":
		fns, err := ec.args(op, arg, scope, 0, -1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			out := bson.A{}
			for _, fn := range fns {
				v, err := fn(e)
				if err != nil {
					return nil, err
				}
				if isNullish(v) {
					return nil, nil
				}
				arr, ok := v.(bson.A)
				if !ok {
					return nil, exprErr(28664, "$concatArrays only supports arrays, not %s", typeName(v))
				}
				out = append(out, arr...)
			}
			return out, nil
		}, nil
	case "$slice":
		fns, err := ec.args(op, arg, scope, 2, 3)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			vs, err := evalAll(fns, e)
			if err != nil {
				return nil, err
			}
			for _, v := range vs {
				if isNullish(v) {
					return nil, nil
				}
			}
			arr, ok := vs[0].(bson.A)
			if !ok {
				return nil, exprErr(28724, "First argument to $slice must be an array, but is of type: %s", typeName(vs[0]))
			}
			n1, ok := toInt64(vs[1])
			if !ok {
				return nil, exprErr(28725, "Second argument to $slice must be a numeric value, but was of type: %s", typeName(vs[1]))
			}
			l := int64(len(arr))
			if len(vs) == 2 {
				if n1 >= 0 {
					return append(bson.A{}, arr[:min64(n1, l)]...), nil
				}
				return append(bson.A{}, arr[l-min64(-n1, l):]...), nil
			}
			n2, ok := toInt64(vs[2])
			if !ok || n2 <= 0 {
				return nil, exprErr(28729, "Third argument to $slice must be positive: %s", formatValue(vs[2]))
			}
			start := n1
			if start < 0 {
				start = l + start
				if start < 0 {
					start = 0
				}
			}
			if start > l {
				start = l
			}
			end := min64(start+n2, l)
			return append(bson.A{}, arr[start:end]...), nil
		}, nil
	case "$size":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil {
				return nil, err
			}
			arr, ok := v.(bson.A)
			if !ok {
				return nil, exprErr(17124, "The argument to $size must be an array. Type of argument: %s", typeName(v))
			}
			return int32(len(arr)), nil
		}, nil
	case "$bsonSize":
		// The size of a document as BSON; null for null or missing
		// (expression_bson_size.cpp, MongoDB 4.4+).
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil {
				return nil, err
			}
			switch d := v.(type) {
			case bson.D:
				return int32(len(encodeDoc(d))), nil
			case rawDoc:
				return int32(len(d)), nil
			}
			if isNullish(v) {
				return nil, nil
			}
			return nil, exprErr(31393, "$bsonSize requires a document input, found: %s", typeName(v))
		}, nil
	case "$arrayElemAt":
		fns, err := ec.args(op, arg, scope, 2, 2)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			vs, err := evalAll(fns, e)
			if err != nil {
				return nil, err
			}
			if isNullish(vs[0]) || isNullish(vs[1]) {
				return nil, nil
			}
			arr, ok := vs[0].(bson.A)
			if !ok {
				return nil, exprErr(28689, "$arrayElemAt's first argument must be an array, but is %s", typeName(vs[0]))
			}
			i, ok := toInt64(vs[1])
			if !ok {
				return nil, exprErr(28690, "$arrayElemAt's second argument must be a numeric value")
			}
			if i < 0 {
				i += int64(len(arr))
			}
			if i < 0 || i >= int64(len(arr)) {
				return missing, nil
			}
			return arr[i], nil
		}, nil
	case "$in":
		fns, err := ec.args(op, arg, scope, 2, 2)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			vs, err := evalAll(fns, e)
			if err != nil {
				return nil, err
			}
			arr, ok := vs[1].(bson.A)
			if !ok {
				return nil, exprErr(40081, "$in requires an array as a second argument, found: %s", typeName(vs[1]))
			}
			for _, a := range arr {
				if compareValues(a, vs[0]) == 0 {
					return true, nil
				}
			}
			return false, nil
		}, nil
	case "$concat":
		fns, err := ec.args(op, arg, scope, 0, -1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			var sb strings.Builder
			for _, fn := range fns {
				v, err := fn(e)
				if err != nil {
					return nil, err
				}
				if isNullish(v) {
					return nil, nil
				}
				s, ok := v.(string)
				if !ok {
					return nil, exprErr(16702, "$concat only supports strings, not %s", typeName(v))
				}
				sb.WriteString(s)
			}
			return sb.String(), nil
		}, nil
	case "$toLower", "$toUpper":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil {
				return nil, err
			}
			if isNullish(v) {
				return "", nil
			}
			s := fmt.Sprint(v)
			if str, ok := v.(string); ok {
				s = str
			}
			if op == "$toLower" {
				return strings.ToLower(s), nil
			}
			return strings.ToUpper(s), nil
		}, nil
	case "$max", "$min":
		fns, err := ec.args(op, arg, scope, 1, -1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			vs, err := evalAll(fns, e)
			if err != nil {
				return nil, err
			}
			if len(vs) == 1 {
				if arr, ok := vs[0].(bson.A); ok {
					vs = arr
				}
			}
			var best any = nil
			found := false
			for _, v := range vs {
				if isNullish(v) {
					continue
				}
				if !found || (op == "$max" && compareValues(v, best) > 0) || (op == "$min" && compareValues(v, best) < 0) {
					best, found = v, true
				}
			}
			return best, nil
		}, nil
	case "$mergeObjects":
		fns, err := ec.args(op, arg, scope, 0, -1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			out := bson.D{}
			for _, fn := range fns {
				v, err := fn(e)
				if err != nil {
					return nil, err
				}
				if isNullish(v) {
					continue
				}
				d, ok := v.(bson.D)
				if !ok {
					return nil, exprErr(40400, "$mergeObjects requires object inputs, but input %s is of type %s", formatValue(v), typeName(v))
				}
				for _, el := range d {
					out = setField(out, el.Key, el.Value)
				}
			}
			return out, nil
		}, nil
	case "$objectToArray":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil || isNullish(v) {
				return nil, err
			}
			d, ok := v.(bson.D)
			if !ok {
				return nil, exprErr(40390, "$objectToArray requires a document input, found: %s", typeName(v))
			}
			out := make(bson.A, len(d))
			for i, el := range d {
				out[i] = bson.D{{Key: "k", Value: el.Key}, {Key: "v", Value: el.Value}}
			}
			return out, nil
		}, nil
	case "$arrayToObject":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil || isNullish(v) {
				return nil, err
			}
			arr, ok := v.(bson.A)
			if !ok {
				return nil, exprErr(40386, "$arrayToObject requires an array input, found: %s", typeName(v))
			}
			out := bson.D{}
			for _, el := range arr {
				var k, val any
				switch x := el.(type) {
				case bson.A:
					if len(x) != 2 {
						return nil, exprErr(40397, "$arrayToObject requires an array of size 2 arrays,found array of size: %d", len(x))
					}
					k, val = x[0], x[1]
				case bson.D:
					kv, kok := docGet(x, "k")
					vv, vok := docGet(x, "v")
					if len(x) != 2 || !kok || !vok {
						return nil, exprErr(40392, "$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect number of keys:%d", len(x))
					}
					k, val = kv, vv
				default:
					return nil, exprErr(40398, "Unrecognised input type format for $arrayToObject: %s", typeName(el))
				}
				ks, ok := k.(string)
				if !ok {
					return nil, exprErr(40394, "$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' must be of type string. Found type: %s", typeName(k))
				}
				out = setField(out, ks, val)
			}
			return out, nil
		}, nil
	case "$regexMatch":
		d, ok := arg.(bson.D)
		if !ok {
			return nil, exprErr(51103, "$regexMatch expects an object of named arguments but found: %s", typeName(arg))
		}
		var input, regex, opts exprFn
		for _, el := range d {
			fn, err := ec.compile(el.Value, scope)
			if err != nil {
				return nil, err
			}
			switch el.Key {
			case "input":
				input = fn
			case "regex":
				regex = fn
			case "options":
				opts = fn
			default:
				return nil, exprErr(31024, "$regexMatch found an unknown argument: %s", el.Key)
			}
		}
		if input == nil || regex == nil {
			return nil, exprErr(31022, "$regexMatch requires 'input' and 'regex' parameters")
		}
		return func(e *env) (any, error) {
			in, err := input(e)
			if err != nil {
				return nil, err
			}
			rv, err := regex(e)
			if err != nil {
				return nil, err
			}
			var pattern, flags string
			switch r := rv.(type) {
			case string:
				pattern = r
			case bson.Regex:
				pattern, flags = r.Pattern, r.Options
			default:
				if isNullish(rv) {
					return false, nil
				}
				return nil, exprErr(51105, "$regexMatch needs 'regex' to be of type string or regex")
			}
			if opts != nil {
				ov, err := opts(e)
				if err != nil {
					return nil, err
				}
				if o, ok := ov.(string); ok {
					flags = o
				}
			}
			if isNullish(in) {
				return false, nil
			}
			str, ok := in.(string)
			if !ok {
				return nil, exprErr(51104, "$regexMatch needs 'input' to be of type string")
			}
			rx, err := compileRegex(pattern, flags)
			if err != nil {
				return nil, err
			}
			return rx.MatchString(str), nil
		}, nil
	case "$getField":
		// {$getField: {field: <string>, input: <expr>}} or {$getField:
		// <string>}: reads a field whose name may hold dots or a $,
		// which a field path cannot.
		var field any = arg
		var input exprFn = func(e *env) (any, error) { return e.cur, nil }
		if d, ok := arg.(bson.D); ok {
			field = nil
			for _, el := range d {
				switch el.Key {
				case "field":
					field = el.Value
				case "input":
					fn, err := ec.compile(el.Value, scope)
					if err != nil {
						return nil, err
					}
					input = fn
				default:
					return nil, exprErr(3041701, "$getField found an unknown argument: %s", el.Key)
				}
			}
		}
		name, ok := field.(string)
		if !ok {
			return nil, exprErr(5654602, "$getField requires 'field' to evaluate to type String, but got %s", typeName(field))
		}
		return func(e *env) (any, error) {
			v, err := input(e)
			if err != nil {
				return nil, err
			}
			if isNullish(v) {
				return nil, nil
			}
			d, ok := v.(bson.D)
			if !ok {
				return nil, exprErr(3041705, "$getField requires 'input' to evaluate to type Object, but got %s", typeName(v))
			}
			if fv, ok := docGet(d, name); ok {
				return fv, nil
			}
			return missing, nil
		}, nil
	case "$let":
		d, ok := arg.(bson.D)
		if !ok {
			return nil, exprErr(16874, "$let only supports an object as its argument")
		}
		varsV, _ := docGet(d, "vars")
		inV, _ := docGet(d, "in")
		vd, _ := varsV.(bson.D)
		names := make([]string, len(vd))
		fns := make([]exprFn, len(vd))
		for i, el := range vd {
			fn, err := ec.compile(el.Value, scope)
			if err != nil {
				return nil, err
			}
			names[i], fns[i] = el.Key, fn
		}
		in, err := ec.compile(inV, append(append([]string{}, scope...), names...))
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			ne := &env{root: e.root, cur: e.cur, vars: copyVars(e.vars)}
			for i, fn := range fns {
				v, err := fn(e)
				if err != nil {
					return nil, err
				}
				ne.vars[names[i]] = v
			}
			return in(ne)
		}, nil
	case "$map", "$filter":
		d, ok := arg.(bson.D)
		if !ok {
			return nil, exprErr(16878, "%s only supports an object as its argument", op)
		}
		inputV, _ := docGet(d, "input")
		asV, ok := docGet(d, "as")
		as := "this"
		if ok {
			as, _ = asV.(string)
		}
		bodyKey := "in"
		if op == "$filter" {
			bodyKey = "cond"
		}
		bodyV, _ := docGet(d, bodyKey)
		input, err := ec.compile(inputV, scope)
		if err != nil {
			return nil, err
		}
		body, err := ec.compile(bodyV, append(append([]string{}, scope...), as))
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			in, err := input(e)
			if err != nil {
				return nil, err
			}
			if isNullish(in) {
				return nil, nil
			}
			arr, ok := in.(bson.A)
			if !ok {
				return nil, exprErr(16883, "input to %s must be an array not %s", op, typeName(in))
			}
			out := bson.A{}
			ne := &env{root: e.root, cur: e.cur, vars: copyVars(e.vars)}
			for _, el := range arr {
				ne.vars[as] = el
				v, err := body(ne)
				if err != nil {
					return nil, err
				}
				if op == "$map" {
					if isMissing(v) {
						v = nil
					}
					out = append(out, v)
				} else if truthy(v) {
					out = append(out, el)
				}
			}
			return out, nil
		}, nil
	case "$toDate", "$toLong", "$toInt", "$toDouble", "$toString", "$toBool":
		fns, err := ec.args(op, arg, scope, 1, 1)
		if err != nil {
			return nil, err
		}
		return func(e *env) (any, error) {
			v, err := fns[0](e)
			if err != nil {
				return nil, err
			}
			return convertValue(op, v)
		}, nil
	}
	return nil, cmdErrf(168, "InvalidPipelineOperator", "Unrecognized expression '%s'", op)
}

func copyVars(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

// addValues is ExpressionAdd: numbers, at most one date; null/missing gives
// null; a date plus numbers is a date, the sum rounded half away from zero.
func addValues(vs []any) (any, error) {
	var date *bson.DateTime
	allInt32, anyDouble, anyDecimal := true, false, false
	var isum int64
	var fsum float64
	intOverflow := false
	for _, v := range vs {
		switch x := v.(type) {
		case nil, missingT, bson.Undefined:
			return nil, nil
		case bson.DateTime:
			if date != nil {
				return nil, exprErr(16612, "only one date allowed in an $add expression")
			}
			d := x
			date = &d
		case int32:
			if !intOverflow {
				if s, ok := addOverflow(isum, int64(x)); ok {
					isum = s
				} else {
					intOverflow = true
				}
			}
			fsum += float64(x)
		case int64:
			allInt32 = false
			if !intOverflow {
				if s, ok := addOverflow(isum, x); ok {
					isum = s
				} else {
					intOverflow = true
				}
			}
			fsum += float64(x)
		case float64:
			allInt32, anyDouble = false, true
			fsum += x
		case bson.Decimal128:
			allInt32, anyDecimal = false, true
			fsum += toFloat(x)
		default:
			return nil, exprErr(16554, "$add only supports numeric or date types, not %s", typeName(v))
		}
	}
	if date != nil {
		var ms float64
		if anyDouble || anyDecimal || intOverflow {
			ms = math.Round(fsum)
		} else {
			ms = float64(isum)
		}
		r := float64(*date) + ms
		if r > math.MaxInt64 || r < math.MinInt64 {
			return nil, cmdErrf(15, "Overflow", "date overflow in $add")
		}
		if !(anyDouble || anyDecimal || intOverflow) {
			s, ok := addOverflow(int64(*date), isum)
			if !ok {
				return nil, cmdErrf(15, "Overflow", "date overflow in $add")
			}
			return bson.DateTime(s), nil
		}
		return bson.DateTime(int64(r)), nil
	}
	switch {
	case anyDecimal:
		d, _ := bson.ParseDecimal128(fmt.Sprint(fsum))
		return d, nil
	case anyDouble || intOverflow:
		return fsum, nil
	case allInt32 && isum >= math.MinInt32 && isum <= math.MaxInt32:
		return int32(isum), nil
	}
	return isum, nil
}

func addOverflow(a, b int64) (int64, bool) {
	s := a + b
	if (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0) {
		return 0, false
	}
	return s, true
}

func subtractValues(a, b any) (any, error) {
	if isNullish(a) || isNullish(b) {
		return nil, nil
	}
	if da, ok := a.(bson.DateTime); ok {
		if db, ok := b.(bson.DateTime); ok {
			return int64(da) - int64(db), nil
		}
		if isNumber(b) {
			if i, ok := b.(int64); ok {
				return bson.DateTime(int64(da) - i), nil
			}
			if i, ok := b.(int32); ok {
				return bson.DateTime(int64(da) - int64(i)), nil
			}
			return bson.DateTime(int64(da) - int64(math.Round(toFloat(b)))), nil
		}
		return nil, exprErr(16613, "can't $subtract %s from a date", typeName(b))
	}
	if !isNumber(a) || !isNumber(b) {
		return nil, exprErr(16556, "can't $subtract %s from %s", typeName(b), typeName(a))
	}
	neg := b
	switch x := b.(type) {
	case int32:
		neg = -int64(x)
		if _, ok := a.(int32); ok {
			r := int64(a.(int32)) - int64(x)
			if r >= math.MinInt32 && r <= math.MaxInt32 {
				return int32(r), nil
			}
			return r, nil
		}
	case int64:
		neg = -x
	case float64:
		neg = -x
	case bson.Decimal128:
		neg = -toFloat(x)
	}
	return addValues([]any{a, neg})
}

func arith(op string, vs []any) (any, error) {
	for _, v := range vs {
		if isNullish(v) {
			return nil, nil
		}
		if !isNumber(v) {
			return nil, exprErr(16555, "%s only supports numeric types, not %s", op, typeName(v))
		}
	}
	switch op {
	case "$multiply":
		allInt, anyDouble := true, false
		var ip int64 = 1
		fp := 1.0
		all32 := true
		for _, v := range vs {
			switch x := v.(type) {
			case int32:
				ip *= int64(x)
			case int64:
				ip *= x
				all32 = false
			default:
				allInt, anyDouble, all32 = false, true, false
			}
			fp *= toFloat(v)
		}
		if anyDouble || !allInt {
			return fp, nil
		}
		if all32 && ip >= math.MinInt32 && ip <= math.MaxInt32 {
			return int32(ip), nil
		}
		return ip, nil
	case "$divide":
		d := toFloat(vs[1])
		if d == 0 {
			return nil, exprErr(16608, "can't $divide by zero")
		}
		return toFloat(vs[0]) / d, nil
	case "$mod":
		ai, aok := toInt64(vs[0])
		bi, bok := toInt64(vs[1])
		_, af := vs[0].(float64)
		_, bf := vs[1].(float64)
		if aok && bok && !af && !bf {
			if bi == 0 {
				return nil, exprErr(16610, "can't $mod by zero")
			}
			r := ai % bi
			if _, ok := vs[0].(int32); ok {
				if _, ok := vs[1].(int32); ok {
					return int32(r), nil
				}
			}
			return r, nil
		}
		return math.Mod(toFloat(vs[0]), toFloat(vs[1])), nil
	}
	return nil, nil
}

func convertValue(op string, v any) (any, error) {
	if isNullish(v) {
		return nil, nil
	}
	switch op {
	case "$toDate":
		switch x := v.(type) {
		case bson.DateTime:
			return x, nil
		case int64:
			return bson.DateTime(x), nil
		case float64:
			return bson.DateTime(int64(x)), nil
		case bson.ObjectID:
			return bson.DateTime(x.Timestamp().UnixMilli()), nil
		case bson.Timestamp:
			return bson.DateTime(int64(x.T) * 1000), nil
		}
	case "$toLong":
		switch x := v.(type) {
		case bson.DateTime:
			return int64(x), nil
		case bool:
			if x {
				return int64(1), nil
			}
			return int64(0), nil
		}
		if i, ok := toInt64(v); ok || isNumber(v) {
			if !ok {
				i = int64(toFloat(v))
			}
			return i, nil
		}
	case "$toInt":
		if isNumber(v) {
			return int32(toFloat(v)), nil
		}
		if b, ok := v.(bool); ok {
			if b {
				return int32(1), nil
			}
			return int32(0), nil
		}
	case "$toDouble":
		if isNumber(v) {
			return toFloat(v), nil
		}
		if d, ok := v.(bson.DateTime); ok {
			return float64(d), nil
		}
	case "$toBool":
		return truthy(v), nil
	case "$toString":
		switch x := v.(type) {
		case string:
			return x, nil
		case bson.ObjectID:
			return x.Hex(), nil
		case bson.DateTime:
			return x.Time().UTC().Format("2006-01-02T15:04:05.000Z"), nil
		case bool:
			if x {
				return "true", nil
			}
			return "false", nil
		}
		if isNumber(v) {
			return formatValue(v), nil
		}
	}
	return nil, cmdErrf(241, "ConversionFailure", "Unsupported conversion from %s in %s", typeName(v), op)
}
