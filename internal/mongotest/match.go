package mongotest

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Query filters, as in find/update/delete/findAndModify/$match. These follow
// the query language rules (type bracketing for $lt etc., null matches
// missing, arrays match when any element does), not the expression rules
// used by $expr and pipelines (reference note §5.3).

type matcher struct {
	fn func(doc bson.D) bool
}

func (m *matcher) matches(doc bson.D) bool {
	if m == nil || m.fn == nil {
		return true
	}
	return m.fn(doc)
}

type pred func(doc bson.D) bool

// valTest tests one value found at a path (or missing when none is found).
type valTest func(v any) bool

// ferretTypeCode is FerretDB 1.24's answer to a $type code (Options.
// NoExpressions): the types it cannot store are refused, 238
// NotImplemented for decimal, MinKey and MaxKey and 2 BadValue for the
// deprecated and JavaScript ones (handlerparams.NewTypeCode).
func ferretTypeCode(n int64) error {
	switch n {
	case 19, -1, 127:
		return cmdErrf(238, "NotImplemented", "Type code %d not implemented", n)
	case 6, 12, 13, 14, 15:
		return badValue("Invalid numerical type code: %d", n)
	}
	return nil
}

func badValue(format string, args ...any) error {
	return cmdErrf(2, "BadValue", format, args...)
}

func compileFilter(filter bson.D, ec *evalCtx) (*matcher, error) {
	p, err := compileAnd(filter, ec)
	if err != nil {
		return nil, err
	}
	return &matcher{fn: p}, nil
}

func compileAnd(filter bson.D, ec *evalCtx) (pred, error) {
	var preds []pred
	for _, e := range filter {
		p, err := compileTop(e.Key, e.Value, ec)
		if err != nil {
			return nil, err
		}
		if p != nil {
			preds = append(preds, p)
		}
	}
	switch len(preds) {
	case 0:
		return func(bson.D) bool { return true }, nil
	case 1:
		return preds[0], nil
	}
	return func(d bson.D) bool {
		for _, p := range preds {
			if !p(d) {
				return false
			}
		}
		return true
	}, nil
}

func compileTop(key string, val any, ec *evalCtx) (pred, error) {
	if strings.HasPrefix(key, "$") {
		switch key {
		case "$and", "$or", "$nor":
			arr, ok := val.(bson.A)
			if !ok || len(arr) == 0 {
				return nil, badValue("%s must be a nonempty array", key)
			}
			var subs []pred
			for _, a := range arr {
				sd, ok := a.(bson.D)
				if !ok {
					return nil, badValue("$or/$and/$nor entries need to be full objects")
				}
				p, err := compileAnd(sd, ec)
				if err != nil {
					return nil, err
				}
				subs = append(subs, p)
			}
			switch key {
			case "$and":
				return func(d bson.D) bool {
					for _, p := range subs {
						if !p(d) {
							return false
						}
					}
					return true
				}, nil
			case "$or":
				return func(d bson.D) bool {
					for _, p := range subs {
						if p(d) {
							return true
						}
					}
					return false
				}, nil
			default:
				return func(d bson.D) bool {
					for _, p := range subs {
						if p(d) {
							return false
						}
					}
					return true
				}, nil
			}
		case "$expr":
			ex, err := ec.compileExpr(val)
			if err != nil {
				return nil, err
			}
			return func(d bson.D) bool {
				v, err := ex.eval(d)
				if err != nil {
					ec.setErr(err)
					return false
				}
				return truthy(v)
			}, nil
		case "$jsonSchema":
			fn, err := compileJSONSchema(val)
			if err != nil {
				return nil, err
			}
			return func(d bson.D) bool { ok, _ := fn(d); return ok }, nil
		case "$comment":
			return nil, nil
		case "$alwaysTrue":
			return func(bson.D) bool { return true }, nil
		case "$alwaysFalse":
			return func(bson.D) bool { return false }, nil
		}
		return nil, badValue("unknown top level operator: %s", key)
	}
	parts := splitPath(key)
	test, err := compileCond(val, ec)
	if err != nil {
		return nil, err
	}
	return func(d bson.D) bool { return test.onPath(d, parts) }, nil
}

// cond is a compiled condition on one path.
type cond struct {
	// leaf tests a single value: a found value (or an element of a found
	// array) or missing. Used by positive conditions.
	leaf valTest
	// whole, when set, decides on the full list of found values instead.
	whole func(vals []any) bool
}

func (c cond) onPath(d bson.D, parts []string) bool {
	vals := resolvePath(d, parts)
	return c.onValues(vals)
}

func (c cond) onValues(vals []any) bool {
	if c.whole != nil {
		return c.whole(vals)
	}
	if len(vals) == 0 {
		return c.leaf(missing)
	}
	for _, v := range vals {
		if c.leaf(v) {
			return true
		}
		if arr, ok := v.(bson.A); ok {
			for _, e := range arr {
				if c.leaf(e) {
					return true
				}
			}
		}
	}
	return false
}

func isOperatorDoc(v any) (bson.D, bool) {
	d, ok := v.(bson.D)
	if !ok || len(d) == 0 || !strings.HasPrefix(d[0].Key, "$") {
		return nil, false
	}
	return d, true
}

func compileCond(val any, ec *evalCtx) (cond, error) {
	ops, ok := isOperatorDoc(val)
	if !ok {
		return cond{leaf: eqTest(val)}, nil
	}
	var conds []cond
	var regexOpts string
	if o, ok := docGet(ops, "$options"); ok {
		regexOpts, _ = o.(string)
	}
	for _, op := range ops {
		c, err := compileOp(op.Key, op.Value, regexOpts, ec)
		if err != nil {
			return cond{}, err
		}
		if c != nil {
			conds = append(conds, *c)
		}
	}
	if len(conds) == 1 {
		return conds[0], nil
	}
	return cond{whole: func(vals []any) bool {
		for _, c := range conds {
			if !c.onValues(vals) {
				return false
			}
		}
		return true
	}}, nil
}

func eqTest(q any) valTest {
	if re, ok := q.(bson.Regex); ok {
		rx, err := compileRegex(re.Pattern, re.Options)
		return func(v any) bool {
			switch x := v.(type) {
			case string:
				return err == nil && rx.MatchString(x)
			case bson.Symbol:
				return err == nil && rx.MatchString(string(x))
			case bson.Regex:
				return x == re
			}
			return false
		}
	}
	if q == nil {
		// {f: null} matches null, undefined and missing.
		return func(v any) bool {
			switch v.(type) {
			case nil, missingT, bson.Undefined:
				return true
			}
			return false
		}
	}
	return func(v any) bool {
		if isMissing(v) {
			return false
		}
		return canonType(v) == canonType(q) && compareValues(v, q) == 0
	}
}

func cmpTest(q any, ok func(c int) bool) valTest {
	qt := canonType(q)
	return func(v any) bool {
		if isMissing(v) {
			if q == nil {
				return ok(0)
			}
			v = nil
			if qt != 5 && qt != -1 && qt != 127 {
				return false
			}
		}
		vt := canonType(v)
		switch {
		case qt == -1 || qt == 127: // MinKey/MaxKey compare with everything
			return ok(compareValues(v, q))
		case vt != qt:
			return false
		}
		if isNumber(v) && math.IsNaN(toFloat(v)) != math.IsNaN(toFloat(q)) {
			return false
		}
		return ok(compareValues(v, q))
	}
}

func compileRegex(pattern, options string) (*regexp.Regexp, error) {
	flags := ""
	for _, o := range options {
		switch o {
		case 'i', 'm', 's':
			flags += string(o)
		case 'x':
			pattern = stripExtended(pattern)
		}
	}
	if flags != "" {
		pattern = "(?" + flags + ")" + pattern
	}
	rx, err := regexp.Compile(pattern)
	if err != nil {
		return nil, cmdErrf(51091, "Location51091", "Regular expression is invalid: %v", err)
	}
	return rx, nil
}

func stripExtended(p string) string {
	var sb strings.Builder
	for _, r := range p {
		if r == ' ' || r == '\t' || r == '\n' {
			continue
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

func compileOp(op string, q any, regexOpts string, ec *evalCtx) (*cond, error) {
	switch op {
	case "$eq":
		return &cond{leaf: eqTest(q)}, nil
	case "$ne":
		t := eqTest(q)
		c := cond{leaf: t}
		return &cond{whole: func(vals []any) bool { return !c.onValues(vals) }}, nil
	case "$gt":
		return &cond{leaf: cmpTest(q, func(c int) bool { return c > 0 })}, nil
	case "$gte":
		return &cond{leaf: cmpTest(q, func(c int) bool { return c >= 0 })}, nil
	case "$lt":
		return &cond{leaf: cmpTest(q, func(c int) bool { return c < 0 })}, nil
	case "$lte":
		return &cond{leaf: cmpTest(q, func(c int) bool { return c <= 0 })}, nil
	case "$in", "$nin":
		arr, ok := q.(bson.A)
		if !ok {
			return nil, badValue("%s needs an array", op)
		}
		var tests []valTest
		for _, a := range arr {
			if _, isOp := isOperatorDoc(a); isOp {
				return nil, badValue("cannot nest $ under %s", op)
			}
			tests = append(tests, eqTest(a))
		}
		c := cond{leaf: func(v any) bool {
			for _, t := range tests {
				if t(v) {
					return true
				}
			}
			return false
		}}
		if op == "$in" {
			return &c, nil
		}
		return &cond{whole: func(vals []any) bool { return !c.onValues(vals) }}, nil
	case "$exists":
		want := truthy(q)
		return &cond{whole: func(vals []any) bool { return (len(vals) > 0) == want }}, nil
	case "$type":
		var want []int
		add := func(t any) error {
			switch x := t.(type) {
			case string:
				if x == "number" {
					want = append(want, 1, 16, 18, 19)
					return nil
				}
				n, ok := typeAliases[x]
				if !ok {
					return badValue("Unknown type name alias: %s", x)
				}
				want = append(want, n)
			default:
				n, ok := toInt64(x)
				if !ok {
					return badValue("type must be represented as a number or a string")
				}
				if ec != nil && ec.noExpr {
					if err := ferretTypeCode(n); err != nil {
						return err
					}
				}
				want = append(want, int(n))
			}
			return nil
		}
		if arr, ok := q.(bson.A); ok {
			for _, a := range arr {
				if err := add(a); err != nil {
					return nil, err
				}
			}
		} else if err := add(q); err != nil {
			return nil, err
		}
		return &cond{whole: func(vals []any) bool {
			for _, v := range vals {
				tn := typeNumber(v)
				for _, w := range want {
					if w == tn {
						return true
					}
				}
				if arr, ok := v.(bson.A); ok {
					for _, e := range arr {
						tn := typeNumber(e)
						for _, w := range want {
							if w == tn {
								return true
							}
						}
					}
				}
			}
			return false
		}}, nil
	case "$not":
		var inner cond
		if re, ok := q.(bson.Regex); ok {
			inner = cond{leaf: eqTest(re)}
		} else {
			d, ok := isOperatorDoc(q)
			if !ok {
				return nil, badValue("$not needs a regex or a document")
			}
			c, err := compileCond(d, ec)
			if err != nil {
				return nil, err
			}
			inner = c
		}
		return &cond{whole: func(vals []any) bool { return !inner.onValues(vals) }}, nil
	case "$regex":
		var re bson.Regex
		switch x := q.(type) {
		case string:
			re = bson.Regex{Pattern: x, Options: regexOpts}
		case bson.Regex:
			re = x
			if regexOpts != "" {
				re.Options = regexOpts
			}
		default:
			return nil, badValue("$regex has to be a string")
		}
		if _, err := compileRegex(re.Pattern, re.Options); err != nil {
			return nil, err
		}
		t := eqTest(re)
		return &cond{leaf: func(v any) bool {
			if _, ok := v.(bson.Regex); ok {
				return false
			}
			return t(v)
		}}, nil
	case "$options":
		return nil, nil
	case "$size":
		n, ok := toInt64(q)
		if !ok {
			return nil, badValue("$size needs a number")
		}
		return &cond{whole: func(vals []any) bool {
			for _, v := range vals {
				if arr, ok := v.(bson.A); ok && int64(len(arr)) == n {
					return true
				}
			}
			return false
		}}, nil
	case "$all":
		arr, ok := q.(bson.A)
		if !ok {
			return nil, badValue("$all needs an array")
		}
		var conds []cond
		for _, a := range arr {
			if d, ok := isOperatorDoc(a); ok && d[0].Key == "$elemMatch" {
				c, err := compileOp("$elemMatch", d[0].Value, "", ec)
				if err != nil {
					return nil, err
				}
				conds = append(conds, *c)
				continue
			}
			conds = append(conds, cond{leaf: eqTest(a)})
		}
		return &cond{whole: func(vals []any) bool {
			if len(conds) == 0 {
				return false
			}
			for _, c := range conds {
				if !c.onValues(vals) {
					return false
				}
			}
			return true
		}}, nil
	case "$elemMatch":
		d, ok := q.(bson.D)
		if !ok {
			return nil, badValue("$elemMatch needs an Object")
		}
		test, err := elemMatchTest(d, ec)
		if err != nil {
			return nil, err
		}
		return &cond{whole: func(vals []any) bool {
			for _, v := range vals {
				if arr, ok := v.(bson.A); ok {
					for _, e := range arr {
						if test(e) {
							return true
						}
					}
				}
			}
			return false
		}}, nil
	case "$mod":
		arr, ok := q.(bson.A)
		if !ok || len(arr) != 2 {
			return nil, badValue("malformed mod, needs to be an array")
		}
		div, ok1 := toInt64(arr[0])
		rem, ok2 := toInt64(arr[1])
		if !ok1 || !ok2 || div == 0 {
			return nil, badValue("malformed mod")
		}
		return &cond{leaf: func(v any) bool {
			if !isNumber(v) {
				return false
			}
			n := int64(toFloat(v))
			return n%div == rem
		}}, nil
	}
	return nil, badValue("unknown operator: %s", op)
}

// elemMatchTest is the test $elemMatch applies to each element: operators
// on the element itself, or a filter on a sub-document.
func elemMatchTest(d bson.D, ec *evalCtx) (valTest, error) {
	if _, isOps := isOperatorDoc(d); isOps && d[0].Key != "$and" && d[0].Key != "$or" && d[0].Key != "$nor" && d[0].Key != "$expr" {
		c, err := compileCond(d, ec)
		if err != nil {
			return nil, err
		}
		return func(v any) bool { return c.onValues([]any{v}) }, nil
	}
	p, err := compileAnd(d, ec)
	if err != nil {
		return nil, err
	}
	return func(v any) bool {
		sd, ok := v.(bson.D)
		return ok && p(sd)
	}, nil
}

func splitPath(p string) []string {
	if !strings.Contains(p, ".") {
		return []string{p}
	}
	return strings.Split(p, ".")
}

// resolvePath returns the values found at a dotted path, traversing arrays
// of sub-documents on the way as MongoDB does (a numeric component also
// selects an array element).
func resolvePath(v any, parts []string) []any {
	var out []any
	var walk func(v any, parts []string)
	walk = func(v any, parts []string) {
		if len(parts) == 0 {
			out = append(out, v)
			return
		}
		switch x := v.(type) {
		case bson.D:
			if fv, ok := docGet(x, parts[0]); ok {
				walk(fv, parts[1:])
			}
		case rawDoc:
			if fv, ok := rawLookup(x, parts[0]); ok {
				walk(fv, parts[1:])
			}
		case bson.A:
			if i, err := strconv.Atoi(parts[0]); err == nil && i >= 0 {
				if i < len(x) {
					walk(x[i], parts[1:])
				}
				return
			}
			for _, e := range x {
				if ed, ok := e.(bson.D); ok {
					walk(ed, parts)
				}
			}
		}
	}
	walk(v, parts)
	return out
}
