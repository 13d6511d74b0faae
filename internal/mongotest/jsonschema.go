package mongotest

import (
	"errors"
	"math"
	"regexp"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// $jsonSchema, as mongod's JSON Schema parser translates it
// (src/mongo/db/matcher/schema/json_schema_parser.cpp): draft 4 keywords
// plus bsonType; every keyword but required holds only when the value it
// restricts is there and of the kind it is about (minimum restricts
// numbers, properties objects, ...); a top-level type other than object
// matches nothing. Unknown keywords, and the draft keywords mongod does not
// support, are FailedToParse when the schema is compiled.

// schemaFn tests one value; ok is false with the keyword that refused it.
type schemaFn func(v any) (ok bool, rule string)

var schemaUnsupported = map[string]bool{"$ref": true, "$schema": true, "default": true, "definitions": true, "format": true, "id": true}

var schemaKeywords = map[string]bool{
	"additionalItems": true, "additionalProperties": true, "allOf": true, "anyOf": true, "bsonType": true,
	"dependencies": true, "description": true, "enum": true, "exclusiveMaximum": true, "exclusiveMinimum": true,
	"items": true, "maxItems": true, "maxLength": true, "maxProperties": true, "maximum": true, "minItems": true,
	"minLength": true, "minProperties": true, "minimum": true, "multipleOf": true, "not": true, "oneOf": true,
	"pattern": true, "patternProperties": true, "properties": true, "required": true, "title": true,
	"type": true, "uniqueItems": true,
}

// jsonTypes are the JSON Schema "type" names and the BSON types they cover
// (MatcherTypeSet::kJsonSchemaTypeAliasMap).
var jsonTypes = map[string][]int{
	"object": {3}, "array": {4}, "number": {1, 16, 18, 19}, "boolean": {8}, "string": {2}, "null": {10},
}

func schemaErr(format string, args ...any) error {
	return cmdErrf(9, "FailedToParse", format, args...)
}

// compileJSONSchema compiles a top-level schema into a document predicate.
func compileJSONSchema(v any) (func(doc bson.D) (bool, string), error) {
	schema, ok := v.(bson.D)
	if !ok {
		return nil, cmdErrf(14, "TypeMismatch", "$jsonSchema must be an object")
	}
	fn, types, err := compileSchema(schema, true)
	if err != nil {
		return nil, err
	}
	if types != nil && !containsInt(types, 3) {
		return func(bson.D) (bool, string) { return false, "type" }, nil
	}
	return func(doc bson.D) (bool, string) { return fn(doc) }, nil
}

func containsInt(s []int, n int) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}

// compileSchema compiles one (sub)schema. It returns the type set of its
// type or bsonType keyword (nil: any).
func compileSchema(schema bson.D, top bool) (schemaFn, []int, error) {
	kw := map[string]any{}
	for _, e := range schema {
		if schemaUnsupported[e.Key] {
			return nil, nil, schemaErr("$jsonSchema keyword '%s' is not currently supported", e.Key)
		}
		if !schemaKeywords[e.Key] {
			return nil, nil, schemaErr("Unknown $jsonSchema keyword: %s", e.Key)
		}
		if _, dup := kw[e.Key]; dup {
			return nil, nil, schemaErr("Duplicate $jsonSchema keyword: %s", e.Key)
		}
		kw[e.Key] = e.Value
	}
	var tests []schemaFn
	add := func(rule string, applies func(any) bool, test func(any) bool) {
		tests = append(tests, func(v any) (bool, string) {
			if applies != nil && !applies(v) {
				return true, ""
			}
			if test(v) {
				return true, ""
			}
			return false, rule
		})
	}

	// type / bsonType
	_, hasType := kw["type"]
	_, hasBSONType := kw["bsonType"]
	if hasType && hasBSONType {
		return nil, nil, schemaErr("Cannot specify both $jsonSchema keywords 'type' and 'bsonType'")
	}
	var types []int
	for _, name := range []string{"type", "bsonType"} {
		tv, ok := kw[name]
		if !ok {
			continue
		}
		var names []string
		switch x := tv.(type) {
		case string:
			names = []string{x}
		case bson.A:
			if len(x) == 0 {
				return nil, nil, schemaErr("$jsonSchema keyword '%s' must name at least one type", name)
			}
			for _, a := range x {
				s, ok := a.(string)
				if !ok {
					return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword '%s' array elements must be strings", name)
				}
				names = append(names, s)
			}
		default:
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword '%s' must be either a string or an array of strings", name)
		}
		for _, n := range names {
			if name == "type" {
				if n == "integer" {
					return nil, nil, schemaErr("$jsonSchema type 'integer' is not currently supported.")
				}
				ts, ok := jsonTypes[n]
				if !ok {
					return nil, nil, badValue("Unknown type name alias: %s", n)
				}
				types = append(types, ts...)
				continue
			}
			if n == "number" {
				types = append(types, 1, 16, 18, 19)
				continue
			}
			t, ok := typeAliases[n]
			if !ok {
				return nil, nil, badValue("Unknown type name alias: %s", n)
			}
			types = append(types, t)
		}
		want := types
		add(name, nil, func(v any) bool { return containsInt(want, typeNumber(v)) })
	}

	// Scalars.
	isNum := func(v any) bool { return isNumber(v) }
	isStr := func(v any) bool { _, ok := v.(string); return ok }
	isArr := func(v any) bool { _, ok := v.(bson.A); return ok }
	isObj := func(v any) bool { _, ok := v.(bson.D); return ok }
	count := func(name string) (int64, bool, error) {
		v, ok := kw[name]
		if !ok {
			return 0, false, nil
		}
		n, isInt := toInt64(v)
		if !isInt || n < 0 {
			return 0, false, badValue("$jsonSchema keyword '%s' must be a representable as a long", name)
		}
		return n, true, nil
	}
	if ev, ok := kw["enum"]; ok {
		arr, isA := ev.(bson.A)
		if !isA || len(arr) == 0 {
			return nil, nil, schemaErr("$jsonSchema keyword 'enum' must be a non-empty array")
		}
		add("enum", nil, func(v any) bool {
			for _, a := range arr {
				if canonType(a) == canonType(v) && compareValues(a, v) == 0 {
					return true
				}
			}
			return false
		})
	}
	for _, bound := range []struct{ key, excl string }{{"minimum", "exclusiveMinimum"}, {"maximum", "exclusiveMaximum"}} {
		bv, ok := kw[bound.key]
		ex, hasEx := kw[bound.excl]
		if !ok {
			if hasEx {
				return nil, nil, schemaErr("$jsonSchema keyword '%s' must be a present if %s is present", bound.key, bound.excl)
			}
			continue
		}
		if !isNumber(bv) {
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword '%s' must be a number", bound.key)
		}
		exclusive := false
		if hasEx {
			b, isB := ex.(bool)
			if !isB {
				return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword '%s' must be a boolean", bound.excl)
			}
			exclusive = b
		}
		isMin := bound.key == "minimum"
		add(bound.key, isNum, func(v any) bool {
			c := compareNumbers(v, bv)
			switch {
			case isMin && exclusive:
				return c > 0
			case isMin:
				return c >= 0
			case exclusive:
				return c < 0
			default:
				return c <= 0
			}
		})
	}
	if mv, ok := kw["multipleOf"]; ok {
		if !isNumber(mv) || toFloat(mv) <= 0 {
			return nil, nil, schemaErr("$jsonSchema keyword 'multipleOf' must have a positive value")
		}
		m := toFloat(mv)
		add("multipleOf", isNum, func(v any) bool {
			f := toFloat(v)
			return !math.IsNaN(f) && !math.IsInf(f, 0) && math.Mod(f, m) == 0
		})
	}
	for _, name := range []string{"minLength", "maxLength"} {
		n, ok, err := count(name)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			isMin := name == "minLength"
			add(name, isStr, func(v any) bool {
				l := int64(utf8.RuneCountInString(v.(string)))
				return (isMin && l >= n) || (!isMin && l <= n)
			})
		}
	}
	if pv, ok := kw["pattern"]; ok {
		p, isS := pv.(string)
		if !isS {
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'pattern' must be a string")
		}
		rx, err := regexp.Compile(p)
		if err != nil {
			return nil, nil, badValue("$jsonSchema keyword 'pattern' is not a valid regular expression: %v", err)
		}
		add("pattern", isStr, func(v any) bool { return rx.MatchString(v.(string)) })
	}

	// Arrays.
	for _, name := range []string{"minItems", "maxItems"} {
		n, ok, err := count(name)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			isMin := name == "minItems"
			add(name, isArr, func(v any) bool {
				l := int64(len(v.(bson.A)))
				return (isMin && l >= n) || (!isMin && l <= n)
			})
		}
	}
	if uv, ok := kw["uniqueItems"]; ok {
		b, isB := uv.(bool)
		if !isB {
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'uniqueItems' must be a boolean")
		}
		if b {
			add("uniqueItems", isArr, func(v any) bool {
				arr := v.(bson.A)
				seen := map[string]bool{}
				for _, e := range arr {
					k := string(appendKey(nil, e))
					if seen[k] {
						return false
					}
					seen[k] = true
				}
				return true
			})
		}
	}
	if iv, ok := kw["items"]; ok {
		switch x := iv.(type) {
		case bson.D:
			sub, _, err := compileSchema(x, false)
			if err != nil {
				return nil, nil, err
			}
			add("items", isArr, func(v any) bool {
				for _, e := range v.(bson.A) {
					if ok, _ := sub(e); !ok {
						return false
					}
				}
				return true
			})
		case bson.A:
			var subs []schemaFn
			for _, a := range x {
				d, isD := a.(bson.D)
				if !isD {
					return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'items' requires that each element of the array is an object")
				}
				sub, _, err := compileSchema(d, false)
				if err != nil {
					return nil, nil, err
				}
				subs = append(subs, sub)
			}
			var extra schemaFn
			allowExtra := true
			if av, ok := kw["additionalItems"]; ok {
				switch y := av.(type) {
				case bool:
					allowExtra = y
				case bson.D:
					sub, _, err := compileSchema(y, false)
					if err != nil {
						return nil, nil, err
					}
					extra = sub
				default:
					return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'additionalItems' must be either an object or a boolean")
				}
			}
			add("items", isArr, func(v any) bool {
				arr := v.(bson.A)
				for i, e := range arr {
					switch {
					case i < len(subs):
						if ok, _ := subs[i](e); !ok {
							return false
						}
					case extra != nil:
						if ok, _ := extra(e); !ok {
							return false
						}
					case !allowExtra:
						return false
					}
				}
				return true
			})
		default:
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'items' must be an array or an object")
		}
	}

	// Objects.
	if rv, ok := kw["required"]; ok {
		arr, isA := rv.(bson.A)
		if !isA || len(arr) == 0 {
			return nil, nil, schemaErr("$jsonSchema keyword 'required' must be a non-empty array of strings")
		}
		var names []string
		for _, a := range arr {
			s, isS := a.(string)
			if !isS {
				return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'required' must be an array of strings")
			}
			names = append(names, s)
		}
		add("required", isObj, func(v any) bool {
			d := v.(bson.D)
			for _, n := range names {
				if _, ok := docGet(d, n); !ok {
					return false
				}
			}
			return true
		})
	}
	for _, name := range []string{"minProperties", "maxProperties"} {
		n, ok, err := count(name)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			isMin := name == "minProperties"
			add(name, isObj, func(v any) bool {
				l := int64(len(v.(bson.D)))
				return (isMin && l >= n) || (!isMin && l <= n)
			})
		}
	}
	props := map[string]schemaFn{}
	if pv, ok := kw["properties"]; ok {
		d, isD := pv.(bson.D)
		if !isD {
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'properties' must be an object")
		}
		for _, e := range d {
			sd, isSD := e.Value.(bson.D)
			if !isSD {
				return nil, nil, cmdErrf(14, "TypeMismatch", "Nested schema for $jsonSchema property '%s' must be an object", e.Key)
			}
			sub, _, err := compileSchema(sd, false)
			if err != nil {
				return nil, nil, err
			}
			props[e.Key] = sub
		}
	}
	type patternProp struct {
		rx  *regexp.Regexp
		sub schemaFn
	}
	var patterns []patternProp
	if pv, ok := kw["patternProperties"]; ok {
		d, isD := pv.(bson.D)
		if !isD {
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'patternProperties' must be an object")
		}
		for _, e := range d {
			sd, isSD := e.Value.(bson.D)
			if !isSD {
				return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'patternProperties' has property '%s' which is not an object", e.Key)
			}
			rx, err := regexp.Compile(e.Key)
			if err != nil {
				return nil, nil, badValue("$jsonSchema keyword 'patternProperties' has property '%s' which is not a valid regular expression: %v", e.Key, err)
			}
			sub, _, err := compileSchema(sd, false)
			if err != nil {
				return nil, nil, err
			}
			patterns = append(patterns, patternProp{rx, sub})
		}
	}
	allowAdditional := true
	var additional schemaFn
	if av, ok := kw["additionalProperties"]; ok {
		switch x := av.(type) {
		case bool:
			allowAdditional = x
		case bson.D:
			sub, _, err := compileSchema(x, false)
			if err != nil {
				return nil, nil, err
			}
			additional = sub
		default:
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'additionalProperties' must be either an object or a boolean")
		}
	}
	if len(props) > 0 || len(patterns) > 0 || !allowAdditional || additional != nil {
		add("properties", isObj, func(v any) bool {
			for _, e := range v.(bson.D) {
				known := false
				if sub, ok := props[e.Key]; ok {
					known = true
					if ok, _ := sub(e.Value); !ok {
						return false
					}
				}
				for _, p := range patterns {
					if p.rx.MatchString(e.Key) {
						known = true
						if ok, _ := p.sub(e.Value); !ok {
							return false
						}
					}
				}
				if known {
					continue
				}
				if additional != nil {
					if ok, _ := additional(e.Value); !ok {
						return false
					}
				} else if !allowAdditional {
					return false
				}
			}
			return true
		})
	}
	if dv, ok := kw["dependencies"]; ok {
		d, isD := dv.(bson.D)
		if !isD {
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'dependencies' must be an object")
		}
		for _, e := range d {
			name := e.Key
			switch x := e.Value.(type) {
			case bson.D:
				sub, _, err := compileSchema(x, false)
				if err != nil {
					return nil, nil, err
				}
				add("dependencies", isObj, func(v any) bool {
					if _, has := docGet(v.(bson.D), name); !has {
						return true
					}
					ok, _ := sub(v)
					return ok
				})
			case bson.A:
				var needs []string
				for _, a := range x {
					s, isS := a.(string)
					if !isS {
						return nil, nil, cmdErrf(14, "TypeMismatch", "property '%s' in $jsonSchema keyword 'dependencies' must be an array of strings", name)
					}
					needs = append(needs, s)
				}
				add("dependencies", isObj, func(v any) bool {
					d := v.(bson.D)
					if _, has := docGet(d, name); !has {
						return true
					}
					for _, n := range needs {
						if _, ok := docGet(d, n); !ok {
							return false
						}
					}
					return true
				})
			default:
				return nil, nil, cmdErrf(14, "TypeMismatch", "property '%s' in $jsonSchema keyword 'dependencies' must be either an object or an array", name)
			}
		}
	}

	// Logic.
	subList := func(name string) ([]schemaFn, error) {
		v, ok := kw[name]
		if !ok {
			return nil, nil
		}
		arr, isA := v.(bson.A)
		if !isA || len(arr) == 0 {
			return nil, schemaErr("$jsonSchema keyword '%s' must be a non-empty array", name)
		}
		var out []schemaFn
		for _, a := range arr {
			d, isD := a.(bson.D)
			if !isD {
				return nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword '%s' must be an array of objects", name)
			}
			sub, _, err := compileSchema(d, false)
			if err != nil {
				return nil, err
			}
			out = append(out, sub)
		}
		return out, nil
	}
	for _, name := range []string{"allOf", "anyOf", "oneOf"} {
		subs, err := subList(name)
		if err != nil {
			return nil, nil, err
		}
		if subs == nil {
			continue
		}
		kind := name
		add(name, nil, func(v any) bool {
			n := 0
			for _, sub := range subs {
				if ok, _ := sub(v); ok {
					n++
				}
			}
			switch kind {
			case "allOf":
				return n == len(subs)
			case "anyOf":
				return n > 0
			}
			return n == 1
		})
	}
	if nv, ok := kw["not"]; ok {
		d, isD := nv.(bson.D)
		if !isD {
			return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword 'not' must be an object")
		}
		sub, _, err := compileSchema(d, false)
		if err != nil {
			return nil, nil, err
		}
		add("not", nil, func(v any) bool { ok, _ := sub(v); return !ok })
	}
	for _, name := range []string{"title", "description"} {
		if v, ok := kw[name]; ok {
			if _, isS := v.(string); !isS {
				return nil, nil, cmdErrf(14, "TypeMismatch", "$jsonSchema keyword '%s' must be of type string", name)
			}
		}
	}
	if top {
		// The top-level type is checked by compileJSONSchema (a document
		// is an object); drop its test so it is not applied twice.
		var rest []schemaFn
		for i, t := range tests {
			if (hasType || hasBSONType) && i == 0 {
				continue
			}
			rest = append(rest, t)
		}
		tests = rest
	}
	fn := func(v any) (bool, string) {
		for _, t := range tests {
			if ok, rule := t(v); !ok {
				return false, rule
			}
		}
		return true, ""
	}
	return fn, types, nil
}

// validator is a collection's document validation: the create and
// collMod options validator, validationLevel and validationAction.
type validator struct {
	spec   bson.D
	level  string // strict (default), moderate, off
	action string // error (default), warn
}

// compileValidator reads the validation options of a collection's options,
// refusing a validator mongod would refuse (its parse error, wrapped as
// collection_options.cpp / collection_impl.cpp parseValidator words it).
func compileValidator(opts bson.D) (*validator, error) {
	v := &validator{level: "strict", action: "error"}
	if lv, ok := docGet(opts, "validationLevel"); ok {
		s, _ := lv.(string)
		switch s {
		case "off", "strict", "moderate":
			v.level = s
		default:
			return nil, badValue("Enumeration value '%s' for field 'validationLevel' is not a valid value.", formatValue(lv))
		}
	}
	if av, ok := docGet(opts, "validationAction"); ok {
		s, _ := av.(string)
		switch s {
		case "error", "warn":
			v.action = s
		default:
			return nil, badValue("Enumeration value '%s' for field 'validationAction' is not a valid value.", formatValue(av))
		}
	}
	sv, ok := docGet(opts, "validator")
	if !ok {
		return nil, nil
	}
	spec, isDoc := sv.(bson.D)
	if !isDoc {
		return nil, cmdErrf(14, "TypeMismatch", "'validator' has to be a document.")
	}
	if len(spec) == 0 {
		return nil, nil
	}
	if _, err := compileFilter(spec, &evalCtx{}); err != nil {
		var ce *cmdError
		if errors.As(err, &ce) {
			return nil, &cmdError{code: ce.code, name: ce.name, msg: "Parsing of collection validator failed :: caused by :: " + ce.msg}
		}
		return nil, err
	}
	v.spec = spec
	return v, nil
}

// validate applies c's validator to a document being inserted (old nil)
// or replacing old, as mongod's CollectionImpl::checkValidation: skipped
// with bypassDocumentValidation or validationLevel off; under moderate, an
// update of a document that already failed validation is not checked;
// validationAction warn only logs. A failure is 121 DocumentValidationFailure
// with errInfo {failingDocumentId, details}.
func (s *Server) validate(x *cmdCtx, c *collection, doc, old bson.D) error {
	v := c.validator
	if v == nil || v.level == "off" || x.boolOpt("bypassDocumentValidation") {
		return nil
	}
	m, err := compileFilter(v.spec, x.ec)
	if err != nil {
		return err
	}
	ok := m.matches(doc)
	if err := x.ec.takeErr(); err != nil {
		return err
	}
	if ok || (old != nil && v.level == "moderate" && !m.matches(old)) {
		return nil
	}
	id, _ := docGet(doc, "_id")
	if v.action == "warn" {
		s.logf("mongotest: %s.%s: document %s failed validation (validationAction warn)", c.db, c.name, formatValue(id))
		return nil
	}
	details := bson.D{{Key: "operatorName", Value: v.spec[0].Key}, {Key: "specifiedAs", Value: v.spec}}
	if len(v.spec) == 1 && v.spec[0].Key == "$jsonSchema" {
		fn, err := compileJSONSchema(v.spec[0].Value)
		if err == nil {
			_, rule := fn(doc)
			details = bson.D{{Key: "operatorName", Value: "$jsonSchema"}, {Key: "schemaRulesNotSatisfied", Value: bson.A{
				bson.D{{Key: "operatorName", Value: rule}, {Key: "reason", Value: "rule not satisfied"}},
			}}}
		}
	} else if len(v.spec) > 1 {
		details = bson.D{{Key: "operatorName", Value: "$and"}, {Key: "specifiedAs", Value: v.spec}}
	}
	return &cmdError{code: 121, name: "DocumentValidationFailure", msg: "Document failed validation",
		extra: bson.D{{Key: "errInfo", Value: bson.D{{Key: "failingDocumentId", Value: id}, {Key: "details", Value: details}}}}}
}
