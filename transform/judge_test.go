package transform_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The judge of "send only what changed" is tried on transforms made from
// a small grammar of what a transform does with its document (reads,
// nested reads, enumeration, in, hasOwnProperty, spread, Object.assign,
// JSON.stringify, delete, writes, conditionals, arrays), run on a random
// document before and after a random update ($set and $unset of present,
// absent and nested fields, array elements): an update judged unchanged
// must leave the result as it was. The choices come from a byte string,
// so that the fuzzer can mutate them (FuzzUnchangedJudge) and the table
// test can make many at random.

// choices reads decisions from b; past its end every decision is 0.
type choices struct {
	b []byte
	i int
}

func (c *choices) n(k int) int {
	if c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	return v % k
}

// judgeFields are the top-level fields of the generated documents and
// transforms.
var judgeFields = []string{"a", "b", "c", "d", "arr"}

// judgeProgram makes a transform's source from c.
func judgeProgram(c *choices) string {
	var sb strings.Builder
	sb.WriteString("module.exports = { ")
	if c.n(3) == 0 {
		sb.WriteString(`mirror: "m", `)
	}
	sb.WriteString("transform(doc) {\n\"use strict\";\nconst out = {};\n")
	k := 0
	for range 1 + c.n(5) {
		judgeStatement(c, &sb, &k, 0)
	}
	switch c.n(7) {
	case 0, 1:
		sb.WriteString("return out;\n")
	case 2:
		sb.WriteString("return doc;\n")
	case 3:
		sb.WriteString("return {...out, doc: doc};\n")
	case 4:
		sb.WriteString("return Object.assign(doc, out);\n")
	case 5:
		sb.WriteString("return Object.keys(out).length % 2 ? null : out;\n")
	case 6:
		sb.WriteString("return true;\n")
	}
	sb.WriteString("} };")
	return sb.String()
}

// judgeStatement writes one statement; k numbers the result's keys.
func judgeStatement(c *choices, sb *strings.Builder, k *int, depth int) {
	f := judgeFields[c.n(len(judgeFields))]
	*k++
	key := fmt.Sprintf("out.k%d", *k)
	set := func(expr string) { fmt.Fprintf(sb, "%s = %s;\n", key, expr) }
	n := 32
	if depth > 1 {
		n = 30 // no more conditionals
	}
	switch c.n(n) {
	case 0:
		set("doc." + f)
	case 1:
		set("doc." + f + " && doc." + f + ".x")
	case 2:
		set(`"` + f + `" in doc`)
	case 3:
		set(`doc.hasOwnProperty("` + f + `")`)
	case 4:
		set(`Object.hasOwn(doc, "` + f + `")`)
	case 5:
		set("Object.keys(doc).join()")
	case 6:
		set("Object.values(doc).length")
	case 7:
		set("JSON.stringify(Object.entries(doc))")
	case 8:
		set("Object.getOwnPropertyNames(doc).join()")
	case 9:
		set("Reflect.ownKeys(doc).length")
	case 10:
		fmt.Fprintf(sb, "{ let n = 0; for (const key in doc) n++; %s = n; }\n", key)
	case 11:
		set("JSON.stringify(doc)")
	case 12:
		set("{...doc}")
	case 13:
		set("Object.assign({}, doc)")
	case 14, 15:
		fmt.Fprintf(sb, "delete doc.%s;\n", f)
	case 16:
		fmt.Fprintf(sb, "doc.%s = %d;\n", f, c.n(3))
	case 17:
		set("Array.isArray(doc." + f + ") ? doc." + f + ".length : -1")
	case 18:
		set("Object.keys(doc." + f + " || {}).join()")
	case 19:
		set(`typeof structuredClone === "function" ? structuredClone(doc) : null`)
	case 20:
		set("JSON.stringify(doc." + f + ")")
	case 21:
		set("doc." + f + " === undefined")
	case 22:
		fmt.Fprintf(sb, "{ const {%s: v, ...rest} = doc; %s = [v === undefined ? null : v, Object.keys(rest).join()]; }\n", f, key)
	case 23:
		set("Object.fromEntries(Object.entries(doc))")
	case 24:
		fmt.Fprintf(sb, "if (doc.%s && typeof doc.%s === \"object\" && !Array.isArray(doc.%s)) doc.%s.x = 1;\n", f, f, f, f)
	case 25:
		set("delete doc." + f)
	case 26:
		set(`Object.keys(doc).includes("` + f + `")`)
	case 27:
		set(`doc.` + f + `?.x ?? "none"`)
	case 28:
		set("Object.entries(doc." + f + " || {}).length")
	case 29:
		set("Object.keys(doc).length")
	case 30:
		fmt.Fprintf(sb, "if (doc.%s) {\n", f)
		judgeStatement(c, sb, k, depth+1)
		sb.WriteString("} else {\n")
		judgeStatement(c, sb, k, depth+1)
		sb.WriteString("}\n")
	case 31:
		fmt.Fprintf(sb, "if (\"%s\" in doc) {\n", f)
		judgeStatement(c, sb, k, depth+1)
		sb.WriteString("}\n")
	}
}

// judgeValue is a random field value.
func judgeValue(c *choices) any {
	switch c.n(7) {
	case 0:
		return int32(c.n(3))
	case 1:
		return []string{"x", "y", ""}[c.n(3)]
	case 2:
		return c.n(2) == 0
	case 3:
		return nil
	case 4:
		d := bson.D{}
		if c.n(2) == 0 {
			d = append(d, bson.E{Key: "x", Value: int32(c.n(3))})
		}
		if c.n(2) == 0 {
			d = append(d, bson.E{Key: "y", Value: "q"})
		}
		return d
	case 5:
		a := bson.A{}
		for range c.n(3) {
			a = append(a, int32(c.n(3)))
		}
		return a
	}
	return 1.5
}

// judgeDocument is a random document: _id and some of judgeFields, in a
// random order.
func judgeDocument(c *choices) bson.D {
	d := bson.D{{Key: "_id", Value: int32(1)}}
	fields := slices.Clone(judgeFields)
	for i := len(fields) - 1; i > 0; i-- {
		j := c.n(i + 1)
		fields[i], fields[j] = fields[j], fields[i]
	}
	for _, f := range fields {
		if c.n(3) != 0 {
			d = append(d, bson.E{Key: f, Value: judgeValue(c)})
		}
	}
	return d
}

func sameValue(t testing.TB, a, b any) bool {
	ra := marshal(t, bson.D{{Key: "v", Value: a}})
	rb := marshal(t, bson.D{{Key: "v", Value: b}})
	return bytes.Equal(ra, rb)
}

func fieldAt(d bson.D, k string) int {
	return slices.IndexFunc(d, func(e bson.E) bool { return e.Key == k })
}

// judgeUpdate applies one to three random changes to doc as MongoDB would
// and returns the document after them and the change event's
// updateDescription; ok is false when nothing changed.
func judgeUpdate(t testing.TB, c *choices, doc bson.D) (after bson.D, ud bson.Raw, ok bool) {
	after = cloneD(doc)
	set, removed := bson.D{}, bson.A{}
	touched := map[string]bool{}
	for range 1 + c.n(3) {
		f := judgeFields[c.n(len(judgeFields))]
		if touched[f] {
			continue
		}
		i := fieldAt(after, f)
		switch kind := c.n(5); {
		case kind == 1 && i >= 0: // $unset a present field
			after = slices.Delete(after, i, i+1)
			removed = append(removed, f)
		case kind == 2 && i >= 0 && isDoc(after[i].Value): // $set f.x
			sub := cloneD(after[i].Value.(bson.D))
			v := int32(c.n(4))
			if j := fieldAt(sub, "x"); j >= 0 {
				if sameValue(t, sub[j].Value, v) {
					continue
				}
				sub[j].Value = v
			} else {
				sub = append(sub, bson.E{Key: "x", Value: v})
			}
			after[i].Value = sub
			set = append(set, bson.E{Key: f + ".x", Value: v})
		case kind == 3 && i >= 0 && isDoc(after[i].Value) && fieldAt(after[i].Value.(bson.D), "x") >= 0: // $unset f.x
			sub := cloneD(after[i].Value.(bson.D))
			sub = slices.Delete(sub, fieldAt(sub, "x"), fieldAt(sub, "x")+1)
			after[i].Value = sub
			removed = append(removed, f+".x")
		case kind == 4 && i >= 0 && isArr(after[i].Value) && len(after[i].Value.(bson.A)) > 0: // $set f.0
			a := slices.Clone(after[i].Value.(bson.A))
			v := judgeValue(c)
			if sameValue(t, a[0], v) {
				continue
			}
			a[0] = v
			after[i].Value = a
			set = append(set, bson.E{Key: f + ".0", Value: v})
		default: // $set f, present or absent
			v := judgeValue(c)
			if i >= 0 {
				if sameValue(t, after[i].Value, v) {
					continue
				}
				after[i].Value = v
			} else {
				after = append(after, bson.E{Key: f, Value: v})
			}
			set = append(set, bson.E{Key: f, Value: v})
		}
		touched[f] = true
	}
	if len(set) == 0 && len(removed) == 0 {
		return nil, nil, false
	}
	ud = marshal(t, bson.D{{Key: "updatedFields", Value: set}, {Key: "removedFields", Value: removed}, {Key: "truncatedArrays", Value: bson.A{}}})
	return after, ud, true
}

func isDoc(v any) bool { _, ok := v.(bson.D); return ok }
func isArr(v any) bool { _, ok := v.(bson.A); return ok }

func cloneD(d bson.D) bson.D {
	out := make(bson.D, len(d))
	for i, e := range d {
		switch v := e.Value.(type) {
		case bson.D:
			e.Value = cloneD(v)
		case bson.A:
			e.Value = slices.Clone(v)
		}
		out[i] = e
	}
	return out
}

// checkJudge runs the transform from c on cases documents and updates of
// them, and fails when one judged unchanged changed the result.
func checkJudge(t *testing.T, c *choices, cases int) {
	t.Helper()
	src := judgeProgram(c)
	j := loadJob(t, src)
	for range cases {
		before := judgeDocument(c)
		after, ud, ok := judgeUpdate(t, c, before)
		if !ok {
			continue
		}
		skipped, equal, old, cur := judged(t, j, marshal(t, before), marshal(t, after), ud)
		if skipped && !equal {
			t.Fatalf("an update judged unchanged changed the result\ntransform:\n%s\nbefore: %v\nafter:  %v\nupdate: %v\nresult before: %s\nresult after:  %s",
				src, before, after, ud, old, cur)
		}
	}
}

func TestTheUnchangedJudgeNeverSkipsAChange(t *testing.T) {
	programs := 300
	if testing.Short() {
		programs = 60
	}
	r := rand.New(rand.NewPCG(28, 2))
	for p := range programs {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		c := &choices{b: b}
		t.Run(fmt.Sprint(p), func(t *testing.T) { checkJudge(t, c, 6) })
	}
}

func FuzzUnchangedJudge(f *testing.F) {
	r := rand.New(rand.NewPCG(28, 5))
	for range 4 {
		b := make([]byte, 96)
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkJudge(t, &choices{b: b}, 3)
	})
}
